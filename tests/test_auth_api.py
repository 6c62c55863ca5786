"""The speech API's auth matrix end to end: each route x each credential kind, against moto and real workers."""

from __future__ import annotations

import pytest

from harness.audio import assert_speech, decode_audio
from harness.base import make_settings
from harness.fronts import FakeClock, clocked_app
from zsynth.services.auth import AUTHENTICATOR, Authenticator
from zsynth.services.keystore import KeyStore
from zsynth.speech.app import create_app

pytestmark = pytest.mark.stack

STATIC = "static-test-key"

# (method, path, json body, ephemeral tokens allowed). Allowed TTS calls send an empty body: a 422 proves the
# request got past auth without spending a synthesis.
ROUTES = [
    ("POST", "/v1/text-to-speech/any-voice", {}, True),
    ("POST", "/v1/text-to-speech/any-voice/stream", {}, True),
    ("GET", "/v1/voices", None, True),
    ("GET", "/v2/voices", None, True),
    ("GET", "/v1/voices/any-voice", None, True),
    ("GET", "/v1/voices/settings/default", None, True),
    ("POST", "/voices", None, False),
    ("DELETE", "/voices/custom-abc", None, False),
    ("GET", "/v1/models", None, False),
    ("GET", "/v1/user", None, False),
    ("GET", "/v1/user/subscription", None, False),
    ("POST", "/v1/tokens/ephemeral", {"ttl_seconds": 60}, False),
]
CREDENTIALS = ["none", "static", "table", "ephemeral", "expired", "revoked", "garbage", "unknown_live"]


@pytest.fixture
async def table_client(aiohttp_client, redis_url, data_dir, shared_workers, keys_table):
    """A front with a static key and the keys table; its authenticator runs on a clock the test moves."""
    settings = make_settings(redis_url, data_dir, auth_api_key=STATIC, auth_keys_table=keys_table)
    return await aiohttp_client(clocked_app(settings))


def auth_of(client) -> Authenticator:
    return client.server.app[AUTHENTICATOR]


def clock_of(client) -> FakeClock:
    """The clock the test moves (clocked_app gives the authenticator one)."""
    clock = auth_of(client).clock
    assert isinstance(clock, FakeClock)
    return clock


def store_of(auth: Authenticator) -> KeyStore:
    """The keys table of a front that has one."""
    assert auth.store is not None
    return auth.store


async def mint(client, key: str, ttl: object = None) -> dict:
    body = {} if ttl is None else {"ttl_seconds": ttl}
    resp = await client.post("/v1/tokens/ephemeral", json=body, headers={"Authorization": f"Bearer {key}"})
    assert resp.status == 200, await resp.text()
    assert resp.headers["Cache-Control"] == "no-store"
    return await resp.json()


async def secret_for(client, kind: str) -> str | None:
    """A credential of ``kind`` that is valid (or not) on this front right now."""
    auth = auth_of(client)
    if kind == "none":
        return None
    if kind == "static":
        return STATIC
    if kind == "garbage":
        return "not-a-key-at-all"
    if kind == "unknown_live":
        return "zsk_live_" + "A" * 43
    key, record = await auth.create_key(f"matrix {kind}")
    if kind == "table":
        return key
    if kind == "revoked":
        await store_of(auth).revoke(record.key_id, int(auth.clock()))
        return key
    token = (await mint(client, key, 30))["token"]
    if kind == "expired":
        clock_of(client).advance(30)
    return token


def expected(kind: str, token_ok: bool) -> str | None:
    """The auth status a credential kind gets on a route (None: let through)."""
    if kind == "none":
        return "missing_api_key"
    if kind in ("expired", "revoked", "garbage", "unknown_live"):
        return "invalid_api_key"
    if kind == "ephemeral" and not token_ok:
        return "insufficient_scope"
    return None


@pytest.mark.parametrize("kind", CREDENTIALS)
@pytest.mark.parametrize("header", ["authorization", "xi-api-key"])
async def test_matrix(table_client, kind, header):
    secret = await secret_for(table_client, kind)
    headers = {}
    if secret is not None:
        headers = {"Authorization": f"Bearer {secret}"} if header == "authorization" else {"xi-api-key": secret}
    failures = []
    for method, path, body, token_ok in ROUTES:
        resp = await table_client.request(method, path, json=body, headers=headers)
        want = expected(kind, token_ok)
        if want is None:
            if resp.status == 401:
                failures.append(f"{method} {path}: 401 {await resp.text()}")
            elif path.startswith("/v1/text-to-speech/") and resp.status != 422:
                failures.append(f"{method} {path}: expected the handler's 422, got {resp.status}")
            elif path == "/v1/tokens/ephemeral" and resp.status != 200:
                failures.append(f"{method} {path}: expected 200, got {resp.status}")
            continue
        detail = (await resp.json())["detail"]
        if resp.status != 401 or detail["status"] != want or not detail["message"]:
            failures.append(f"{method} {path}: want 401 {want}, got {resp.status} {detail}")
        if resp.headers.get("WWW-Authenticate") != "Bearer":
            failures.append(f"{method} {path}: no WWW-Authenticate")
    assert not failures, "\n".join(failures)


async def test_health_routes_need_no_key(table_client):
    assert (await table_client.get("/healthz")).status == 200
    assert (await table_client.get("/readyz")).status == 200


async def test_ephemeral_token_synthesizes_speech(table_client):
    token = (await mint(table_client, STATIC))["token"]
    text = "A browser holds only this short lived token."
    resp = await table_client.post(
        "/v1/text-to-speech/any-voice", json={"text": text}, headers={"Authorization": f"Bearer {token}"}
    )
    assert resp.status == 200, await resp.text()
    samples, rate = decode_audio(await resp.read(), "mp3_44100_128")
    assert_speech(samples, rate, text)


@pytest.mark.parametrize(("ttl", "lifetime"), [(None, 300), (29, 30), (30, 30), (600, 600), (601, 600)])
async def test_mint_clamps_ttl(table_client, ttl, lifetime):
    now = int(auth_of(table_client).clock())
    body = await mint(table_client, STATIC, ttl)
    assert body["scope"] == "tts" and body["token"].startswith("zsk_temp_")
    assert body["expires_at"] == now + lifetime


async def test_mint_with_empty_body_uses_the_default(table_client):
    now = int(auth_of(table_client).clock())
    resp = await table_client.post("/v1/tokens/ephemeral", headers={"xi-api-key": STATIC})
    assert resp.status == 200
    assert (await resp.json())["expires_at"] == now + 300


@pytest.mark.parametrize(
    ("raw", "status", "code"),
    [
        ('{"ttl_seconds": "300"}', 422, "invalid_parameters"),
        ('{"ttl_seconds": 12.5}', 422, "invalid_parameters"),
        ('{"ttl_seconds": true}', 422, "invalid_parameters"),
        ('{"ttl_seconds": [300]}', 422, "invalid_parameters"),
        ("[300]", 400, "invalid_json"),
        ("{not json", 400, "invalid_json"),
    ],
)
async def test_mint_rejects_bad_bodies(table_client, raw, status, code):
    headers = {"Authorization": f"Bearer {STATIC}", "Content-Type": "application/json"}
    resp = await table_client.post("/v1/tokens/ephemeral", data=raw, headers=headers)
    assert resp.status == status
    detail = (await resp.json())["detail"]
    assert detail["status"] == code and detail["message"]


async def test_token_expires_on_the_server_clock(table_client):
    body = await mint(table_client, STATIC, 45)
    headers = {"Authorization": f"Bearer {body['token']}"}
    clock = clock_of(table_client)
    clock.now = body["expires_at"] - 1
    assert (await table_client.post("/v1/text-to-speech/v", json={}, headers=headers)).status == 422
    clock.now = body["expires_at"]
    resp = await table_client.post("/v1/text-to-speech/v", json={}, headers=headers)
    assert resp.status == 401
    assert (await resp.json())["detail"]["status"] == "invalid_api_key"


async def test_revoked_key_stops_within_the_cache_bound(table_client):
    auth = auth_of(table_client)
    key, record = await auth.create_key("revoke me")
    headers = {"xi-api-key": key}
    assert (await table_client.post("/v1/tokens/ephemeral", headers=headers)).status == 200
    await store_of(auth).revoke(record.key_id, int(auth.clock()))
    clock_of(table_client).advance(30)
    resp = await table_client.post("/v1/tokens/ephemeral", headers=headers)
    assert resp.status == 401
    assert (await resp.json())["detail"]["status"] == "invalid_api_key"


async def test_static_keys_only_cannot_mint(aiohttp_client, redis_url, data_dir, shared_workers):
    client = await aiohttp_client(create_app(make_settings(redis_url, data_dir, auth_api_keys=("k1", "k2"))))
    resp = await client.post("/v1/tokens/ephemeral", json={}, headers={"Authorization": "Bearer k2"})
    assert resp.status == 501
    detail = (await resp.json())["detail"]
    assert detail["status"] == "not_supported" and "ZSYNTH_API_KEYS_TABLE" in detail["message"]
    resp = await client.post("/v1/text-to-speech/v", json={}, headers={"Authorization": "Bearer k1"})
    assert resp.status == 422
    resp = await client.post("/v1/text-to-speech/v", json={}, headers={"Authorization": "Bearer zsk_temp_x"})
    assert (await resp.json())["detail"]["status"] == "invalid_api_key"


async def test_open_server_lets_everyone_in_and_warns_off_loopback(aiohttp_client, redis_url, data_dir, caplog):
    client = await aiohttp_client(create_app(make_settings(redis_url, data_dir, http_host="0.0.0.0")))
    assert any("AUTHENTICATION IS OFF" in r.getMessage() for r in caplog.records)
    assert (await client.post("/v1/text-to-speech/v", json={})).status == 422
    resp = await client.post("/v1/tokens/ephemeral", json={})
    assert resp.status == 501
    assert (await resp.json())["detail"]["status"] == "not_supported"


async def test_open_server_on_loopback_does_not_warn(aiohttp_client, redis_url, data_dir, caplog):
    await aiohttp_client(create_app(make_settings(redis_url, data_dir)))
    assert not any("AUTHENTICATION IS OFF" in r.getMessage() for r in caplog.records)


async def test_keys_and_tokens_never_reach_the_logs(table_client, caplog):
    caplog.set_level("DEBUG")
    auth = auth_of(table_client)
    key, _ = await auth.create_key()
    token = (await mint(table_client, key))["token"]
    for secret in (key, token, "garbage-secret-value", "zsk_live_unknown-secret"):
        await table_client.post("/voices", headers={"Authorization": f"Bearer {secret}"})
    logged = caplog.text
    for secret in (key, token, "garbage-secret-value", "zsk_live_unknown-secret", STATIC):
        assert secret not in logged
    assert "insufficient_scope" in logged and "invalid_api_key" in logged


async def test_realtime_upgrade_passes_to_in_band_auth(table_client):
    upgrade = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13"}
    for path in ("/v1/text-to-speech/v/stream-input", "/v1/text-to-speech/v/multi-stream-input"):
        resp = await table_client.get(path, headers=upgrade)
        assert resp.status != 401  # the WebSocket handler authenticates (query, header or first message)
        resp = await table_client.get(path)  # not an upgrade: ordinary auth
        assert resp.status == 401


async def test_cors_preflight_and_headers_on_errors(table_client):
    origin = {"Origin": "https://app.example"}
    resp = await table_client.options(
        "/v1/text-to-speech/v",
        headers={**origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"},
    )
    assert resp.status == 200
    assert resp.headers["Access-Control-Allow-Origin"] in ("*", "https://app.example")
    assert "AUTHORIZATION" in resp.headers["Access-Control-Allow-Headers"].upper()
    for header in ("xi-api-key", "x-api-key"):  # every header the server reads a key from
        asked = {**origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": header}
        resp = await table_client.options("/v1/text-to-speech/v", headers=asked)
        assert resp.status == 200 and header in resp.headers["Access-Control-Allow-Headers"].lower()
    resp = await table_client.post("/v1/text-to-speech/v", json={}, headers=origin)
    assert resp.status == 401  # a browser can read why
    assert (await resp.json())["detail"]["code"] == "missing_api_key"
    assert resp.headers["Access-Control-Allow-Origin"] in ("*", "https://app.example")
    assert "request-id" in resp.headers["Access-Control-Expose-Headers"].lower()
    # Minting needs a full key, which never belongs in a browser: no CORS there.
    resp = await table_client.options(
        "/v1/tokens/ephemeral", headers={**origin, "Access-Control-Request-Method": "POST"}
    )
    assert "Access-Control-Allow-Origin" not in resp.headers


async def test_cors_origins_are_configurable(aiohttp_client, redis_url, data_dir, shared_workers):
    settings = make_settings(redis_url, data_dir, auth_api_key=STATIC, http_cors_origins=("https://ok.example",))
    client = await aiohttp_client(create_app(settings))
    preflight = {"Access-Control-Request-Method": "POST"}
    ok = await client.options("/v1/text-to-speech/v", headers={"Origin": "https://ok.example", **preflight})
    assert ok.headers["Access-Control-Allow-Origin"] == "https://ok.example"
    bad = await client.options("/v1/text-to-speech/v", headers={"Origin": "https://evil.example", **preflight})
    assert "Access-Control-Allow-Origin" not in bad.headers


async def test_a_token_on_an_unmatched_path_is_told_not_found(table_client):
    """A valid token passes the key check of a path no route matches and hears the API's 404/405, not a 401."""
    key, _ = await auth_of(table_client).create_key("unmatched paths")
    headers = {"Authorization": f"Bearer {(await mint(table_client, key))['token']}"}
    resp = await table_client.get("/v1/no-such-route", headers=headers)
    detail = (await resp.json())["detail"]
    assert resp.status == 404 and detail["code"] == "not_found" and detail["message"], detail
    resp = await table_client.delete("/v1/models", headers=headers)
    assert resp.status == 405 and (await resp.json())["detail"]["message"]
