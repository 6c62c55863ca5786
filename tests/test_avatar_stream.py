"""The avatar server end to end: a loopback WebRTC viewer, the control socket, real Piper workers behind Redis."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import numpy as np
import pytest

from harness import avatar as avatar_peer
from harness.audio import assert_speech
from harness.avatar import Control, Viewer
from harness.base import make_settings
from zsynth.avatar.app import create_avatar_app
from zsynth.avatar.sessions import AVATAR_SESSIONS

KEY = "avatar-full-key"
HEADERS = {"X-Api-Key": KEY}
TEXT = "Hello there, I am the zsynth avatar and I am speaking to you right now."
LONG_TEXT = " ".join(["This is a long sentence that keeps the avatar talking for quite a while."] * 6)


# Both WebRTC peers gather loopback ICE candidates (the conftest fixture).
pytestmark = [pytest.mark.stack, pytest.mark.usefixtures("loopback_ice")]


def avatar_settings(redis_url: str, data_dir: Path, **overrides: object):
    return make_settings(
        redis_url, data_dir, **{"auth_api_keys": (KEY,), "avatar_connect_timeout_s": 30.0, **overrides}
    )


@pytest.fixture
async def avatar(aiohttp_client, redis_url, data_dir, shared_workers):
    """The avatar server on loopback, speaking through the shared Piper workers."""
    return await aiohttp_client(create_avatar_app(avatar_settings(redis_url, data_dir)))


async def open_session(client, viewer: Viewer, headers=HEADERS, **body) -> tuple[str, Control]:
    """:func:`avatar_peer.open_session` with this module's key by default."""
    return await avatar_peer.open_session(client, viewer, headers, **body)


async def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def leftover_tasks(baseline: set[asyncio.Task]) -> set[asyncio.Task]:
    return {t for t in asyncio.all_tasks() if t not in baseline and t is not asyncio.current_task() and not t.done()}


async def test_speak_streams_speech_and_lips_then_stop_tears_down(avatar) -> None:
    baseline = set(asyncio.all_tasks())
    viewer = Viewer()
    session_id, control = await open_session(avatar, viewer)
    await wait_until(lambda: len(viewer.audio) > 25 and len(viewer.video) > 10, 30, "audio and video frames")
    assert viewer.video_size == (512, 512)
    quiet_from = time.monotonic()
    await asyncio.sleep(1.0)
    quiet_to = time.monotonic()

    await control.ws.send_json({"type": "speak", "text": TEXT, "id": "greeting"})
    accepted = await control.next("speak.accepted")
    assert accepted["id"] == "greeting"
    start = await control.next("avatar.start_talking")
    stop = await control.next("avatar.stop_talking")
    assert start["task_id"] == stop["task_id"] == accepted["task_id"]
    assert stop["interrupted"] is False and stop["id"] == "greeting"
    await asyncio.sleep(0.5)  # the last frames cross the jitter buffer

    spoken = viewer.audio_between(control.arrival("avatar.start_talking"), control.arrival("avatar.stop_talking") + 0.3)
    duration = assert_speech(spoken, 48000, TEXT)
    assert abs(duration * 1000 - stop["duration_ms"]) < 1500, (duration, stop)
    silence = viewer.audio_between(quiet_from, quiet_to)
    assert silence.size and float(np.abs(silence).max()) < 0.01, "the idle stream should be silent"
    talking_motion = viewer.mouth_motion(
        control.arrival("avatar.start_talking"), control.arrival("avatar.stop_talking")
    )
    assert talking_motion > 3 * viewer.mouth_motion(quiet_from, quiet_to) + 0.5, "the mouth should move with speech"
    lag_ms, corr = viewer.lip_sync(control.arrival("avatar.start_talking"), control.arrival("avatar.stop_talking"))
    assert corr > 0.2 and abs(lag_ms) <= 240, f"lips and sound apart: best lag {lag_ms} ms, correlation {corr:.2f}"

    await control.ws.send_json({"type": "stop"})
    closed = await control.next("session.state")
    while closed.get("state") != "closed":
        closed = await control.next("session.state")
    assert closed["reason"] == "stopped"
    msg = await control.ws.receive(timeout=10)
    assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
    await viewer.close()
    assert session_id not in avatar.app[AVATAR_SESSIONS].sessions
    await wait_until(lambda: not leftover_tasks(baseline), 15, "session tasks to end")


# alone: silence is checked within a fixed time of the interrupt, which a loaded box stretches (failed once in a
# parallel pass).
@pytest.mark.alone
async def test_interrupt_silences_the_stream(avatar) -> None:
    viewer = Viewer()
    _, control = await open_session(avatar, viewer)
    await control.ws.send_json({"type": "speak", "text": LONG_TEXT, "id": "long"})
    await control.ws.send_json({"type": "speak", "text": TEXT, "id": "queued"})
    await control.next("avatar.start_talking")
    await asyncio.sleep(1.0)
    await control.ws.send_json({"type": "interrupt"})
    sent = time.monotonic()
    stop = await control.next("avatar.stop_talking")
    assert stop["interrupted"] is True and stop["id"] == "long"
    assert 0 < stop["duration_ms"] < 10000
    cancelled = await control.next("speak.cancelled")
    assert cancelled["id"] == "queued"
    await asyncio.sleep(1.5)
    # Loose bound for a busy machine; .venv/bin/python -m harness.bench avatar measures the real latency.
    after = viewer.audio_between(sent + 0.6, time.monotonic())
    assert after.size > 48000 // 2 and float(np.abs(after).max()) < 0.01, "speech went on after the interrupt"
    before = viewer.audio_between(control.arrival("avatar.start_talking"), sent)
    assert float(np.sqrt(np.mean(before**2))) > 0.02, "there was speech before the interrupt"
    # The session stays usable: the next task speaks.
    await control.ws.send_json({"type": "speak", "text": "And now a short one.", "id": "next"})
    assert (await control.next("avatar.start_talking"))["id"] == "next"
    assert (await control.next("avatar.stop_talking"))["interrupted"] is False
    await control.ws.close()
    await viewer.close()


async def test_idle_session_ends_and_keep_alive_defers_it(aiohttp_client, redis_url, data_dir, shared_workers) -> None:
    client = await aiohttp_client(create_avatar_app(avatar_settings(redis_url, data_dir, avatar_idle_timeout_s=1.0)))
    baseline = set(asyncio.all_tasks())
    viewer = Viewer()
    session_id, control = await open_session(client, viewer)
    for _ in range(3):  # keep-alives every half second hold the session past its 1 s timeout
        await asyncio.sleep(0.5)
        await control.ws.send_json({"type": "keep_alive"})
        await control.next("pong")
    assert session_id in client.app[AVATAR_SESSIONS].sessions
    event = await control.next("session.state", timeout=30)
    while event.get("state") != "closed":
        event = await control.next("session.state", timeout=30)
    assert event["reason"] == "idle_timeout"
    msg = await control.ws.receive(timeout=10)
    assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
    assert session_id not in client.app[AVATAR_SESSIONS].sessions
    await wait_until(lambda: viewer.pc.connectionState == "closed", 15, "the viewer to see the peer close")
    await viewer.close()
    await wait_until(lambda: not leftover_tasks(baseline), 15, "session tasks to end")


async def test_session_limit_and_management_close(aiohttp_client, redis_url, data_dir, shared_workers) -> None:
    client = await aiohttp_client(create_avatar_app(avatar_settings(redis_url, data_dir, avatar_max_sessions=1)))
    first = Viewer()
    session_id, control = await open_session(client, first, headers={"Authorization": f"Bearer {KEY}"})

    second = Viewer()
    resp = await client.post("/connect", json=await second.offer(), headers=HEADERS)
    assert resp.status == 503
    body = await resp.json()
    assert body["code"] == "capacity" and "limit of 1" in body["message"]
    await second.close()

    await wait_until(lambda: bool(first.video), 30, "the first video frame")
    listed = await (await client.get("/v1/sessions", headers=HEADERS)).json()
    assert listed["limit"] == 1 and [s["session_id"] for s in listed["data"]] == [session_id]
    assert listed["data"][0]["control_attached"] is True and listed["data"][0]["video_frames_sent"] > 0
    resp = await client.delete(f"/v1/sessions/{session_id}", headers=HEADERS)
    assert resp.status == 200 and (await resp.json())["data"]["closed"] is True
    event = await control.next("session.state")
    while event.get("state") != "closed":
        event = await control.next("session.state")
    assert event["reason"] == "closed_by_api"
    assert (await (await client.get("/v1/sessions", headers=HEADERS)).json())["data"] == []
    await first.close()

    third = Viewer()
    session_id, control = await open_session(client, third)  # the slot is free again
    await control.ws.close()
    await third.close()
    await wait_until(lambda: not client.app[AVATAR_SESSIONS].sessions, 15, "the session to close with its socket")


async def test_control_errors_and_bad_offers(avatar) -> None:
    resp = await avatar.post("/connect", json={"sdp": "v=0\r\n", "type": "offer"}, headers=HEADERS)
    assert resp.status == 400 and (await resp.json())["code"] == "invalid_sdp"
    for bad in ("not json", "[" * 100_000, '{"sdp": ' + "9" * 5000 + "}", '{"sdp": NaN}'):
        resp = await avatar.post("/connect", data=bad, headers=HEADERS)
        assert resp.status == 400 and (await resp.json())["code"] == "invalid_json", bad[:20]
    viewer = Viewer()
    resp = await avatar.post("/connect", json={**(await viewer.offer()), "avatar_id": "nobody"}, headers=HEADERS)
    assert resp.status == 404 and (await resp.json())["code"] == "avatar_not_found"
    resp = await avatar.get("/control/0123456789abcdef", headers=HEADERS)
    assert resp.status == 404 and (await resp.json())["code"] == "session_not_found"

    session_id, control = await open_session(avatar, viewer, avatar_id="theo")
    resp = await avatar.get(f"/control/{session_id}", headers=HEADERS)
    assert resp.status == 409 and (await resp.json())["code"] == "already_attached"
    # Malformed, deeply nested, over-long numbers and NaN: each an error event, and the session goes on.
    for bad in ("{not json", "[" * 100_000, '{"type": ' + "9" * 5000 + "}", '{"type": "speak", "text": NaN}'):
        await control.ws.send_str(bad)
        assert (await control.next("error"))["code"] == "invalid_message", bad[:20]
    await control.ws.send_json({"text": "no type"})
    assert (await control.next("error"))["code"] == "invalid_message"
    await control.ws.send_json({"type": "dance"})
    assert (await control.next("error"))["code"] == "unknown_command"
    refusals: list[tuple[dict[str, object], str]] = [
        ({}, "invalid_text"),
        ({"text": "  "}, "invalid_text"),
        ({"text": "x" * 100_000}, "text_too_long"),
    ]
    refusals.append(({"text": "Hi.", "voice_id": 7}, "invalid_voice_id"))
    for n, (fields, code) in enumerate(refusals):
        await control.ws.send_json({"type": "speak", "id": f"cmd-{n}", **fields})
        error = await control.next("error")
        assert (error["code"], error["id"]) == (code, f"cmd-{n}")  # each refusal names the command it answers
    await control.ws.close()
    await viewer.close()
    await wait_until(lambda: not avatar.app[AVATAR_SESSIONS].sessions, 15, "the session to close with its socket")


async def test_a_peer_that_never_connects_is_dropped(aiohttp_client, redis_url, data_dir) -> None:
    settings = avatar_settings(redis_url, data_dir, avatar_connect_timeout_s=1.0)
    client = await aiohttp_client(create_avatar_app(settings))
    baseline = set(asyncio.all_tasks())
    viewer = Viewer()
    # The answer is never applied. The connection closes with the answer: its keep-alive handler would otherwise
    # count among the tasks left over (for the server's keep-alive timeout) though it is no session's.
    resp = await client.post("/connect", json=await viewer.offer(), headers={**HEADERS, "Connection": "close"})
    assert resp.status == 200
    session = client.app[AVATAR_SESSIONS].sessions[(await resp.json())["session_id"]]
    await wait_until(lambda: not client.app[AVATAR_SESSIONS].sessions, 20, "the connect timeout")
    assert session.close_reason == "connect_timeout"
    assert session.audio.readyState == session.video.readyState == "ended"
    await viewer.close()
    await wait_until(lambda: not leftover_tasks(baseline), 15, "session tasks to end")


async def test_speech_that_never_comes_is_reported(aiohttp_client, private_redis_url, data_dir) -> None:
    # No worker serves this database: the job's first-chunk deadline passes.
    settings = avatar_settings(private_redis_url, data_dir, jobs_first_chunk_timeout_s=1.0)
    client = await aiohttp_client(create_avatar_app(settings))
    viewer = Viewer()
    resp = await client.post("/connect", json=await viewer.offer(), headers=HEADERS)
    answer = await resp.json()
    await viewer.accept(answer)
    control = Control(await client.ws_connect(answer["control_url"], headers=HEADERS))
    await control.ws.send_json({"type": "speak", "text": "Is anybody there?", "id": "lonely"})
    accepted = await control.next("speak.accepted")
    error = await control.next("error")
    assert (
        error["code"] == "synthesis_unavailable" and error["task_id"] == accepted["task_id"] and error["id"] == "lonely"
    )
    await control.ws.send_json({"type": "ping"})
    await control.next("pong")
    assert not [e for _, e in control.events if e["type"].startswith("avatar.")], "a failed task never talks"
    await control.ws.close()
    await viewer.close()
