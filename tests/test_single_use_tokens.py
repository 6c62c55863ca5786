"""ElevenLabs single-use tokens: minted with the real SDK's ``client.tokens.single_use.create("tts_websocket")``,
redeemed once as ``?single_use_token=`` on the realtime sockets of two real fronts sharing one Redis."""

from __future__ import annotations

import asyncio

import aiohttp
import httpx
import pytest
import redis
import redis.asyncio as aioredis
from elevenlabs import ElevenLabs
from elevenlabs.core.api_error import ApiError

from harness.audio import assert_speech, decode_audio
from harness.base import make_settings
from harness.fronts import FakeClock, front_process
from harness.ws import Received, collect
from zsynth.core.protocol import SINGLE_USE_TOKEN_PREFIX
from zsynth.services import single_use
from zsynth.services.auth import Credential, fingerprint
from zsynth.speech.app import create_app

pytestmark = pytest.mark.heavy

KEY = "single-use-static-key"
TEXT = "This socket was opened with a single use token."
LIMIT = 2  # sockets per key on each front (its tokens' sockets included)


@pytest.fixture(scope="module")
def fronts(redis_url, data_dir, shared_workers):
    env = {"ZSYNTH_API_KEY": KEY, "ZSYNTH_WS_MAX_SOCKETS_PER_CREDENTIAL": str(LIMIT)}
    with front_process(redis_url, data_dir, **env) as (_, one), front_process(redis_url, data_dir, **env) as (_, two):
        yield one, two


@pytest.fixture(scope="module")
def sdk(fronts) -> ElevenLabs:
    return ElevenLabs(base_url=fronts[0], api_key=KEY)


def ws_url(base: str, path: str, token: str) -> str:
    return base.replace("http", "ws", 1) + f"{path}?output_format=pcm_16000&single_use_token={token}"


async def speak_once(base: str, token: str, path: str = "/v1/text-to-speech/joe/stream-input") -> Received:
    """Open a socket with the token and no key, speak TEXT and collect what comes back."""
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url(base, path, token)) as ws:
        context = {"context_id": "c1"} if "multi" in path else {}
        await ws.send_json({"text": " ", **context})
        await ws.send_json({"text": TEXT + " ", **context, "flush": bool(context)})
        await ws.send_json({"text": "", **context} if not context else {"close_socket": True})
        return await collect(ws)


def test_the_sdk_mints_a_15_minute_token(sdk, redis_url):
    token = sdk.tokens.single_use.create("tts_websocket").token
    assert token.startswith("sutkn_") and len(token) > 30
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(SINGLE_USE_TOKEN_PREFIX + "*"))
    ttls = [client.ttl(key) for key in keys]
    assert ttls and all(0 < ttl <= 900 for ttl in ttls) and max(ttls) > 890
    assert not any(token.encode() in (client.get(key) or b"") for key in keys)  # the token itself is never stored


@pytest.mark.parametrize("path", ["/v1/text-to-speech/joe/stream-input", "/v1/text-to-speech/joe/multi-stream-input"])
async def test_a_token_opens_one_socket_without_a_key(sdk, fronts, path):
    token = sdk.tokens.single_use.create("tts_websocket").token
    got = await speak_once(fronts[0], token, path)
    assert got.close_code == 1000 and not got.errors, got.frames
    assert_speech(*decode_audio(got.audio(), "pcm_16000"), TEXT)
    again = await speak_once(fronts[1], token, path)  # spent: another front refuses it too
    assert again.close_code == 1008 and not again.audio()
    assert again.errors[0]["error"] == "invalid_api_key"
    assert "already used" in again.errors[0]["message"]


async def test_two_fronts_at_once_accept_it_once(sdk, fronts):
    for _ in range(3):
        token = sdk.tokens.single_use.create("tts_websocket").token
        results = await asyncio.gather(*(speak_once(base, token) for base in fronts * 2))
        accepted = [r for r in results if r.close_code == 1000 and r.audio()]
        assert len(accepted) == 1, [r.frames[:1] for r in results]
        assert all(r.errors and r.errors[0]["error"] == "invalid_api_key" for r in results if r not in accepted)


async def test_an_expired_token_is_refused(sdk, fronts, redis_url):
    token = sdk.tokens.single_use.create("tts_websocket").token
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(SINGLE_USE_TOKEN_PREFIX + "*"):
        client.pexpire(key, 1)  # what 15 minutes do, sooner
    await asyncio.sleep(0.05)
    got = await speak_once(fronts[0], token)
    assert got.close_code == 1008 and got.errors[0]["error"] == "invalid_api_key" and not got.audio()


def test_a_token_is_no_key_anywhere_else(sdk, fronts):
    token = sdk.tokens.single_use.create("tts_websocket").token
    tts = httpx.post(f"{fronts[0]}/v1/text-to-speech/joe", headers={"xi-api-key": token}, json={"text": TEXT})
    assert tts.status_code == 401 and tts.json()["detail"]["code"] == "invalid_api_key"
    mint = httpx.post(f"{fronts[0]}/v1/single-use-token/tts_websocket", headers={"xi-api-key": token})
    assert mint.status_code == 401
    voices = httpx.get(f"{fronts[0]}/v1/voices", headers={"xi-api-key": token})
    assert voices.status_code == 401


async def test_a_token_in_the_authorization_parameter_is_refused(sdk, fronts):
    token = sdk.tokens.single_use.create("tts_websocket").token
    url = fronts[0].replace("http", "ws", 1) + f"/v1/text-to-speech/joe/stream-input?authorization=Bearer%20{token}"
    async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
        await ws.send_json({"text": " "})
        got = await collect(ws)
    assert got.close_code == 1008 and got.errors[0]["error"] == "invalid_api_key"
    assert (await speak_once(fronts[0], token)).close_code == 1000  # not spent by the refused attempt


def test_other_types_and_callers_are_refused(sdk, fronts):
    with pytest.raises(ApiError) as err:
        sdk.tokens.single_use.create("realtime_scribe")
    assert err.value.status_code == 400 and err.value.body["detail"]["code"] == "unsupported_token_type"
    odd = httpx.post(f"{fronts[0]}/v1/single-use-token/{'x' * 500}", headers={"xi-api-key": KEY})
    assert odd.status_code == 422 and len(odd.json()["detail"]["message"]) < 120
    keyless = httpx.post(f"{fronts[0]}/v1/single-use-token/tts_websocket")
    assert keyless.status_code == 401 and keyless.json()["detail"]["code"] == "missing_api_key"


async def test_a_tokens_socket_counts_against_its_minting_key(sdk, fronts):
    base = fronts[0].replace("http", "ws", 1)
    async with aiohttp.ClientSession() as session:
        held = [
            await session.ws_connect(f"{base}/v1/text-to-speech/joe/stream-input", headers={"xi-api-key": KEY})
            for _ in range(LIMIT)
        ]
        for ws in held:
            await ws.send_json({"text": " "})
        await asyncio.sleep(0.3)  # both authenticated and counted
        token = sdk.tokens.single_use.create("tts_websocket").token
        got = await speak_once(fronts[0], token)
        for ws in held:
            await ws.close()
    assert got.close_code == 1008 and got.errors[0]["error"] == "too_many_concurrent_requests"


CAPPED_KEY = "single-use-capped-key"
CAP = 3


async def mint_over_http(client, key: str = CAPPED_KEY):
    resp = await client.post("/v1/single-use-token/tts_websocket", headers={"xi-api-key": key})
    return resp, await resp.json()


async def test_a_key_holds_at_most_its_cap_of_unspent_tokens(aiohttp_client, redis_url, data_dir, shared_workers):
    """A6: a full key minted 1,000 tokens in 10.6 s, each a live record for 15 minutes. Past
    ZSYNTH_SINGLE_USE_MAX_UNSPENT unspent ones it gets 429 in ElevenLabs' envelope; spending one frees a place."""
    other_key = "single-use-other-key"
    settings = make_settings(
        redis_url, data_dir, auth_api_keys=(CAPPED_KEY, other_key), auth_single_use_max_unspent=CAP
    )
    client = await aiohttp_client(create_app(settings))
    held = []
    for _ in range(CAP):
        resp, body = await mint_over_http(client)
        assert resp.status == 200, body
        held.append(body["token"])
    resp, body = await mint_over_http(client)
    assert resp.status == 429, body
    assert body["detail"]["status"] == body["detail"]["code"] == "rate_limit_exceeded"
    assert f"{CAP} unspent" in body["detail"]["message"]
    assert 890 <= int(resp.headers["Retry-After"]) <= 900  # when the oldest expires
    other, _ = await mint_over_http(client, other_key)  # another key's places are its own
    assert other.status == 200

    base = str(client.make_url("")).rstrip("/")
    got = await speak_once(base, held.pop())
    assert got.close_code == 1000 and got.audio(), got.frames
    resp, body = await mint_over_http(client)
    assert resp.status == 200, body  # the spent token's place
    assert (await mint_over_http(client))[0].status == 429


async def test_an_expired_token_frees_its_place(redis_url):
    """The places are counted in Redis, for every front at once; a token past its 15 minutes holds none."""
    client = aioredis.Redis.from_url(redis_url)
    clock = FakeClock()
    minter = Credential("full", fingerprint("single-use-expiring-key"), key_hash=None)
    try:
        first = await single_use.mint(client, "tts_websocket", minter, max_unspent=2, clock=clock)
        clock.advance(60)
        await single_use.mint(client, "tts_websocket", minter, max_unspent=2, clock=clock)
        with pytest.raises(single_use.TooManyUnspent) as refused:
            await single_use.mint(client, "tts_websocket", minter, max_unspent=2, clock=clock)
        assert refused.value.http_status == 429 and refused.value.retry_after_s == single_use.TTL_S - 60
        clock.advance(single_use.TTL_S - 60)  # the first one's life is over
        await single_use.mint(client, "tts_websocket", minter, max_unspent=2, clock=clock)
        with pytest.raises(single_use.TooManyUnspent):
            await single_use.mint(client, "tts_websocket", minter, max_unspent=2, clock=clock)
        # Spending one, even one whose place was already trimmed, leaves the count right.
        assert (await single_use.redeem(client, first, "tts_websocket")).owner == minter.fingerprint
        with pytest.raises(single_use.TooManyUnspent):
            await single_use.mint(client, "tts_websocket", minter, max_unspent=2, clock=clock)
    finally:
        await client.aclose()
