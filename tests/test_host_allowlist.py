"""DNS rebinding and cross-site pages against real ``zsynth`` processes: the host allow-list on open servers and on
the demo, the WebSocket origin check in open mode, the demo's Content-Security-Policy and framing refusal, and the
avatar server's token minting offered to no page.

A rebinding page's requests carry its own name in both ``Host`` and ``Origin``; the tests send exactly that.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from harness.base import free_port
from harness.fronts import front_process, zsynth_process
from harness.workers import WorkerProcess
from zsynth.core.config import Settings
from zsynth.kit.hosts import AllowedHosts, host_name

from .helpers import status_and_code

KEY = "host-allowlist-full-key"
REBOUND = "attacker.example"  # the page's name, re-pointed at 127.0.0.1
TIMEOUT = aiohttp.ClientTimeout(total=60)


def rebound(base: str) -> dict[str, str]:
    """The headers a rebinding page's request carries: its own name as Host and Origin."""
    port = base.rsplit(":", 1)[1]
    return {"Host": f"{REBOUND}:{port}", "Origin": f"http://{REBOUND}:{port}"}


def upgrade_headers(origin: str | None) -> dict[str, str]:
    """A browser's WebSocket upgrade request, sent as plain HTTP so the refusal's body can be read."""
    headers = {
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
    }
    if origin is not None:
        headers["Origin"] = origin
    return headers


@pytest.fixture(scope="module")
def open_front(redis_url: str, data_dir: Path, shared_workers: list[WorkerProcess]) -> Iterator[str]:
    """A front without keys, as ``zsynth dev`` runs it on loopback."""
    with front_process(redis_url, data_dir, ZSYNTH_LOG_LEVEL="WARNING") as (_, base):
        yield base


@pytest.mark.heavy
async def test_an_open_front_refuses_a_rebinding_host(open_front) -> None:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        # The write a rebinding page would send: Origin == Host, so the cross-site write guard alone lets it through.
        speech = f"{open_front}/v1/text-to-speech/joe?output_format=pcm_16000"
        async with http.post(speech, json={"text": "Rebound."}, headers=rebound(open_front)) as resp:
            assert await status_and_code(resp) == (421, "host_not_allowed")
        async with http.get(f"{open_front}/v1/voices", headers=rebound(open_front)) as resp:
            body = await resp.json()
            assert resp.status == 421 and body["detail"]["type"] == "invalid_request"
            assert "ZSYNTH_ALLOWED_HOSTS" in body["detail"]["message"] and body["detail"]["request_id"]
        # The OpenAI route answers in its own envelope.
        openai = {"model": "tts-1", "input": "Rebound.", "voice": "alloy"}
        async with http.post(f"{open_front}/v1/audio/speech", json=openai, headers=rebound(open_front)) as resp:
            assert resp.status == 421 and (await resp.json())["error"]["code"] == "host_not_allowed"
        # Loopback names are served, a write from a page on one of them too.
        port = open_front.rsplit(":", 1)[1]
        # An IP address cannot be rebound: a health probe or a LAN client reaching the box by address is served.
        for host in ("127.0.0.1", "localhost", "[::1]", "LOCALHOST.", "10.1.2.3", "[fd00::1]"):
            async with http.get(f"{open_front}/v1/voices", headers={"Host": f"{host}:{port}"}) as resp:
                assert resp.status == 200, (host, await resp.text())
        page = {"Host": f"localhost:{port}", "Origin": "http://localhost:8200"}
        async with http.post(speech, json={"text": "Served."}, headers=page) as resp:
            assert resp.status == 200 and len(await resp.read()) > 1000


@pytest.mark.heavy
async def test_an_open_front_refuses_websockets_from_other_sites(open_front) -> None:
    url = f"{open_front}/v1/text-to-speech/joe/stream-input"
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        async with http.get(url, headers=upgrade_headers("https://evil.example")) as resp:
            assert await status_and_code(resp) == (403, "cross_origin_refused")
        # A page served from an IP address is another site too (only the Host check lets addresses through).
        for foreign in ("https://evil.example", "http://203.0.113.5"):
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(url, origin=foreign)
            assert refused.value.status == 403
        # The demo page on loopback, and a client that is not a browser (no Origin), may open it.
        for allowed in ("http://localhost:8200", None):
            async with http.ws_connect(url, origin=allowed) as ws:
                assert not ws.closed


@pytest.mark.heavy
async def test_allowed_hosts_adds_names_and_keys_are_not_affected(redis_url, data_dir, shared_workers) -> None:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        named = {"ZSYNTH_ALLOWED_HOSTS": "speech.example", "ZSYNTH_LOG_LEVEL": "WARNING"}
        with front_process(redis_url, data_dir, **named) as (_, base):
            port = base.rsplit(":", 1)[1]
            async with http.get(f"{base}/v1/voices", headers={"Host": f"Speech.Example:{port}"}) as resp:
                assert resp.status == 200
            async with http.get(f"{base}/v1/voices", headers=rebound(base)) as resp:
                assert await status_and_code(resp) == (421, "host_not_allowed")
        # With keys the credential protects the server: any Host is answered unless ZSYNTH_ALLOWED_HOSTS is set.
        with front_process(redis_url, data_dir, ZSYNTH_API_KEY=KEY, ZSYNTH_LOG_LEVEL="WARNING") as (_, base):
            async with http.get(f"{base}/v1/voices", headers={**rebound(base), "xi-api-key": KEY}) as resp:
                assert resp.status == 200


@pytest.mark.heavy
async def test_an_open_avatar_server_refuses_rebinding_and_foreign_sockets(redis_url, data_dir) -> None:
    port = free_port()
    env = {"ZSYNTH_REDIS_URL": redis_url, "ZSYNTH_DATA_DIR": str(data_dir), "ZSYNTH_AVATAR_PORT": str(port)}
    with zsynth_process("avatar", port, {**env, "ZSYNTH_LOG_LEVEL": "WARNING"}) as (_, base):
        async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
            async with http.get(f"{base}/v1/avatars", headers=rebound(base)) as resp:
                body = await resp.json()
                assert resp.status == 421 and body["code"] == "host_not_allowed" and body["message"]
            async with http.get(f"{base}/v1/avatars") as resp:
                assert resp.status == 200
            foreign = upgrade_headers("https://evil.example")
            async with http.get(f"{base}/control/some-session", headers=foreign) as resp:
                assert resp.status == 403 and (await resp.json())["code"] == "cross_origin_refused"


@pytest.fixture(scope="module")
def demo_stack(redis_url: str, data_dir: Path, shared_workers: list[WorkerProcess], keys_table: str) -> Iterator[str]:
    """A keyed front, a keyed avatar server (tokens in the keys table) and the demo holding the key; yields the
    demo's URL."""
    ports = {"ZSYNTH_PORT": free_port(), "ZSYNTH_AVATAR_PORT": free_port(), "ZSYNTH_DEMO_PORT": free_port()}
    env = {
        **{name: str(port) for name, port in ports.items()},
        "ZSYNTH_REDIS_URL": redis_url,
        "ZSYNTH_DATA_DIR": str(data_dir),
        "ZSYNTH_API_KEY": KEY,
        "ZSYNTH_API_KEYS_TABLE": keys_table,
        "ZSYNTH_LOG_LEVEL": "WARNING",
    }
    with (
        zsynth_process("serve", ports["ZSYNTH_PORT"], env),
        zsynth_process("avatar", ports["ZSYNTH_AVATAR_PORT"], env),
        zsynth_process("demo", ports["ZSYNTH_DEMO_PORT"], env) as (_, url),
    ):
        yield url


@pytest.mark.heavy
async def test_the_demo_refuses_a_rebinding_host(demo_stack) -> None:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        # What the rebinding page is after: tokens minted with the demo's key, and clones made with it.
        async with http.get(f"{demo_stack}/demo/session", headers=rebound(demo_stack)) as resp:
            assert await status_and_code(resp) == (421, "host_not_allowed")
        form = aiohttp.FormData()
        form.add_field("name", "rebound")
        form.add_field("files", b"RIFF", filename="clip.wav", content_type="audio/wav")
        async with http.post(f"{demo_stack}/demo/clone", data=form, headers=rebound(demo_stack)) as resp:
            assert await status_and_code(resp) == (421, "host_not_allowed")
        async with http.get(f"{demo_stack}/", headers=rebound(demo_stack)) as resp:
            assert resp.status == 421
        # On its own name the page gets its tokens.
        async with http.get(f"{demo_stack}/demo/session") as resp:
            body = await resp.json()
            assert resp.status == 200 and body["speech"]["token"].startswith("zsk_temp_")


@pytest.mark.heavy
async def test_the_demo_page_sends_a_content_security_policy_and_refuses_framing(demo_stack) -> None:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        async with http.get(f"{demo_stack}/demo/session") as resp:
            session = await resp.json()
        for path in ("/", "/static/app.js", "/demo/session", "/no-such-page"):
            async with http.get(f"{demo_stack}{path}") as resp:
                policy = resp.headers.get("Content-Security-Policy", "")
                assert resp.headers.get("X-Frame-Options") == "DENY", path
                assert resp.headers.get("X-Content-Type-Options") == "nosniff", path
        directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
        assert directives["frame-ancestors"] == "'none'" and directives["script-src"] == "'self'"
        assert directives["default-src"] == "'self'" and directives["object-src"] == "'none'"
        # The page may call itself, the speech API and the avatar server (HTTP and WebSocket), nothing else.
        connect = set(directives["connect-src"].split())
        api, avatar = session["api_url"], session["avatar_url"]
        ws = {url.replace("http://", "ws://") for url in (api, avatar)}
        assert connect == {"'self'", api, avatar, *ws}


@pytest.mark.heavy
async def test_the_avatar_offers_token_minting_to_no_page(demo_stack) -> None:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        async with http.get(f"{demo_stack}/demo/session") as resp:
            avatar = (await resp.json())["avatar_url"]
        page = {"Origin": "https://app.example"}
        mint = f"{avatar}/v1/streaming.create_token"
        async with http.post(mint, json={}, headers={**page, "X-Api-Key": KEY}) as resp:
            assert resp.status == 200 and "Access-Control-Allow-Origin" not in resp.headers
        preflight = {**page, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "x-api-key"}
        async with http.options(mint, headers=preflight) as resp:
            assert "Access-Control-Allow-Origin" not in resp.headers
            assert "Access-Control-Allow-Methods" not in resp.headers
        # The routes a page uses stay offered to any page.
        async with http.options(f"{avatar}/connect", headers=preflight) as resp:
            assert resp.status == 204 and resp.headers["Access-Control-Allow-Origin"] == "*"
        async with http.get(f"{avatar}/v1/avatars", headers={**page, "X-Api-Key": KEY}) as resp:
            assert resp.status == 200 and resp.headers["Access-Control-Allow-Origin"] == "*"


@pytest.mark.stack
def test_the_allowed_names_come_from_the_settings() -> None:
    settings = Settings().with_(
        http_host="192.0.2.10",
        http_allowed_hosts=("Speech.Example.com.",),
        demo_api_url="https://api.example.com:8443",
        demo_avatar_url="https://avatar.example.com",
    )
    hosts = AllowedHosts.from_settings(settings)
    for host in ("speech.example.com:443", "API.example.com", "avatar.example.com", "localhost:8000", "[::1]:80"):
        assert hosts.admits(host_name(host)), host
    assert not hosts.admits(host_name(f"{REBOUND}:8000")) and not hosts.admits(None)
    assert hosts.configured and not hosts.any_host
    assert AllowedHosts.from_settings(Settings().with_(http_allowed_hosts=("*",))).admits("anything.example")
    # A WebSocket's page must be on loopback or a named host: any IP address is not enough, "*" neither.
    assert hosts.admits_origin("http://localhost:8200") and hosts.admits_origin("https://speech.example.com")
    assert hosts.admits_origin("http://192.0.2.10:8200")  # the bound address is named
    assert not hosts.admits_origin("http://203.0.113.5") and not hosts.admits_origin("null")
    assert not AllowedHosts.from_settings(Settings().with_(http_allowed_hosts=("*",))).admits_origin(
        "https://evil.example"
    )
