"""Realtime socket limits: message size, message rate, sockets per credential, contexts, unauthenticated sockets."""

from __future__ import annotations

import asyncio
import importlib
import ipaddress

import aiohttp
import pytest

from harness.audio import assert_speech, decode_audio
from harness.base import make_settings
from harness.ws import collect
from zsynth.speech.app import create_app

pytestmark = pytest.mark.stack

KEY = "sk-limits"
PATH = "/v1/text-to-speech/any-voice/stream-input"


async def keyed_client(aiohttp_client, redis_url, data_dir, **overrides):
    settings = make_settings(redis_url, data_dir, auth_api_key=KEY, **overrides)
    return await aiohttp_client(create_app(settings))


async def test_oversized_message_closes_with_1009(aiohttp_client, redis_url, data_dir, shared_workers):
    client = await keyed_client(aiohttp_client, redis_url, data_dir, ws_max_message_bytes=4096)
    ws = await client.ws_connect(PATH, headers={"xi-api-key": KEY})
    await ws.send_json({"text": " "})
    await ws.send_json({"text": "word " * 2000})
    msg = await ws.receive(timeout=10)
    while msg.type not in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING):
        msg = await ws.receive(timeout=10)
    assert ws.close_code == 1009


async def test_message_flood_gets_rate_limit_error(aiohttp_client, redis_url, data_dir, shared_workers):
    client = await keyed_client(aiohttp_client, redis_url, data_dir, ws_max_messages_per_s=5.0)
    ws = await client.ws_connect(PATH, headers={"xi-api-key": KEY})
    await ws.send_json({"text": " "})
    for _ in range(40):
        await ws.send_json({"text": " "})
    got = await collect(ws)
    assert got.close_code == 1008
    assert [frame["error"] for frame in got.errors] == ["rate_limit_exceeded"]


async def test_sockets_per_credential_are_bounded(aiohttp_client, redis_url, data_dir, shared_workers):
    client = await keyed_client(aiohttp_client, redis_url, data_dir, ws_max_sockets_per_credential=2)
    first = [await client.ws_connect(PATH, headers={"xi-api-key": KEY}) for _ in range(2)]
    for ws in first:
        await ws.send_json({"text": " "})
    await asyncio.sleep(0.5)  # both authenticated and counted
    third = await client.ws_connect(PATH, headers={"xi-api-key": KEY})
    await third.send_json({"text": " "})
    got = await collect(third)
    assert got.close_code == 1008
    assert [frame["error"] for frame in got.errors] == ["too_many_concurrent_requests"]
    await first[0].close()
    await asyncio.sleep(0.5)
    fourth = await client.ws_connect(PATH, headers={"xi-api-key": KEY})
    await fourth.send_json({"text": " "})
    await fourth.send_json({"text": "Room again for one more socket. ", "flush": True})
    await fourth.send_json({"text": ""})
    got = await collect(fourth)
    assert got.errors == [] and got.close_code == 1000 and got.audio()
    await first[1].close()


# ----- issue 36, F5: contexts closed but still speaking count; context ids are bounded ----------------------------

MULTI = "/v1/text-to-speech/any-voice/multi-stream-input?output_format=pcm_16000"


async def test_closed_contexts_count_until_their_audio_is_sent(
    aiohttp_client, private_redis_url, data_dir, monkeypatch
):
    """F5: one socket looping open, flush, close. No worker runs on this database, so no context ever finishes its
    audio: before the fix every loop queued one more job (748 contexts in 20 s); now a sixth context waits for a
    closed one to finish, and the socket ends with ``max_active_conversations`` when none does in time (3 s here,
    10 s as shipped: the queue is watched all that while)."""
    # (The package's name multi_stream_input is the route's function: the module itself, by its full name.)
    monkeypatch.setattr(importlib.import_module("zsynth.speech.ws.multi_stream_input"), "CLOSING_WAIT_S", 3.0)
    settings = make_settings(private_redis_url, data_dir, auth_api_key=KEY, jobs_first_chunk_timeout_s=60.0)
    client = await aiohttp_client(create_app(settings))
    ws = await client.ws_connect(MULTI, headers={"xi-api-key": KEY})
    for n in range(8):
        await ws.send_json({"text": f"Context {n} says one short sentence. ", "context_id": f"c{n}", "flush": True})
        await ws.send_json({"context_id": f"c{n}", "close_context": True})
    most = 0
    ending = asyncio.ensure_future(collect(ws, timeout=30))
    # The realtime jobs waiting in the queue, as an operator's metrics show them, all the while the sixth context
    # waits (until the socket ends).
    while not ending.done():
        text = await (await client.get("/metrics", headers={"xi-api-key": KEY})).text()
        line = next(line for line in text.splitlines() if line.startswith('zsynth_queue_depth{priority="realtime"}'))
        most = max(most, int(float(line.split()[-1])))
        await asyncio.sleep(0.2)
    assert most == 5, f"{most} contexts' jobs queued at once from one socket"
    got = await ending
    assert [frame["error"] for frame in got.errors] == ["max_active_conversations"] and got.close_code == 1008


async def test_a_socket_looping_open_flush_close_is_paced_not_cut(aiohttp_client, redis_url, data_dir, shared_workers):
    """The same loop against live workers: every context is spoken whole and gets its isFinal, five at most at once."""
    client = await keyed_client(aiohttp_client, redis_url, data_dir)
    ws = await client.ws_connect(MULTI, headers={"xi-api-key": KEY})
    for n in range(8):
        await ws.send_json({"text": f"Turn {n} is short. ", "context_id": f"t{n}", "flush": True})
        await ws.send_json({"context_id": f"t{n}", "close_context": True})
    await ws.send_json({"close_socket": True})
    got = await collect(ws)
    assert got.errors == [] and got.close_code == 1000
    assert sorted(frame["contextId"] for frame in got.finals) == sorted(f"t{n}" for n in range(8))
    for n in range(8):
        assert got.chars(f"t{n}") == f"Turn {n} is short."
        samples, rate = decode_audio(got.audio(f"t{n}"), "pcm_16000")
        assert_speech(samples, rate, f"Turn {n} is short.")
    # A context's first frame comes only once fewer than five others are open (started and without their isFinal).
    open_now: set[str | None] = set()
    for frame in got.frames:
        context = frame.get("contextId")
        if frame.get("isFinal"):
            open_now.discard(context)
        elif frame.get("audio"):
            open_now.add(context)
            assert len(open_now) <= 5


async def test_a_context_id_over_128_characters_is_refused(client):
    ws = await client.ws_connect(MULTI)
    await ws.send_json({"text": " ", "context_id": "c" * 128})
    await ws.send_json({"text": "The longest id is fine. ", "context_id": "c" * 128, "flush": True})
    await ws.send_json({"text": "One more is not. ", "context_id": "x" * 129})
    got = await collect(ws)
    assert got.close_code == 1008
    assert [frame["error"] for frame in got.errors] == ["invalid_message"]
    assert "128 characters" in got.errors[0]["message"]
    assert all(frame.get("contextId") != "x" * 129 for frame in got.frames)


# ----- issue 36, F6: sockets waiting for their first-message key, per address -------------------------------------


async def test_one_address_cannot_take_every_place_of_first_message_auth(
    aiohttp_client, redis_url, data_dir, shared_workers
):
    """F6: one address held every place of the front's unauthenticated sockets, so clients that send their key in
    the first message (ElevenLabs' own pattern) got 503. Now it holds its own 16; another address still gets in.
    The addresses are the clients a trusted proxy names, as every per-address limit reads them."""
    settings = make_settings(
        redis_url,
        data_dir,
        auth_api_key=KEY,
        ws_max_unauthenticated=20,
        http_trusted_proxies=(ipaddress.ip_network("127.0.0.1/32"),),
    )
    client = await aiohttp_client(create_app(settings))
    held: list[aiohttp.ClientWebSocketResponse] = []
    refused: aiohttp.WSServerHandshakeError | None = None
    for _ in range(20):
        try:
            held.append(await client.ws_connect(PATH, headers={"X-Forwarded-For": "203.0.113.7"}))
        except aiohttp.WSServerHandshakeError as err:
            refused = err
            break
    assert len(held) == 16 and refused is not None, f"one address holds {len(held)} unauthenticated sockets"
    assert refused.status == 429 and refused.headers is not None and refused.headers.get("Retry-After") == "1"
    ws = await client.ws_connect(PATH + "?output_format=pcm_16000", headers={"X-Forwarded-For": "198.51.100.9"})
    await ws.send_json({"text": " ", "xi_api_key": KEY})
    await ws.send_json({"text": "Another address still gets its turn. ", "flush": True})
    await ws.send_json({"text": ""})
    got = await collect(ws)
    assert got.errors == [] and got.close_code == 1000
    samples, rate = decode_audio(got.audio(), "pcm_16000")
    assert_speech(samples, rate, "Another address still gets its turn.")
    # A place comes back once a held socket authenticates.
    await held[0].send_json({"text": " ", "xi_api_key": KEY})
    await asyncio.sleep(0.3)
    held.append(await client.ws_connect(PATH, headers={"X-Forwarded-For": "203.0.113.7"}))
    for socket in held:
        await socket.close()
