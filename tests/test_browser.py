"""The demo page in a real headless Chromium (Debian's), driven by Playwright, against the whole stack on loopback.

Stack: the shared redis-server and Piper workers, a moto keys table, a speech front with a static full key and the
table, the avatar server and the demo server, each a real ``zsynth`` process. The page must speak (HTTP stream),
speak in realtime with advancing highlights, clone through its backend, run the avatar over WebRTC, and never
receive the full key.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from playwright import sync_api

from harness.base import ROOT, free_port
from harness.fronts import zsynth_process
from harness.voice_clips import reference_file
from harness.workers import WorkerProcess

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
]
# A static full key shaped like a table key, so a leak would be easy to spot in any encoding.
FULL_KEY = "zsk_live_demo" + secrets.token_urlsafe(24)
SCREENSHOT = ROOT / "docs" / "demo.png"

# No skip when the browser or Playwright is missing: scripts/install --test installs both, and a skipped browser test
# would let a broken install pass green.
pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def demo_url(redis_url: str, data_dir: Path, shared_workers: list[WorkerProcess], keys_table: str) -> Iterator[str]:
    """Speech front (static key + keys table), avatar server and demo server; yields the demo's URL."""
    ports = {"ZSYNTH_PORT": free_port(), "ZSYNTH_AVATAR_PORT": free_port(), "ZSYNTH_DEMO_PORT": free_port()}
    env = {
        **{name: str(port) for name, port in ports.items()},
        "ZSYNTH_HOST": "127.0.0.1",
        "ZSYNTH_REDIS_URL": redis_url,
        "ZSYNTH_DATA_DIR": str(data_dir),
        "ZSYNTH_API_KEY": FULL_KEY,
        "ZSYNTH_API_KEYS_TABLE": keys_table,
        "ZSYNTH_AVATAR_CONNECT_TIMEOUT": "30",
        "PYTHONUNBUFFERED": "1",
    }
    with (
        zsynth_process("serve", ports["ZSYNTH_PORT"], env),
        zsynth_process("avatar", ports["ZSYNTH_AVATAR_PORT"], env),
        zsynth_process("demo", ports["ZSYNTH_DEMO_PORT"], env) as (_, url),
    ):
        yield url


@dataclass
class Received:
    """Everything the page received: HTTP responses (bodies read later) and WebSocket frames."""

    responses: list[Any] = field(default_factory=list)
    frames: list[str | bytes] = field(default_factory=list)
    sent_headers: list[dict[str, str]] = field(default_factory=list)

    def attach(self, page: Any) -> None:
        page.on("response", lambda response: self.responses.append(response))
        page.on("request", lambda request: self.sent_headers.append(request.headers))
        page.on("websocket", lambda ws: ws.on("framereceived", lambda frame: self.frames.append(frame)))

    def assert_no_full_key(self, page: Any) -> int:
        """No response body, frame, page text or storage holds the full key; returns how many bodies were read."""
        needles = [FULL_KEY, quote(FULL_KEY, safe="")]
        texts: list[str] = [page.content(), page.evaluate("JSON.stringify({...localStorage, ...sessionStorage})")]
        read = 0
        for response in list(self.responses):
            with contextlib.suppress(sync_api.Error):  # a redirect or an aborted stream has no body
                texts.append(response.body().decode("latin-1"))
                read += 1
            texts.append(str(response.headers))
        texts += [f if isinstance(f, str) else f.decode("latin-1") for f in self.frames]
        texts += [str(headers) for headers in self.sent_headers]
        for text in texts:
            for needle in needles:
                assert needle not in text, "the full key reached the page"
        return read


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium, headless; Playwright never downloads a browser."""
    assert os.path.exists(CHROMIUM), f"{CHROMIUM} is missing: scripts/install --test installs Debian's chromium"
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Any, demo_url: str) -> Iterator[tuple[Any, Received]]:
    """A fresh page of the demo, loaded and ready (session fetched, voices listed)."""
    context = browser.new_context(viewport={"width": 1000, "height": 600})
    page = context.new_page()
    received = Received()
    received.attach(page)
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    # The page runs under the demo's Content-Security-Policy: anything it refuses (a call, a script) fails the test.
    page.on("console", lambda msg: errors.append(msg.text) if "Content Security Policy" in msg.text else None)
    page.goto(demo_url + "/")
    page.wait_for_function("() => document.body.dataset.ready", timeout=30_000)
    assert page.evaluate("document.body.dataset.ready") == "true", page.inner_text("#speech-status")
    yield page, received
    assert not errors, errors
    context.close()


def stats(page: Any, part: str) -> dict[str, Any]:
    result: dict[str, Any] = page.evaluate(f"window.demoStats.{part}")
    return result


def test_page_gets_tokens_not_the_key(page: tuple[Any, Received]) -> None:
    pg, received = page
    session = pg.evaluate("fetch('/demo/session').then((r) => r.json())")
    assert session["mode"] == "token"
    assert session["speech"]["token"].startswith("zsk_temp_")
    assert session["avatar"]["token"].startswith("zsk_temp_")
    assert session["speech"]["token"] != session["avatar"]["token"]
    assert [a["avatar_id"] for a in session["avatars"]] == ["ada", "theo"]
    assert pg.locator("#voice option").count() >= 1
    assert "ephemeral token" in pg.inner_text("#auth")
    assert received.assert_no_full_key(pg) >= 4  # page, script, style, session, voices


def test_speak_streams_and_plays(page: tuple[Any, Received]) -> None:
    pg, received = page
    pg.fill("#text", "Hello from the browser. This sentence is streamed over HTTP and played as it arrives.")
    pg.click("#speak")
    pg.wait_for_function("() => window.demoStats.speak.ended || window.demoStats.speak.error", timeout=60_000)
    speak = stats(pg, "speak")
    assert speak["error"] is None
    assert speak["bytes"] > 22050 * 2 * 2  # more than 2 s of 16-bit PCM at 22.05 kHz
    assert speak["scheduledSeconds"] > 2.0
    assert speak["played"] >= 1 and speak["played"] == speak["chunks"]  # every chunk's source ended: heard
    assert pg.evaluate("window.demoStats.audioState") == "running"
    received.assert_no_full_key(pg)


def test_realtime_highlights_advance(page: tuple[Any, Received]) -> None:
    pg, received = page
    text = "Realtime speech arrives in pieces, and every character lights up when it is heard."
    pg.fill("#text", text)
    pg.click("#realtime")
    pg.wait_for_function("() => window.demoStats.realtime.highlighted > 30", timeout=60_000)  # about half way
    if os.environ.get("ZSYNTH_UPDATE_SCREENSHOT") == "1":
        SCREENSHOT.parent.mkdir(exist_ok=True)
        pg.screenshot(path=str(SCREENSHOT), full_page=True)
    pg.wait_for_function("() => window.demoStats.realtime.ended || window.demoStats.realtime.error", timeout=60_000)
    realtime = stats(pg, "realtime")
    assert realtime["error"] is None
    assert realtime["frames"] >= 1 and realtime["bytes"] > 22050 * 2
    trace = [count for _, count in realtime["trace"]]
    assert trace == sorted(trace) and len(set(trace)) >= 3, trace  # highlighted characters advance with the audio
    collapsed = len(text.replace(" ", ""))
    assert realtime["highlighted"] >= 0.9 * collapsed, (realtime["highlighted"], collapsed)
    assert pg.locator("#spoken span.said").count() >= 0.9 * collapsed
    received.assert_no_full_key(pg)


def test_realtime_live_typing(page: tuple[Any, Received]) -> None:
    pg, received = page
    pg.check("#live")
    pg.click("#realtime")
    pg.wait_for_function("() => document.getElementById('realtime').textContent === 'Finish'", timeout=30_000)
    typed = "Typed live, word by word, and spoken while the words keep coming."
    pg.keyboard.type(typed, delay=25)
    pg.keyboard.press("Enter")
    pg.wait_for_function("() => window.demoStats.realtime.ended || window.demoStats.realtime.error", timeout=60_000)
    realtime = stats(pg, "realtime")
    assert realtime["error"] is None
    assert pg.inner_text("#spoken").strip() == typed
    trace = [count for _, count in realtime["trace"]]
    assert trace == sorted(trace) and len(set(trace)) >= 3, trace
    assert realtime["highlighted"] >= 0.9 * len(typed.replace(" ", ""))
    received.assert_no_full_key(pg)


def test_clone_goes_through_the_backend(page: tuple[Any, Received]) -> None:
    pg, received = page
    pg.click("#tab-clone")
    pg.fill("#clone-name", "Browser clone")
    pg.set_input_files("#clone-file", files=[{"name": "me.wav", "mimeType": "audio/wav", "buffer": reference_file()}])
    pg.click("#clone-form button[type=submit]")
    cloned = "() => document.getElementById('clone-status').textContent.startsWith('cloned')"
    pg.wait_for_function(cloned, timeout=60_000)
    voice_id = pg.eval_on_selector("#voice", "select => select.value")
    assert voice_id.startswith("custom-")
    # A token cannot clone: the page could only have done it through the backend, which holds the key.
    session = pg.evaluate("fetch('/demo/session').then((r) => r.json())")
    status = pg.evaluate(
        "([api, token]) => fetch(api + '/v1/voices/add', {method: 'POST', headers: {Authorization: 'Bearer ' + token},"
        " body: new FormData()}).then((r) => r.status)",
        [session["api_url"], session["speech"]["token"]],
    )
    assert status == 401
    received.assert_no_full_key(pg)


def test_avatar_streams_and_speaks(page: tuple[Any, Received]) -> None:
    pg, received = page
    pg.click("#tab-avatar")
    pg.click("#avatar-connect")
    pg.wait_for_function("() => window.demoStats.avatar.ready || window.demoStats.avatar.error", timeout=60_000)
    assert stats(pg, "avatar")["error"] is None
    pg.wait_for_function("() => document.getElementById('avatar-video').videoWidth > 0", timeout=30_000)
    size = pg.eval_on_selector("#avatar-video", "v => [v.videoWidth, v.videoHeight]")
    assert size == [512, 512]
    first = pg.eval_on_selector("#avatar-video", "v => v.currentTime")
    pg.wait_for_function(f"() => document.getElementById('avatar-video').currentTime > {first} + 0.5", timeout=30_000)
    pg.fill("#avatar-text", "Hello, I am the avatar in your browser.")
    pg.click("#avatar-speak")
    pg.wait_for_function("() => window.demoStats.avatar.events.includes('avatar.start_talking')", timeout=60_000)
    pg.wait_for_function("() => window.demoStats.avatar.spoken >= 1", timeout=60_000)
    events = stats(pg, "avatar")["events"]
    assert events.index("avatar.start_talking") < events.index("avatar.stop_talking")
    pg.click("#avatar-disconnect")
    pg.wait_for_function("() => !window.demoStats.avatar.connected", timeout=30_000)
    received.assert_no_full_key(pg)
