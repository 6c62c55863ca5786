"""The authentication core against a real DynamoDB-compatible server: verify, cache, expiry, revocation, parsing."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp.test_utils import make_mocked_request

from harness.fronts import FakeClock
from zsynth.core.config import Settings, SettingsError
from zsynth.services.auth import (
    Authenticator,
    AuthError,
    clamp_ttl,
    read_credential,
    secret_from_headers,
    secret_from_message,
    secret_from_request,
)
from zsynth.services.keystore import KeyStore


class CountingStore(KeyStore):
    """The real store, counting the table reads it makes."""

    def __init__(self, table: str) -> None:
        super().__init__(table)
        self.reads = 0

    async def get(self, key_hash):
        self.reads += 1
        return await super().get(key_hash)


@pytest.fixture
async def auth(keys_table):
    store = CountingStore(keys_table)
    authenticator = Authenticator(("static-key-1",), store, clock=FakeClock())
    await authenticator.start()
    yield authenticator
    await authenticator.close()


@pytest.mark.unit
@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, 300), (29, 30), (30, 30), (31, 31), (300, 300), (600, 600), (601, 600), (-5, 30), (10**9, 600), (45.0, 45)],
)
def test_clamp_ttl(value, expected):
    assert clamp_ttl(value) == expected


@pytest.mark.unit
@pytest.mark.parametrize("value", ["300", 12.5, True, [], {}, float("nan")])
def test_clamp_ttl_rejects_non_integers(value):
    with pytest.raises(ValueError):
        clamp_ttl(value)


@pytest.mark.unit
def test_settings_read_auth_variables():
    s = Settings.from_env(
        {
            "ZSYNTH_API_KEY": "one",
            "ZSYNTH_API_KEYS": " two, ,three ,one",
            "ZSYNTH_API_KEYS_TABLE": "keys",
            "ZSYNTH_CORS_ORIGINS": "https://a.example, https://b.example",
            "ZSYNTH_AUTH_CACHE_TTL": "5",
        }
    )
    assert s.auth.static_keys == ("one", "two", "three")
    assert s.auth.keys_table == "keys"
    assert s.http.cors_origins == ("https://a.example", "https://b.example")
    assert s.auth.cache_ttl_s == 5.0
    assert Settings.from_env({}).http.cors_origins == ("*",)
    assert Settings.from_env({"ZSYNTH_CORS_ORIGINS": ""}).http.cors_origins == ()
    with pytest.raises(SettingsError, match="ZSYNTH_AUTH_CACHE_TTL"):
        Settings.from_env({"ZSYNTH_AUTH_CACHE_TTL": "31"})


@pytest.mark.unit
def test_secret_from_headers_and_request():
    assert secret_from_headers({"xi-api-key": " k1 "}) == "k1"
    assert secret_from_headers({"Authorization": "Bearer k2"}) == "k2"
    assert secret_from_headers({"Authorization": "bearer  k3 "}) == "k3"
    assert secret_from_headers({"Authorization": "Basic dXNlcjpwYXNz"}) is None
    assert secret_from_headers({"Authorization": "Bearer "}) is None
    assert secret_from_headers({}) is None
    req = make_mocked_request("GET", "/v1/text-to-speech/v/stream-input?authorization=Bearer%20zsk_temp_abc")
    assert secret_from_request(req) == "zsk_temp_abc"
    req = make_mocked_request("GET", "/v1/text-to-speech/v/stream-input?authorization=Bearer+zsk_temp_plus")
    assert secret_from_request(req) == "zsk_temp_plus"
    req = make_mocked_request("GET", "/x?authorization=Bearer%20q", headers={"xi-api-key": "header-wins"})
    assert secret_from_request(req) == "header-wins"
    assert secret_from_request(make_mocked_request("GET", "/x")) is None


@pytest.mark.unit
def test_read_credential_one_header_set_and_the_routes_query_parameter():
    # One header set on every server: the SDK's xi-api-key, the avatar's X-Api-Key, then Authorization: Bearer.
    for headers in ({"xi-api-key": "k"}, {"X-Api-Key": "k"}, {"x-api-key": " k "}, {"Authorization": "Bearer k"}):
        presented = read_credential(make_mocked_request("GET", "/x", headers=headers))
        assert (presented.secret, presented.in_query) == ("k", False)
    # All three at once: the order above decides (docs/auth.md).
    every = {"Authorization": "Bearer third", "X-Api-Key": "second", "xi-api-key": "first"}
    assert read_credential(make_mocked_request("GET", "/x", headers=every)).secret == "first"
    del every["xi-api-key"]
    assert read_credential(make_mocked_request("GET", "/x", headers=every)).secret == "second"
    # The query string only where the route names a parameter, and the header wins over it.
    assert read_credential(make_mocked_request("GET", "/connect?session_token=t")).secret is None
    presented = read_credential(make_mocked_request("GET", "/connect?session_token=%20t%20"), "session_token")
    assert (presented.secret, presented.in_query) == ("t", True)
    presented = read_credential(
        make_mocked_request("GET", "/connect?session_token=t", headers={"X-Api-Key": "k"}), "session_token"
    )
    assert (presented.secret, presented.in_query) == ("k", False)
    empty = read_credential(make_mocked_request("GET", "/connect?session_token=%20"), "session_token")
    assert (empty.secret, empty.in_query) == (None, False)
    ws = read_credential(make_mocked_request("GET", "/ws?authorization=Bearer%20t"), "authorization")
    assert (ws.secret, ws.in_query) == ("t", True)
    # Each parameter keeps its own form: session_token is the token itself, authorization an Authorization value.
    assert read_credential(make_mocked_request("GET", "/ws?session_token=t"), "authorization").secret is None


@pytest.mark.unit
def test_secret_from_message():
    assert secret_from_message({"text": " ", "authorization": "Bearer zsk_temp_x"}) == "zsk_temp_x"
    assert secret_from_message({"text": " ", "xi_api_key": "k"}) == "k"
    assert secret_from_message({"text": " ", "xi-api-key": "k2"}) == "k2"
    assert secret_from_message({"text": " ", "authorization": 5, "xi_api_key": ""}) is None
    assert secret_from_message({"text": " "}) is None


@pytest.mark.stack
async def test_open_when_nothing_configured():
    auth = Authenticator()
    assert auth.is_open
    assert (await auth.verify(None)).kind == "open"
    with pytest.raises(AuthError) as err:
        await auth.mint_token(300)
    assert (err.value.code, err.value.http_status) == ("not_supported", 501)


@pytest.mark.stack
async def test_static_keys_only():
    auth = Authenticator(("a-key", "b-key"))
    assert (await auth.verify("b-key")).kind == "full"
    for secret, status in ((None, "missing_api_key"), ("", "missing_api_key"), ("c-key", "invalid_api_key")):
        with pytest.raises(AuthError) as err:
            await auth.verify(secret)
        assert err.value.code == status
    with pytest.raises(AuthError) as err:
        await auth.mint_token(300)
    assert err.value.code == "not_supported"


@pytest.mark.stack
async def test_table_key_and_token(auth):
    key, record = await auth.create_key("core test")
    assert key.startswith("zsk_live_") and len(key) >= 9 + 43
    cred = await auth.verify(key)
    assert (cred.kind, cred.fingerprint, cred.is_full) == ("full", record.key_id, True)
    token, expires_at = await auth.mint_token(120, parent=cred)
    assert token.startswith("zsk_temp_") and len(token) - len("zsk_temp_") >= 32  # 192 bits, base64url
    assert expires_at == int(auth.clock()) + 120
    tcred = await auth.verify(token)
    assert (tcred.kind, tcred.scope, tcred.is_full) == ("ephemeral", "tts", False)
    with pytest.raises(AuthError) as err:
        await auth.mint_token(300, parent=tcred)
    assert err.value.code == "insufficient_scope"


@pytest.mark.stack
async def test_table_stores_hashes_never_secrets(auth, keys_table):
    key, _ = await auth.create_key()
    token, _ = await auth.mint_token(60)
    rows = await auth.store.scan()
    dumped = repr(rows)
    assert key not in dumped and token not in dumped
    assert key[9:] not in dumped and token[9:] not in dumped


@pytest.mark.stack
async def test_unknown_prefix_is_refused_without_a_lookup(auth):
    for garbage in ("nope", "sk_live_abc", "Bearer x", "zsk_other_1", "zsk_live_" + "a" * 600):
        with pytest.raises(AuthError) as err:
            await auth.verify(garbage)
        assert err.value.code == "invalid_api_key"
    assert auth.store.reads == 0
    with pytest.raises(AuthError):
        await auth.verify("zsk_live_unknown")
    assert auth.store.reads == 1


@pytest.mark.stack
async def test_warm_lookups_are_cached_and_concurrent_cold_ones_share_one_read(auth):
    key, _ = await auth.create_key()
    creds = await asyncio.gather(*(auth.verify(key) for _ in range(50)))
    assert {c.kind for c in creds} == {"full"}
    assert auth.store.reads == 1
    for _ in range(20):
        await auth.verify(key)
    assert auth.store.reads == 1
    auth.clock.advance(31)  # past the 30 s bound: read again
    await auth.verify(key)
    assert auth.store.reads == 2


@pytest.mark.stack
async def test_unknown_table_keys_are_cached_too(auth):
    for _ in range(5):
        with pytest.raises(AuthError):
            await auth.verify("zsk_live_never-issued")
    assert auth.store.reads == 1


@pytest.mark.stack
async def test_token_expiry_is_checked_on_every_request_even_when_cached(auth):
    token, expires_at = await auth.mint_token(30)
    assert (await auth.verify(token)).expires_at == expires_at
    auth.clock.now = expires_at - 0.5
    assert (await auth.verify(token)).kind == "ephemeral"
    auth.clock.now = expires_at
    with pytest.raises(AuthError) as err:
        await auth.verify(token)
    assert (err.value.code, err.value.message) == ("invalid_api_key", "This token has expired.")
    # A fresh authenticator (another front, cold cache) refuses it as well.
    other = Authenticator(store=auth.store, clock=auth.clock)
    with pytest.raises(AuthError):
        await other.verify(token)


@pytest.mark.stack
async def test_revocation_takes_effect_within_the_cache_bound(auth):
    key, record = await auth.create_key()
    token, _ = await auth.mint_token(600, parent=await auth.verify(key))
    await auth.verify(token)
    assert await auth.store.revoke(record.key_id, int(time.time())) == 2  # the key and the token it minted
    assert (await auth.verify(key)).kind == "full"  # still cached: at most 30 s
    auth.clock.advance(30)
    for secret in (key, token):
        with pytest.raises(AuthError) as err:
            await auth.verify(secret)
        assert err.value.code == "invalid_api_key"


@pytest.mark.stack
async def test_full_key_hash_never_passes_as_a_token(auth):
    key, _ = await auth.create_key()
    with pytest.raises(AuthError):
        await auth.verify("zsk_temp_" + key[len("zsk_live_") :])


@pytest.mark.stack
async def test_table_down_is_503_not_401(aws_endpoint):
    store = KeyStore("no-such-table")
    auth = Authenticator(store=store, clock=FakeClock())
    await store.open()
    try:
        with pytest.raises(AuthError) as err:
            await auth.verify("zsk_live_whatever")
        assert (err.value.code, err.value.http_status) == ("service_unavailable", 503)
        with pytest.raises(AuthError) as err:
            await auth.verify("garbage")  # refused before any look-up
        assert err.value.http_status == 401
    finally:
        await auth.close()


@pytest.mark.stack
async def test_start_fails_on_a_missing_table(aws_endpoint):
    auth = Authenticator.from_settings(Settings().with_(auth_keys_table="missing-table"))
    with pytest.raises(Exception, match="does not exist"):
        await auth.start()
    await auth.close()
