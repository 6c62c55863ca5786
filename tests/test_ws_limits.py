"""Realtime socket limits: message size, message rate, sockets per credential."""

from __future__ import annotations

import asyncio

import aiohttp

from zsynth.speech.app import create_app

from .helpers import make_settings
from .ws_helpers import collect

KEY = "sk-limits"
PATH = "/v1/text-to-speech/any-voice/stream-input"


async def keyed_client(aiohttp_client, redis_url, data_dir, **overrides):
    settings = make_settings(redis_url, data_dir, api_key=KEY, **overrides)
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
