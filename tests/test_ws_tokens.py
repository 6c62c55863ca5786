"""The realtime socket with ephemeral tokens from the real keys table, as a browser uses it."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from harness.audio import assert_speech, decode_audio
from harness.base import make_settings
from harness.fronts import clocked_app
from harness.ws import Received, collect, squash
from zsynth.services.auth import AUTHENTICATOR

pytestmark = pytest.mark.stack

FULL_KEY = "sk-ws-token-test"
TEXT = "A browser holds only a short lived token, never the full key."


@pytest.fixture
async def token_client(aiohttp_client, redis_url, data_dir, shared_workers, keys_table):
    settings = make_settings(redis_url, data_dir, auth_api_key=FULL_KEY, auth_keys_table=keys_table)
    return await aiohttp_client(clocked_app(settings))


async def mint(client) -> str:
    resp = await client.post("/v1/tokens/ephemeral", json={"ttl_seconds": 60}, headers={"xi-api-key": FULL_KEY})
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["token"].startswith("zsk_temp_") and body["scope"] == "tts"
    return str(body["token"])


async def speak(client, url: str) -> Received:
    ws = await client.ws_connect(url)
    await ws.send_json({"text": " "})
    await ws.send_json({"text": TEXT + " ", "flush": True})
    await ws.send_json({"text": ""})
    return await collect(ws)


async def test_token_in_query_string_speaks_with_alignment(token_client):
    token = await mint(token_client)
    url = "/v1/text-to-speech/any-voice/stream-input?output_format=pcm_16000&authorization=" + quote(f"Bearer {token}")
    got = await speak(token_client, url)
    assert got.errors == [] and got.close_code == 1000
    samples, rate = decode_audio(got.audio(), "pcm_16000")
    assert_speech(samples, rate, TEXT)
    assert got.chars() == squash(TEXT)


async def test_expired_token_gets_error_frame_and_1008(token_client):
    token = await mint(token_client)
    token_client.server.app[AUTHENTICATOR].clock.advance(61)
    url = "/v1/text-to-speech/any-voice/stream-input?authorization=" + quote(f"Bearer {token}")
    got = await speak(token_client, url)
    assert got.close_code == 1008
    assert [frame["error"] for frame in got.errors] == ["invalid_api_key"]
    assert got.audio() == b""
