"""Limits on credentials that cannot lock out the innocent, and credentials that stay where they belong.

Real front (the application factory), real redis-server, a real keys table on moto. Covered: failed look-ups are
throttled, never successful ones; table look-ups at once are bounded; X-Forwarded-For counts only from trusted
proxies (IPv6 by /64); a token counts against its minting key for the socket cap and the queue share; a credential
header that is not UTF-8 is a 401; a token minted by a static key dies with that key's configuration; a full key is
refused in the realtime socket's ``?authorization=`` query.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
from urllib.parse import quote

import aiohttp
import pytest

from harness.base import make_settings
from harness.ws import collect
from zsynth.core.ratelimit import client_address
from zsynth.services.auth import AUTHENTICATOR, Authenticator, AuthError
from zsynth.services.keystore import KeyRecord, KeyStore
from zsynth.speech.app import create_app

PATH = "/v1/text-to-speech/any-voice/stream-input"
STATIC = "sk-auth-limits-static"


async def front(aiohttp_client, redis_url, data_dir, keys_table, **overrides):
    settings = make_settings(redis_url, data_dir, auth_keys_table=keys_table, **overrides)
    return await aiohttp_client(create_app(settings))


async def status(client, secret: str, **headers: str) -> int:
    resp = await client.get("/v1/voices", headers={"xi-api-key": secret, **headers})
    await resp.read()
    return resp.status


async def mint(client, key: str) -> str:
    resp = await client.post("/v1/tokens/ephemeral", json={"ttl_seconds": 120}, headers={"xi-api-key": key})
    assert resp.status == 200, await resp.text()
    return str((await resp.json())["token"])


# ----- failed look-ups are throttled, successful ones never --------------------------------------------------------


@pytest.mark.stack
async def test_real_keys_and_fresh_tokens_pass_while_their_address_floods_made_up_keys(
    aiohttp_client, redis_url, data_dir, keys_table
):
    client = await front(aiohttp_client, redis_url, data_dir, keys_table, auth_max_failures_per_min=5)
    auth = client.server.app[AUTHENTICATOR]
    minter, _ = await auth.create_key("minter")
    assert await status(client, minter) == 200
    fresh_keys = [(await auth.create_key(f"never used {n}"))[0] for n in range(3)]
    auth.clear_cache()  # every key below needs a real table read, as on a front that never saw it
    flood = [await status(client, f"zsk_live_made-up-{n}") for n in range(10)]
    assert flood == [401] * 5 + [429] * 5  # the address is throttled for its failures
    tokens = [await mint(client, minter) for _ in range(3)]
    assert [await status(client, token) for token in tokens] == [200] * 3
    assert [await status(client, key) for key in fresh_keys] == [200] * 3
    resp = await client.get("/v1/voices", headers={"xi-api-key": "zsk_temp_made-up-again"})
    assert resp.status == 429 and resp.headers["Retry-After"] == "1"
    assert (await resp.json())["detail"]["status"] == "rate_limit_exceeded"


@pytest.mark.stack
async def test_a_minted_token_needs_no_look_up_on_the_front_that_minted_it(
    aiohttp_client, redis_url, data_dir, keys_table
):
    client = await front(aiohttp_client, redis_url, data_dir, keys_table)
    auth = client.server.app[AUTHENTICATOR]
    reads: list[str] = []
    store = auth.store
    real_get = store.get

    async def counted_get(key_hash: str) -> KeyRecord | None:
        reads.append(key_hash)
        return await real_get(key_hash)

    store.get = counted_get  # counts the real reads; the table answers them
    minter, _ = await auth.create_key("warm minter")
    token = await mint(client, minter)
    before = len(reads)
    assert await status(client, token) == 200
    assert len(reads) == before


class SlowStore(KeyStore):
    """The real table, read a little slower, recording how many reads were in flight at once."""

    def __init__(self, table: str) -> None:
        super().__init__(table)
        self.now = 0
        self.most = 0

    async def get(self, key_hash: str) -> KeyRecord | None:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(0.05)
            return await super().get(key_hash)
        finally:
            self.now -= 1


@pytest.mark.stack
async def test_table_reads_at_once_are_bounded(keys_table):
    store = SlowStore(keys_table)
    auth = Authenticator(store=store, max_concurrent_lookups=3, max_failures_per_min=1000)
    await auth.start()
    try:
        key, _ = await auth.create_key("bounded")

        async def attempt(n: int) -> str:
            try:
                await auth.verify(f"zsk_live_flood-{n}", client=f"198.51.100.{n}")
            except AuthError as err:
                return err.code
            return "ok"

        answers = await asyncio.gather(*(attempt(n) for n in range(40)))
        assert answers == ["invalid_api_key"] * 40
        assert store.most == 3
        assert (await auth.verify(key, client="198.51.100.1")).kind == "full"
    finally:
        await auth.close()


@pytest.mark.stack
async def test_an_address_over_its_limit_waits_for_no_look_up_slot(keys_table):
    store = SlowStore(keys_table)
    auth = Authenticator(store=store, max_concurrent_lookups=1, max_failures_per_min=1)
    await auth.start()
    try:
        with pytest.raises(AuthError) as first:
            await auth.verify("zsk_live_made-up-a", client="203.0.113.7")
        assert first.value.code == "invalid_api_key"
        # Someone else's look-up holds the one slot: the throttled address is answered at once, unread.
        other = asyncio.ensure_future(auth.verify("zsk_live_made-up-b", client="203.0.113.8"))
        await asyncio.sleep(0.01)
        with pytest.raises(AuthError) as second:
            await auth.verify("zsk_live_made-up-c", client="203.0.113.7")
        assert second.value.http_status == 429
        assert store.most == 1
        with pytest.raises(AuthError):
            await other
    finally:
        await auth.close()


# ----- which address a failure counts against ----------------------------------------------------------------------


@pytest.mark.unit
def test_client_address_counts_forwarded_hops_from_the_right_past_trusted_proxies():
    trusted = (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("127.0.0.1/32"))
    assert client_address("192.0.2.1", ["198.51.100.9"], trusted) == "192.0.2.1"  # untrusted peer: header ignored
    assert client_address("127.0.0.1", ["198.51.100.9"], ()) == "127.0.0.1"  # no trusted proxies: ignored
    assert client_address("127.0.0.1", ["198.51.100.9"], trusted) == "198.51.100.9"
    # The client's own entries are left of the one the proxy appended: they prove nothing.
    assert client_address("127.0.0.1", ["1.2.3.4, 198.51.100.9"], trusted) == "198.51.100.9"
    assert client_address("127.0.0.1", ["1.2.3.4, 198.51.100.9, 10.1.2.3"], trusted) == "198.51.100.9"
    assert client_address("127.0.0.1", ["1.2.3.4", "198.51.100.9, 10.1.2.3"], trusted) == "198.51.100.9"
    assert client_address("127.0.0.1", [], trusted) == "127.0.0.1"
    assert client_address("127.0.0.1", ["not an address, 10.1.2.3"], trusted) == "10.1.2.3"
    assert client_address("2001:db8:1:2::1", [], ()) == "2001:db8:1:2::/64"
    assert client_address("::ffff:192.0.2.5", [], ()) == "192.0.2.5"
    assert client_address("127.0.0.1", ["2001:db8:1:2:aaaa::9"], trusted) == "2001:db8:1:2::/64"


@pytest.mark.stack
async def test_forwarded_for_counts_only_from_a_trusted_proxy(aiohttp_client, redis_url, data_dir, keys_table):
    proxied = await front(
        aiohttp_client,
        redis_url,
        data_dir,
        keys_table,
        auth_max_failures_per_min=3,
        http_trusted_proxies=(ipaddress.ip_network("127.0.0.1/32"),),
    )

    async def made_up(forwarded: str) -> int:
        return await status(proxied, "zsk_live_made-up", **{"X-Forwarded-For": forwarded})

    # The flooder adds its own entries in front of the one the proxy appended: they do not give it a new address.
    assert [await made_up(f"192.0.2.{n}, 203.0.113.5") for n in range(5)] == [401] * 3 + [429] * 2
    assert await made_up("203.0.113.6") == 401  # another client behind the same proxy is not throttled
    # IPv6 clients count by /64.
    assert [await made_up(f"2001:db8:1:2::{n}") for n in range(1, 5)] == [401] * 3 + [429]
    assert await made_up("2001:db8:1:3::1") == 401

    direct = await front(aiohttp_client, redis_url, data_dir, keys_table, auth_max_failures_per_min=3)
    # Without ZSYNTH_TRUSTED_PROXIES the header is the client's word: all count against the peer.
    spoofed = [await status(direct, "zsk_live_x", **{"X-Forwarded-For": f"192.0.2.{n}"}) for n in range(5)]
    assert spoofed == [401] * 3 + [429] * 2


# ----- a token counts against the key that minted it ---------------------------------------------------------------


async def _open(client, token: str) -> aiohttp.ClientWebSocketResponse:
    ws = await client.ws_connect(PATH + "?inactivity_timeout=60", headers={"xi-api-key": token})
    await ws.send_json({"text": " "})
    return ws


@pytest.mark.stack
async def test_two_tokens_of_one_key_share_its_socket_cap(aiohttp_client, redis_url, data_dir, keys_table):
    client = await front(aiohttp_client, redis_url, data_dir, keys_table, ws_max_sockets_per_credential=2)
    key, _ = await client.server.app[AUTHENTICATOR].create_key("socket owner")
    first, second = await mint(client, key), await mint(client, key)
    held = [await _open(client, first), await _open(client, second)]
    await asyncio.sleep(0.3)  # both authenticated and counted
    third = await _open(client, first)
    got = await collect(third, timeout=10)
    assert got.close_code == 1008
    assert [frame["error"] for frame in got.errors] == ["too_many_concurrent_requests"]
    other_key, _ = await client.server.app[AUTHENTICATOR].create_key("another owner")
    fine = await _open(client, await mint(client, other_key))  # other keys' tokens are not affected
    await asyncio.sleep(0.3)
    assert not fine.closed
    for ws in (*held, fine):
        await ws.close()


@pytest.mark.stack
async def test_two_tokens_of_one_key_share_its_queue_share(aiohttp_client, private_redis_url, data_dir, keys_table):
    # No worker on this database: a queued job stays queued and holds its share.
    client = await front(
        aiohttp_client,
        private_redis_url,
        data_dir,
        keys_table,
        jobs_max_queue=4,
        jobs_credential_queue_share=0.25,
        jobs_first_chunk_timeout_s=10.0,
    )
    key, _ = await client.server.app[AUTHENTICATOR].create_key("queue owner")
    first, second = await mint(client, key), await mint(client, key)
    body = {"text": "Held in the queue.", "model_id": "eleven_multilingual_v2"}
    holding = asyncio.ensure_future(
        client.post("/v1/text-to-speech/joe/stream", json=body, headers={"xi-api-key": first})
    )
    await asyncio.sleep(0.5)  # the first job is queued
    resp = await client.post("/v1/text-to-speech/joe", json=body, headers={"xi-api-key": second})
    assert resp.status == 429, await resp.text()
    detail = (await resp.json())["detail"]
    assert detail["status"] == "system_busy" and "already has 1 jobs" in detail["message"]
    holding.cancel()
    with pytest.raises(asyncio.CancelledError):
        await holding


# ----- a credential header that is not UTF-8 -----------------------------------------------------------------------


async def _raw_get(port: int, header: bytes) -> tuple[int, dict]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /v1/voices HTTP/1.1\r\nHost: 127.0.0.1\r\n" + header + b"\r\nConnection: close\r\n\r\n")
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


@pytest.mark.stack
@pytest.mark.parametrize(
    "header",
    [b"xi-api-key: \xff\xfekey", b"X-Api-Key: zsk_live_\xff", b"Authorization: Bearer \xc3\x28bad"],
    ids=["xi-api-key", "X-Api-Key", "Authorization"],
)
async def test_a_credential_header_that_is_not_utf8_is_a_401(
    aiohttp_client, redis_url, data_dir, keys_table, caplog, header
):
    client = await front(aiohttp_client, redis_url, data_dir, keys_table, auth_api_key=STATIC)
    with caplog.at_level(logging.INFO):
        code, body = await _raw_get(client.server.port, header)
    assert code == 401
    assert body["detail"]["status"] == "invalid_api_key"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


# ----- a token minted by a static key lives as long as that key is configured ---------------------------------------


@pytest.mark.stack
async def test_a_token_of_a_static_key_stops_where_that_key_was_rotated_away(
    aiohttp_client, redis_url, data_dir, keys_table
):
    old, new = "sk-rotated-away", "sk-rotated-in"
    before = await front(aiohttp_client, redis_url, data_dir, keys_table, auth_api_keys=(old, new))
    token = await mint(before, old)
    assert await status(before, token) == 200
    after = await front(aiohttp_client, redis_url, data_dir, keys_table, auth_api_keys=(new,))
    resp = await after.get("/v1/voices", headers={"xi-api-key": token})
    assert resp.status == 401
    detail = (await resp.json())["detail"]
    assert detail["status"] == "invalid_api_key" and "no longer configured" in detail["message"]
    assert await status(after, await mint(after, new)) == 200  # the new key's tokens work


# ----- only tokens in the realtime socket's URL ----------------------------------------------------------------------


@pytest.mark.stack
async def test_a_full_key_in_the_socket_query_is_refused(aiohttp_client, redis_url, data_dir, keys_table):
    client = await front(aiohttp_client, redis_url, data_dir, keys_table, auth_api_key=STATIC)
    table_key, _ = await client.server.app[AUTHENTICATOR].create_key("in a url")
    for key in (STATIC, table_key):
        ws = await client.ws_connect(f"{PATH}?authorization=" + quote(f"Bearer {key}"))
        await ws.send_json({"text": " "})
        got = await collect(ws, timeout=10)
        assert got.close_code == 1008
        assert [frame["error"] for frame in got.errors] == ["invalid_api_key"]
        assert "ephemeral token" in got.errors[0]["message"]
    # A token in the query is what the parameter is for.
    ws = await client.ws_connect(
        f"{PATH}?inactivity_timeout=60&authorization=" + quote(f"Bearer {await mint(client, STATIC)}")
    )
    await ws.send_json({"text": " "})
    await asyncio.sleep(0.3)
    assert not ws.closed
    await ws.close()
