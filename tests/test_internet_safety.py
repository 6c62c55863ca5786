"""Issue 21, the connection and credential items: bounded realtime buffers, credentials enforced on live sockets,
tokens tied to their minting key, unauthenticated load and multipart framing counted against the body limit.

Real redis-server, real Piper workers where audio is spoken, moto's DynamoDB for the keys table. Fronts get short
settings (cache times of a second or two) so each guarantee is seen in seconds; the printed figures are the ones
quoted in docs/limits.md.
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import quote

import aiohttp
import pytest
from redis.asyncio import Redis

from harness.avatar import Viewer
from harness.base import make_settings
from harness.ws import collect
from zsynth.avatar.app import create_avatar_app
from zsynth.avatar.sessions import AVATAR_SESSIONS
from zsynth.core.protocol import QUEUE
from zsynth.services.auth import AUTHENTICATOR, AVATAR_SERVER, Authenticator, AuthError, secret_hash
from zsynth.services.keystore import HASH_ATTR
from zsynth.speech.app import create_app
from zsynth.speech.ws.buffer import TextBuffer

PATH = "/v1/text-to-speech/any-voice/stream-input"
STATIC_KEY = "sk-internet-safety"


# ----- 1: the realtime buffer ------------------------------------------------------------------------------------


@pytest.mark.unit
def test_text_without_white_space_is_released_at_the_word_bound():
    buffer = TextBuffer()  # ZSYNTH_WS_MAX_WORD_CHARS' default: 1000
    out: list[str] = []
    for _ in range(25):
        out += buffer.add("x" * 100)
    assert out == ["x" * 1000, "x" * 1000]
    assert len(buffer) == 500


@pytest.mark.unit
def test_segments_never_exceed_the_job_limit_and_are_cut_at_white_space():
    buffer = TextBuffer(max_word_chars=1000, max_segment_chars=300)
    segments = buffer.add("word " * 200, flush=True)
    assert all(len(s) <= 300 for s in segments)
    assert " ".join(segments).split() == ["word"] * 200
    assert all(not s.endswith("wor") for s in segments)  # never inside a word when white space is near


@pytest.mark.unit
def test_work_per_message_does_not_grow_with_what_was_sent_before():
    # 10 MB with no white space in 10,000-character messages: each message is released as it comes.
    buffer = TextBuffer()
    longest = 0.0
    for _ in range(1000):
        start = time.perf_counter()
        released = buffer.add("y" * 10_000)
        longest = max(longest, time.perf_counter() - start)
        assert len(buffer) < 1000 and sum(map(len, released)) == 10_000
    assert longest < 0.05


@pytest.fixture
async def flood_client(aiohttp_client, private_redis_url, data_dir):
    """A front on its own Redis database with no worker: jobs wait in the queue, so only the front's work counts."""
    settings = make_settings(
        private_redis_url,
        data_dir,
        auth_api_key=STATIC_KEY,
        ws_max_messages_per_s=100_000.0,
        ws_max_queued_chars=20_000_000,
        ws_max_queued_segments=20_000,
    )
    return await aiohttp_client(create_app(settings))


@pytest.mark.stack
async def test_a_10_mb_flood_without_white_space_never_stalls_the_event_loop(flood_client):
    stalls: list[float] = []
    stop = asyncio.Event()

    async def monitor() -> None:
        while not stop.is_set():
            start = time.perf_counter()
            await asyncio.sleep(0.001)
            stalls.append(time.perf_counter() - start - 0.001)

    watcher = asyncio.create_task(monitor())
    ws = await flood_client.ws_connect(PATH, headers={"xi-api-key": STATIC_KEY})
    await ws.send_json({"text": " "})
    message = "z" * 10_000
    async with asyncio.timeout(60):
        for _ in range(1000):  # 10 MB
            await ws.send_json({"text": message})
            await asyncio.sleep(0)  # the client shares the loop: its own sending must not be the stall measured
        await ws.send_json({"text": "done ", "flush": True})
        await asyncio.sleep(0.5)
    # The socket survived the flood: no error frame and no close came back (there is no worker, so no audio),
    # and the loop is still being watched while the front works through what is left.
    with pytest.raises(TimeoutError):
        await ws.receive(timeout=1.0)
    stop.set()
    await watcher
    await ws.close()
    worst_ms = max(stalls) * 1000
    print(f"\nlongest event-loop stall during a 10 MB no-white-space flood: {worst_ms:.1f} ms")
    assert worst_ms < 100


@pytest.mark.stack
async def test_text_queued_faster_than_it_is_spoken_ends_the_socket(aiohttp_client, private_redis_url, data_dir):
    settings = make_settings(
        private_redis_url, data_dir, auth_api_key=STATIC_KEY, ws_max_queued_chars=5000, ws_max_messages_per_s=1000.0
    )
    client = await aiohttp_client(create_app(settings))
    ws = await client.ws_connect(PATH, headers={"xi-api-key": STATIC_KEY})
    await ws.send_json({"text": " "})
    for _ in range(50):
        await ws.send_json({"text": "Some words to speak, flushed each time. " * 5, "flush": True})
    got = await collect(ws, timeout=10)
    assert got.close_code == 1008
    assert [frame["error"] for frame in got.errors] == ["max_character_limit_exceeded"]


# ----- 4 and 5: credentials on live sockets, tokens and their minting key ---------------------------------------


@pytest.fixture
async def table_front(aiohttp_client, redis_url, data_dir, shared_workers, keys_table):
    settings = make_settings(redis_url, data_dir, auth_keys_table=keys_table, auth_cache_ttl_s=2.0)
    client = await aiohttp_client(create_app(settings))
    return client, client.server.app[AUTHENTICATOR]


async def _open_socket(client, secret: str) -> aiohttp.ClientWebSocketResponse:
    url = f"{PATH}?inactivity_timeout=60"
    headers = {}
    if secret.startswith("zsk_temp_"):  # only tokens belong in a URL
        url += "&authorization=" + quote(f"Bearer {secret}")
    else:
        headers["xi-api-key"] = secret
    ws = await client.ws_connect(url, headers=headers)
    await ws.send_json({"text": " "})
    return ws


@pytest.mark.stack
async def test_a_live_socket_ends_when_its_token_expires(table_front):
    client, auth = table_front
    token, expires_at = await auth.mint_token(3)
    ws = await _open_socket(client, token)
    got = await collect(ws, timeout=15)
    late = time.time() - expires_at
    print(f"\nlive socket ended {late:.2f} s after its token expired")
    assert got.close_code == 1008
    assert [(f["error"], f["message"]) for f in got.errors] == [("invalid_api_key", "This token has expired.")]
    assert -0.5 < late < 1.5


@pytest.mark.stack
async def test_a_live_socket_ends_within_the_cache_time_of_a_revocation(table_front):
    client, auth = table_front
    key, record = await auth.create_key("revoked while speaking")
    ws = await _open_socket(client, key)
    await asyncio.sleep(0.5)
    revoked = time.time()
    assert await auth.store.revoke(record.key_id, int(revoked)) == 1
    got = await collect(ws, timeout=15)
    took = time.time() - revoked
    print(f"\nlive socket ended {took:.2f} s after its key was revoked (cache time 2 s)")
    assert got.close_code == 1008 and [f["error"] for f in got.errors] == ["invalid_api_key"]
    assert took <= 2.5


async def _revoke_only(auth: Authenticator, key_hash: str) -> None:
    """Mark one row revoked: what a token minted after `zsynth keys revoke` read the table looks like."""
    store = auth.store
    assert store is not None
    await store.client.update_item(
        TableName=store.table,
        Key={HASH_ATTR: {"S": key_hash}},
        UpdateExpression="SET revoked_at = :now",
        ExpressionAttributeValues={":now": {"N": str(int(time.time()))}},
    )


@pytest.mark.stack
async def test_a_token_is_refused_once_the_key_that_minted_it_is_revoked(table_front):
    client, auth = table_front
    key, _ = await auth.create_key("parent")
    resp = await client.post("/v1/tokens/ephemeral", json={"ttl_seconds": 600}, headers={"xi-api-key": key})
    assert resp.status == 200, await resp.text()
    token = (await resp.json())["token"]
    headers = {"xi-api-key": token}
    assert (await client.get("/v1/voices", headers=headers)).status == 200
    await _revoke_only(auth, secret_hash(key))
    revoked = time.monotonic()
    while (resp := await client.get("/v1/voices", headers=headers)).status == 200:
        assert time.monotonic() - revoked < 10, "the token outlived its revoked key"
        await asyncio.sleep(0.1)
    took = time.monotonic() - revoked
    print(f"\nchild token refused {took:.2f} s after its key was revoked (cache time 2 s)")
    assert resp.status == 401
    body = await resp.json()
    assert body["detail"]["status"] == "invalid_api_key" and "revoked" in body["detail"]["message"]
    assert took <= 2.5


@pytest.mark.stack
async def test_minting_refuses_a_revoked_key_still_in_the_cache(aiohttp_client, redis_url, data_dir, keys_table):
    settings = make_settings(redis_url, data_dir, auth_keys_table=keys_table, auth_cache_ttl_s=30.0)
    client = await aiohttp_client(create_app(settings))
    auth = client.server.app[AUTHENTICATOR]
    key, record = await auth.create_key("minter")
    headers = {"xi-api-key": key}
    assert (await client.get("/v1/voices", headers=headers)).status == 200  # cached for 30 s from now
    await auth.store.revoke(record.key_id, int(time.time()))
    resp = await client.post("/v1/tokens/ephemeral", json={}, headers=headers)
    assert resp.status == 401, await resp.text()
    assert (await resp.json())["detail"]["status"] == "invalid_api_key"


# ----- 8: unauthenticated load ------------------------------------------------------------------------------------


@pytest.fixture
async def keyed_front(aiohttp_client, redis_url, data_dir):
    settings = make_settings(
        redis_url, data_dir, auth_api_key=STATIC_KEY, ws_max_unauthenticated=2, ws_first_message_max_bytes=1024
    )
    return await aiohttp_client(create_app(settings))


@pytest.mark.stack
async def test_sockets_that_have_not_authenticated_are_capped(keyed_front):
    waiting = [await keyed_front.ws_connect(PATH) for _ in range(2)]
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await keyed_front.ws_connect(PATH)
    assert refused.value.status == 503
    # An authenticated socket does not count, and one that authenticates frees its place.
    authed = await keyed_front.ws_connect(PATH, headers={"xi-api-key": STATIC_KEY})
    await authed.send_json({"text": " "})
    await waiting[0].send_json({"text": " ", "xi_api_key": STATIC_KEY})
    await asyncio.sleep(0.3)
    third = await keyed_front.ws_connect(PATH)
    # The cap holds again: waiting[1] and third fill it.
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused_again:
        await keyed_front.ws_connect(PATH)
    assert refused_again.value.status == 503
    assert refused_again.value.headers is not None and refused_again.value.headers.get("Retry-After") == "1"
    for ws in (*waiting, authed, third):
        await ws.close()


@pytest.mark.stack
async def test_a_large_first_message_is_refused_before_the_key_is_checked(keyed_front):
    ws = await keyed_front.ws_connect(PATH)
    await ws.send_json({"text": " ", "xi_api_key": STATIC_KEY, "pad": "p" * 5000})
    got = await collect(ws, timeout=10)
    assert got.close_code == 1008
    assert [frame["error"] for frame in got.errors] == ["message_too_large"]


@pytest.mark.stack
async def test_made_up_keys_do_not_push_real_ones_out_of_the_cache(keys_table):
    reads = 0

    class Counting(Authenticator):
        async def _load(self, key_hash, secret):  # counts the real table reads
            nonlocal reads
            reads += 1
            return await super()._load(key_hash, secret)

    from zsynth.services.keystore import KeyStore

    auth = Counting(store=KeyStore(keys_table), cache_size=4)
    await auth.start()
    try:
        key, _ = await auth.create_key("real")
        await auth.verify(key)
        for n in range(20):
            with pytest.raises(AuthError):
                await auth.verify(f"zsk_live_made-up-{n}")
        before = reads
        await auth.verify(key)
        assert reads == before  # still cached
    finally:
        await auth.close()


@pytest.mark.stack
async def test_an_address_sending_made_up_keys_is_rate_limited(aiohttp_client, redis_url, data_dir, keys_table):
    settings = make_settings(redis_url, data_dir, auth_keys_table=keys_table, auth_max_failures_per_min=5)
    client = await aiohttp_client(create_app(settings))
    key, _ = await client.server.app[AUTHENTICATOR].create_key("known")
    assert (await client.get("/v1/voices", headers={"xi-api-key": key})).status == 200
    statuses = [
        (await client.get("/v1/voices", headers={"xi-api-key": f"zsk_live_made-up-{n}"})).status for n in range(8)
    ]
    assert statuses == [401] * 5 + [429] * 3
    resp = await client.get("/v1/voices", headers={"xi-api-key": "zsk_live_made-up-9"})
    assert resp.headers["Retry-After"] and (await resp.json())["detail"]["status"] == "rate_limit_exceeded"
    assert (await client.get("/v1/voices", headers={"xi-api-key": key})).status == 200  # cached: still served


# ----- 11: multipart framing counts against the body limit --------------------------------------------------------


@pytest.mark.stack
async def test_multipart_part_headers_and_empty_parts_count(aiohttp_client, redis_url, data_dir):
    client = await aiohttp_client(create_app(make_settings(redis_url, data_dir, limits_max_body_bytes=8192)))
    boundary = "b0undary"
    part = (f'--{boundary}\r\nContent-Disposition: form-data; name="x"\r\nX-Pad: {"p" * 200}\r\n\r\n\r\n').encode()

    async def body():  # chunked: no Content-Length to refuse up front
        for _ in range(200):  # about 50 KiB of part headers and no data at all
            yield part
        yield f"--{boundary}--\r\n".encode()

    resp = await client.post(
        "/v1/voices/add", data=body(), headers={"Content-Type": f"multipart/form-data; boundary={boundary}"}
    )
    assert resp.status == 413, await resp.text()
    assert (await resp.json())["detail"]["status"] == "request_too_large"


@pytest.mark.stack
async def test_an_avatar_session_ends_when_its_token_expires(
    aiohttp_client, redis_url, data_dir, keys_table, loopback_ice
):
    settings = make_settings(redis_url, data_dir, auth_api_keys=("avatar-key",), auth_keys_table=keys_table)
    tokens = Authenticator.from_settings(settings, cache_ttl_s=2.0)
    server = await aiohttp_client(create_avatar_app(settings, tokens))
    token, expires_at = await tokens.mint_token(4, server=AVATAR_SERVER)
    viewer = Viewer()
    resp = await server.post(f"/connect?session_token={token}", json=await viewer.offer())
    assert resp.status == 200, await resp.text()
    session_id = (await resp.json())["session_id"]
    ws = await server.ws_connect(f"/control/{session_id}?session_token={token}")
    events = []
    async with asyncio.timeout(15):
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.TEXT:
                events.append(msg.json())
    late = time.time() - expires_at
    print(f"\navatar session ended {late:.2f} s after its token expired")
    errors = [(e["code"], e["message"]) for e in events if e["type"] == "error"]
    assert errors == [("invalid_api_key", "This token has expired.")]
    assert events[-1]["type"] == "session.state" and events[-1]["state"] == "closed"
    assert -0.5 < late < 2.0
    assert session_id not in server.app[AVATAR_SESSIONS].sessions
    await viewer.close()


# ----- 11: a credential's share of the queue ----------------------------------------------------------------------


@pytest.mark.stack
async def test_one_key_cannot_fill_the_queue_ahead_of_another(aiohttp_client, private_redis_url, data_dir):
    # No worker on this database: jobs stay queued. Queue of 4, half of it per key.
    settings = make_settings(
        private_redis_url, data_dir, auth_api_keys=("key-a", "key-b"), jobs_max_queue=4, jobs_first_chunk_timeout_s=5.0
    )
    client = await aiohttp_client(create_app(settings))
    redis = Redis.from_url(private_redis_url)
    url = "/v1/text-to-speech/any-voice/stream"

    def post(key: str):
        body = {"text": "Waiting in the queue."}
        return asyncio.create_task(client.post(url, json=body, headers={"xi-api-key": key}))

    waiting = [post("key-a"), post("key-a")]
    await asyncio.sleep(0.5)
    assert await redis.llen(QUEUE) == 2
    resp = await client.post(url, json={"text": "One too many."}, headers={"xi-api-key": "key-a"})
    assert resp.status == 429, await resp.text()
    assert resp.headers["Retry-After"] and (await resp.json())["detail"]["status"] == "system_busy"
    waiting.append(post("key-b"))  # another key still gets in
    await asyncio.sleep(0.5)
    assert await redis.llen(QUEUE) == 3
    for task in waiting:
        task.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
    await redis.aclose()


@pytest.mark.stack
async def test_a_keys_realtime_segments_wait_for_its_own_share(aiohttp_client, private_redis_url, data_dir):
    settings = make_settings(
        private_redis_url, data_dir, auth_api_keys=("key-a", "key-b"), jobs_max_queue=4, jobs_first_chunk_timeout_s=5.0
    )
    client = await aiohttp_client(create_app(settings))
    redis = Redis.from_url(private_redis_url)
    sockets = []
    for key, messages in (("key-a", 2), ("key-a", 1), ("key-b", 1)):
        ws = await client.ws_connect(PATH, headers={"xi-api-key": key})
        await ws.send_json({"text": " "})
        for n in range(messages):
            await ws.send_json({"text": f"Segment number {n} of this socket. ", "flush": True})
        sockets.append(ws)
        await asyncio.sleep(0.3)
    # key-a's two jobs are its share: its second socket's segment waits, key-b's goes in.
    assert await redis.llen(QUEUE) == 3
    for ws in sockets:  # none was refused: no error frame, no close (the waiting segment just waits)
        with pytest.raises(TimeoutError):
            await ws.receive(timeout=0.3)
    for ws in sockets:
        await ws.close()
    await redis.aclose()
