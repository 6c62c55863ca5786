"""Avatar server auth: full keys in either header, session tokens in the query, expiry, scope on management routes.

Session tokens are minted and checked by the shared auth core against the real keys table (moto's server mode on
loopback); its clock is one the test moves, so expiry is tested without sleeping.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from harness.audio import assert_speech, decode_audio
from harness.avatar import Viewer
from harness.base import make_settings
from harness.fronts import FakeClock
from harness.ws import collect
from zsynth.avatar.app import create_avatar_app
from zsynth.avatar.sessions import AVATAR_SESSIONS
from zsynth.services.auth import Authenticator, AuthError, fingerprint, secret_hash
from zsynth.services.keystore import KeyRecord
from zsynth.speech.app import create_app

KEY = "avatar-full-key"


# Both WebRTC peers gather loopback ICE candidates (the conftest fixture).
pytestmark = [pytest.mark.stack, pytest.mark.usefixtures("loopback_ice")]


@pytest.fixture
def table_settings(redis_url, data_dir, keys_table):
    return make_settings(redis_url, data_dir, auth_api_keys=(KEY,), auth_keys_table=keys_table)


@pytest.fixture
def tokens(table_settings) -> Authenticator:
    return Authenticator.from_settings(table_settings, clock=FakeClock())


@pytest.fixture
async def server(aiohttp_client, table_settings, tokens):
    return await aiohttp_client(create_avatar_app(table_settings, tokens))


async def mint(client, ttl: int | None = None) -> dict:
    resp = await client.post(
        "/v1/streaming.create_token", json={} if ttl is None else {"ttl_seconds": ttl}, headers={"X-Api-Key": KEY}
    )
    assert resp.status == 200, await resp.text()
    return (await resp.json())["data"]


async def assert_auth_error(resp: aiohttp.ClientResponse, code: str) -> None:
    assert resp.status == 401, await resp.text()
    body = await resp.json()
    assert set(body) == {"code", "message"} and body["code"] == code and body["message"]


async def test_create_token_takes_a_full_key_in_either_header(server) -> None:
    resp = await server.post("/v1/streaming.create_token", headers={"X-Api-Key": KEY})
    assert resp.status == 200
    data = (await resp.json())["data"]
    # A8: the avatar spec fixes data.scope to tts (it answered "avatar").
    assert data["token"].startswith("zsk_temp_") and data["scope"] == "tts"
    assert abs(data["expires_at"] - (time.time() + 300)) < 5
    resp = await server.post(
        "/v1/streaming.create_token", json={"ttl_seconds": 5}, headers={"Authorization": f"Bearer {KEY}"}
    )
    assert abs((await resp.json())["data"]["expires_at"] - (time.time() + 30)) < 5  # clamped up to 30 s
    assert abs((await mint(server, 100000))["expires_at"] - (time.time() + 600)) < 5  # clamped down to 600 s
    resp = await server.post("/v1/streaming.create_token", json={"ttl_seconds": "long"}, headers={"X-Api-Key": KEY})
    assert resp.status == 400 and (await resp.json())["code"] == "invalid_parameters"
    await assert_auth_error(await server.post("/v1/streaming.create_token"), "missing_api_key")
    await assert_auth_error(
        await server.post("/v1/streaming.create_token", headers={"X-Api-Key": "wrong"}), "invalid_api_key"
    )
    token = (await mint(server))["token"]
    await assert_auth_error(
        await server.post("/v1/streaming.create_token", headers={"Authorization": f"Bearer {token}"}),
        "insufficient_scope",
    )


async def test_revoking_the_minting_key_revokes_the_avatar_token(server, tokens) -> None:
    key, record = await tokens.create_key("avatar backend")
    resp = await server.post("/v1/streaming.create_token", headers={"X-Api-Key": key})
    assert resp.status == 200 and resp.headers["Cache-Control"] == "no-store"
    token = (await resp.json())["data"]["token"]
    assert await tokens.store.revoke(record.key_id, int(time.time())) == 2  # the key and the token it minted
    tokens.clock.advance(30)  # past the credential cache bound
    with pytest.raises(AuthError):
        await tokens.verify(token)


async def test_token_minting_without_a_keys_table_is_not_supported(aiohttp_client, redis_url, data_dir) -> None:
    client = await aiohttp_client(create_avatar_app(make_settings(redis_url, data_dir, auth_api_keys=(KEY,))))
    resp = await client.post("/v1/streaming.create_token", json={"ttl_seconds": 60}, headers={"X-Api-Key": KEY})
    assert resp.status == 501
    body = await resp.json()
    assert body["code"] == "not_supported" and "ZSYNTH_API_KEYS_TABLE" in body["message"]


async def test_session_token_drives_a_stream_but_not_management(server, tokens) -> None:
    token = (await mint(server))["token"]
    viewer = Viewer()
    resp = await server.post(f"/connect?session_token={token}", json=await viewer.offer())
    assert resp.status == 200, await resp.text()
    session_id = (await resp.json())["session_id"]

    for method, path in (
        ("GET", "/v1/avatars"),
        ("GET", "/v1/sessions"),
        ("GET", f"/v1/sessions/{session_id}"),
        ("DELETE", f"/v1/sessions/{session_id}"),
    ):
        await assert_auth_error(await server.request(method, f"{path}?session_token={token}"), "insufficient_scope")
        resp = await server.request(method, path, headers={"Authorization": f"Bearer {token}"})
        await assert_auth_error(resp, "insufficient_scope")

    # Another token cannot take over this session's control socket; its own token can.
    other = (await mint(server))["token"]
    resp = await server.get(f"/control/{session_id}?session_token={other}")
    assert resp.status == 404 and (await resp.json())["code"] == "session_not_found"
    ws = await server.ws_connect(f"/control/{session_id}?session_token={token}")
    event = await ws.receive_json(timeout=30)
    assert event["type"] == "session.state" and event["session_id"] == session_id

    tokens.clock.advance(301)  # the token expires: new requests with it are refused
    await assert_auth_error(
        await server.post(f"/connect?session_token={token}", json=await Viewer().offer()), "invalid_api_key"
    )
    await ws.close()
    await viewer.close()
    deadline = time.monotonic() + 15
    while session_id in server.app[AVATAR_SESSIONS].sessions:  # closing the control socket ends the session
        assert time.monotonic() < deadline, "the session outlived its control socket"
        await asyncio.sleep(0.05)


async def test_session_tokens_and_speech_tokens_each_work_on_their_own_server_only(
    aiohttp_client, server, table_settings, shared_workers
) -> None:
    """F7: both servers minted the scope ``tts`` into one table, so a page holding only an avatar session token got
    200 on the speech API's text-to-speech, and a speech token passed auth on the avatar's /connect. Both answer the
    scope ``tts`` again (A8, as the specs say): what keeps them apart is the server each token's record names."""
    speech = await aiohttp_client(create_app(table_settings))
    minted = await mint(server)
    session_token = minted["token"]
    assert minted["scope"] == "tts"
    resp = await speech.post(
        "/v1/text-to-speech/joe", json={"text": "A page with an avatar token."}, headers={"xi-api-key": session_token}
    )
    assert resp.status == 401, resp.status
    assert (await resp.json())["detail"]["status"] == "insufficient_scope"
    ws = await speech.ws_connect(f"/v1/text-to-speech/joe/stream-input?authorization=Bearer%20{session_token}")
    await ws.send_json({"text": " "})
    got = await collect(ws, timeout=10)
    assert [frame["error"] for frame in got.errors] == ["insufficient_scope"] and got.close_code == 1008

    resp = await speech.post("/v1/tokens/ephemeral", json={}, headers={"xi-api-key": KEY})
    answer = await resp.json()
    speech_token = answer["token"]
    assert answer["scope"] == "tts"
    await assert_auth_error(
        await server.post(f"/connect?session_token={speech_token}", json=await Viewer().offer()), "insufficient_scope"
    )
    await assert_auth_error(await server.get(f"/control/abc?session_token={speech_token}"), "insufficient_scope")

    # Each works where it was minted for.
    resp = await speech.post(
        "/v1/text-to-speech/joe?output_format=pcm_16000",
        json={"text": "A speech token speaks here."},
        headers={"xi-api-key": speech_token},
    )
    assert resp.status == 200
    samples, rate = decode_audio(await resp.read(), "pcm_16000")
    assert_speech(samples, rate, "A speech token speaks here.")
    viewer = Viewer()
    resp = await server.post(f"/connect?session_token={session_token}", json=await viewer.offer())
    assert resp.status == 200, await resp.text()
    assert (
        await server.delete(f"/v1/sessions/{(await resp.json())['session_id']}", headers={"X-Api-Key": KEY})
    ).status == 200
    await viewer.close()


async def test_tokens_minted_before_their_record_named_a_server_keep_their_side(
    aiohttp_client, server, table_settings, tokens
) -> None:
    """Rows written before the record named its server: an avatar session token (scope ``avatar`` then) still opens a
    session here and nothing on the speech API; a speech token (scope ``tts``, no server) is still refused here."""
    speech = await aiohttp_client(create_app(table_settings))
    legacy = {}
    for scope in ("avatar", "tts"):
        token = f"zsk_temp_legacy-{scope}-token-0123456789"
        now = int(time.time())
        record = KeyRecord(fingerprint(token), "ephemeral", scope, now, now + 300, parent=fingerprint(KEY))
        await tokens.store.put(secret_hash(token), record)
        legacy[scope] = token
    viewer = Viewer()
    resp = await server.post(f"/connect?session_token={legacy['avatar']}", json=await viewer.offer())
    assert resp.status == 200, await resp.text()
    assert (
        await server.delete(f"/v1/sessions/{(await resp.json())['session_id']}", headers={"X-Api-Key": KEY})
    ).status == 200
    await viewer.close()
    await assert_auth_error(await server.get(f"/control/abc?session_token={legacy['tts']}"), "insufficient_scope")
    resp = await speech.get("/v1/voices", headers={"xi-api-key": legacy["avatar"]})
    assert resp.status == 401 and (await resp.json())["detail"]["status"] == "insufficient_scope"
    assert (await speech.get("/v1/voices", headers={"xi-api-key": legacy["tts"]})).status == 200


async def test_connect_and_control_refuse_bad_credentials(server, tokens) -> None:
    offer = await Viewer().offer()
    await assert_auth_error(await server.post("/connect", json=offer), "missing_api_key")
    await assert_auth_error(await server.post("/connect", json=offer, headers={"X-Api-Key": "nope"}), "invalid_api_key")
    await assert_auth_error(
        await server.post("/connect", json=offer, headers={"Authorization": "Bearer nope"}), "invalid_api_key"
    )
    # A full key never travels in a URL.
    await assert_auth_error(await server.post(f"/connect?session_token={KEY}", json=offer), "invalid_api_key")
    await assert_auth_error(await server.post("/connect?session_token=zsk_temp_forged", json=offer), "invalid_api_key")
    await assert_auth_error(await server.get("/control/abc"), "missing_api_key")
    await assert_auth_error(await server.get("/control/abc?session_token=zsk_temp_forged"), "invalid_api_key")
    with pytest.raises(aiohttp.WSServerHandshakeError) as err:
        await server.ws_connect("/control/abc", headers={"X-Api-Key": "nope"})
    assert err.value.status == 401
    assert (await server.get("/healthz")).status == 200  # health needs no key


async def test_management_with_a_full_key(server) -> None:
    for headers in ({"X-Api-Key": KEY}, {"Authorization": f"Bearer {KEY}"}):
        resp = await server.get("/v1/avatars", headers=headers)
        assert resp.status == 200
        avatars = (await resp.json())["data"]
        assert {a["avatar_id"] for a in avatars} == {"ada", "theo"}
        assert all(a["width"] == a["height"] == 512 and a["fps"] == 25 for a in avatars)
    resp = await server.delete("/v1/sessions/unknown", headers={"X-Api-Key": KEY})
    assert resp.status == 404 and (await resp.json())["code"] == "session_not_found"
    await assert_auth_error(await server.get("/v1/sessions"), "missing_api_key")


async def test_open_server_needs_no_key(aiohttp_client, redis_url, data_dir) -> None:
    client = await aiohttp_client(create_avatar_app(make_settings(redis_url, data_dir)))
    assert (await client.get("/v1/avatars")).status == 200
    viewer = Viewer()
    resp = await client.post("/connect", json=await viewer.offer())
    assert resp.status == 200
    session_id = (await resp.json())["session_id"]
    assert (await client.delete(f"/v1/sessions/{session_id}")).status == 200
    await viewer.close()


async def test_browsers_on_other_origins_may_call(server) -> None:
    origin = {"Origin": "https://app.example"}
    resp = await server.options(
        "/connect",
        headers={**origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"},
    )
    assert resp.status == 204 and resp.headers["Access-Control-Allow-Origin"] == "*"
    assert "POST" in resp.headers["Access-Control-Allow-Methods"]
    resp = await server.post("/connect?session_token=zsk_temp_forged", json={}, headers=origin)
    assert resp.status == 401 and resp.headers["Access-Control-Allow-Origin"] == "*"  # errors are readable too
