"""Redis restarts while the processes idle: the first command after it goes out on a live connection (issue 48, A1).

A restart closes every connection the processes hold; those that sat idle in a pool were sent the next command
anyway (redis-py 8 skips its check of a pooled connection under its default maintenance-notification setting), so
the first job after a restart answered 503. Here the front, the worker and the voice library each get their first
command after a restart through, and the repeat rules of :mod:`zsynth.core.redis_link` are held to: a read that
lost its connection is sent once more, a write whose connection could not be opened is sent once more, and a write
that was sent is never repeated.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from harness.audio import assert_speech, decode_audio
from harness.fronts import front_process
from harness.stores import RedisServer, redis_text
from harness.voice_clips import reference_file
from harness.workers import WorkerProcess
from zsynth.core import protocol
from zsynth.core.redis_link import async_blocking_client, async_client, sync_client

pytestmark = pytest.mark.heavy

FORMAT = "pcm_16000"


@pytest.fixture
def server() -> Iterator[RedisServer]:
    """A redis-server of the test's own, which it restarts (on the same port)."""
    running = RedisServer().start()
    try:
        yield running
    finally:
        running.stop()


def restart(server: RedisServer) -> None:
    """Stop Redis and start it again on the same port; return once it answers PING (its data is gone)."""
    server.stop()
    server.start()


async def tts(http: aiohttp.ClientSession, base: str, text: str) -> tuple[int, bytes]:
    async with http.post(f"{base}/v1/text-to-speech/joe?output_format={FORMAT}", json={"text": text}) as resp:
        return resp.status, await resp.read()


# ----- the front ----------------------------------------------------------------------------------------------------


async def test_the_first_speech_request_after_a_restart_is_spoken(server, tmp_path):
    """The request sent the moment a restarted Redis answers PING gets its audio, not 503 ``system_busy``."""
    worker = WorkerProcess(server.url, "restart-front", tmp_path).wait_ready()
    # The front's worker count reads Redis every heartbeat interval, and a read that finds a dead pooled connection
    # happens to replace it: at its default of 2 s the old fault showed only most of the time. Idle, it shows always.
    env = {"ZSYNTH_HEARTBEAT_INTERVAL": "60"}
    try:
        with front_process(server.url, tmp_path, log_path=str(tmp_path / "front.log"), **env) as (_, base):
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
                # A few requests at once leave a few connections in the front's pool.
                warm = await asyncio.gather(*(tts(http, base, f"Warming up number {n}.") for n in range(3)))
                assert [status for status, _ in warm] == [200, 200, 200]
                await asyncio.sleep(0.5)  # idle
                await asyncio.to_thread(restart, server)
                text = "The first request after Redis came back is spoken."
                status, body = await tts(http, base, text)
                assert status == 200, body[:300]
                assert_speech(*decode_audio(body, FORMAT), text)
    finally:
        worker.stop()


# ----- the worker ---------------------------------------------------------------------------------------------------


async def test_a_worker_claims_and_speaks_a_job_queued_right_after_a_restart(server, tmp_path):
    """An idle worker claims the job queued the moment Redis is back and speaks it; none of its loops fails on a
    connection the restart left dead in a pool (its heartbeat's did, each time: the next beat came a whole
    interval later, and until then no front counted the worker)."""
    log = tmp_path / "worker.log"
    worker = WorkerProcess(server.url, "restart-claim", tmp_path, log_path=str(log), ZSYNTH_HEARTBEAT_INTERVAL="1")
    worker.wait_ready()
    try:
        await asyncio.sleep(1.5)  # idle: a few beats and looks of the reaper on pooled connections
        mark = log.stat().st_size
        await asyncio.to_thread(restart, server)
        client = Redis.from_url(server.url)
        pubsub = client.pubsub()
        try:
            await pubsub.subscribe("zsynth:replies:restart-claim")
            text = "Claimed the moment Redis came back."
            job = protocol.Job(text, "joe", FORMAT, reply_to="zsynth:replies:restart-claim")
            await client.lpush(protocol.QUEUE, job.to_json())
            audio, terminal = b"", None
            async with asyncio.timeout(30):
                while terminal is None:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    if message is None:
                        continue
                    event = protocol.Event.decode(message["data"])
                    audio += event.audio or b""
                    terminal = event if event.terminal else None
            assert terminal is not None and terminal.kind == "done", terminal
            assert_speech(*decode_audio(audio, FORMAT), text)
            # Its heartbeat is back (the restart emptied Redis), and two more beats and looks have run by now.
            async with asyncio.timeout(10):
                while not await client.exists(protocol.heartbeat_key("restart-claim")):
                    await asyncio.sleep(0.1)
            await asyncio.sleep(2.5)
        finally:
            await pubsub.aclose()
            await client.aclose()
        after = log.read_bytes()[mark:].decode(errors="replace")
        # Blocked reads in flight at the restart (the claim, the voice log, the cancel channel) lose their connection
        # and say so; a beat or a look of the reaper starts on an idle connection and must not fail.
        stale = [
            line
            for line in after.splitlines()
            if ("heartbeat failed" in line or "reaper failed to look" in line) and "closed by server" in line
        ]
        assert not stale, "\n".join(stale)
    finally:
        worker.stop()


# ----- the voice library --------------------------------------------------------------------------------------------


async def _follower_blocked(client: Redis) -> bool:
    """True once some client (the front's voice-library follower) waits in XREAD on this server."""
    clients = await client.client_list()
    return any(entry.get("cmd") == "xread" for entry in clients)


async def test_a_clone_right_after_a_restart_is_announced_to_every_box(server, tmp_path):
    """The voice library's announcement of a clone made right after a restart reaches the log every process
    follows (it was lost: 'could not announce put', on a connection the restart had closed)."""
    with front_process(server.url, tmp_path, log_path=str(tmp_path / "front.log")) as (_, base):
        await asyncio.sleep(0.5)  # idle
        await asyncio.to_thread(restart, server)
        client = Redis.from_url(server.url)
        try:
            # The follower is back, blocked in XREAD on its own connection: the clone's announcement takes another.
            async with asyncio.timeout(15):
                while not await _follower_blocked(client):
                    await asyncio.sleep(0.05)
            form = aiohttp.FormData()
            form.add_field("name", "after the restart")
            form.add_field("files", reference_file("wav"), filename="ref.wav", content_type="audio/wav")
            async with aiohttp.ClientSession() as http, http.post(f"{base}/v1/voices/add", data=form) as resp:
                assert resp.status == 200, await resp.text()
                voice_id = (await resp.json())["voice_id"]
            entries: Any = await client.xrange(protocol.VOICES_LOG)
            announced = [{redis_text(k): redis_text(v) for k, v in fields.items()} for _, fields in entries]
            assert ("put", voice_id) in [(e.get("op"), e.get("voice_id")) for e in announced], announced
        finally:
            await client.aclose()


# ----- what is repeated, and what is not ----------------------------------------------------------------------------


class CuttingProxy:
    """A TCP proxy in front of Redis that cuts one connection on demand (``cut``, then it forwards again):

    * ``accept``: at once, before the client's handshake (the command it was opened for never leaves the client);
    * ``before``: when a command naming ``marker`` arrives, without forwarding it (it never reaches Redis);
    * ``after``: when such a command arrives, after forwarding it and before its reply (it ran in Redis).

    ``seen`` counts the commands naming ``marker`` that arrived.
    """

    def __init__(self, upstream_port: int, marker: bytes) -> None:
        self.upstream_port = upstream_port
        self.marker = marker
        self.cut: str | None = None
        self.seen = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> CuttingProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut == "accept":
            self.cut = None
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        drop_reply = asyncio.Event()

        async def client_to_redis() -> None:
            while data := await reader.read(65536):
                if self.marker in data:
                    self.seen += 1
                    if self.cut == "before":
                        self.cut = None
                        return
                    if self.cut == "after":
                        self.cut = None
                        drop_reply.set()
                up_writer.write(data)
                await up_writer.drain()

        async def redis_to_client() -> None:
            while data := await up_reader.read(65536):
                if drop_reply.is_set():
                    return
                writer.write(data)
                await writer.drain()

        pumps = [asyncio.ensure_future(client_to_redis()), asyncio.ensure_future(redis_to_client())]
        with contextlib.suppress(ConnectionError):
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        for pump in pumps:
            pump.cancel()
        writer.close()
        up_writer.close()


@pytest.fixture
async def direct(server: RedisServer) -> AsyncIterator[Redis]:
    """A plain client straight to the test's Redis, to look at what the proxied clients did."""
    client = Redis.from_url(server.url)
    yield client
    await client.aclose()


async def test_a_read_that_lost_its_connection_after_it_was_sent_is_sent_once_more(server, direct):
    await direct.set("restart:read", "value")
    async with CuttingProxy(server.port, b"restart:read") as proxy:
        client = async_client(proxy.url())
        try:
            assert await client.ping()
            proxy.cut = "before"
            assert await client.get("restart:read") == b"value"
            assert proxy.seen == 2  # the cut one and its repeat
        finally:
            await client.aclose()


async def test_a_write_whose_connection_could_not_be_opened_is_sent_once(server, direct):
    async with CuttingProxy(server.port, b"restart:push") as proxy:
        client = async_blocking_client(proxy.url(), max_connections=4, timeout=1.0)
        try:
            proxy.cut = "accept"
            assert await client.rpush("restart:push", "job") == 1
            assert await direct.lrange("restart:push", 0, -1) == [b"job"]
            assert proxy.seen == 1
        finally:
            await client.aclose()


@pytest.mark.parametrize("cut", ["before", "after"])
async def test_a_write_that_was_sent_is_never_repeated(server, direct, cut):
    """Whether or not the cut push reached Redis, the client cannot know: it reports the error and sends nothing
    more, so a push that ran stays one copy (``after``) and one that did not stays none (``before``)."""
    async with CuttingProxy(server.port, b"restart:once") as proxy:
        client = async_client(proxy.url())
        try:
            assert await client.ping()
            proxy.cut = cut
            with pytest.raises(RedisConnectionError):
                await client.rpush("restart:once", "job")
            assert proxy.seen == 1
            assert await direct.llen("restart:once") == (1 if cut == "after" else 0)
        finally:
            await client.aclose()


def test_the_blocking_client_repeats_a_lost_read_and_never_a_sent_write(server):
    """The workers' engine thread and the command line use the blocking client: the same rules."""

    async def scenario() -> tuple[Any, int, int]:
        async with CuttingProxy(server.port, b"restart:sync") as proxy:
            client = sync_client(proxy.url())
            try:
                await asyncio.to_thread(client.set, "restart:sync", "value")
                proxy.cut = "before"
                value = await asyncio.to_thread(client.get, "restart:sync")
                read_seen = proxy.seen
                proxy.cut = "after"
                with pytest.raises(RedisConnectionError):
                    await asyncio.to_thread(client.append, "restart:sync", "+")
                return value, read_seen, proxy.seen
            finally:
                client.close()

    value, read_seen, seen = asyncio.run(scenario())
    assert value == b"value" and read_seen == 3  # the SET, the cut GET and its repeat
    assert seen == 4  # the APPEND once
    direct = sync_client(server.url)
    try:
        assert direct.get("restart:sync") == b"value+"
    finally:
        direct.close()


async def test_a_pooled_connection_redis_closed_while_idle_is_replaced_before_a_write(server, direct):
    """A connection the server closed while it sat in the pool carries no write: the push goes out once, on a
    fresh connection, even when the event loop has not yet read the server's close (a blocked loop, here)."""
    client = async_blocking_client(server.url, max_connections=4, timeout=1.0)
    admin = sync_client(server.url)
    try:
        assert await client.ping()
        # Closed by the server, seen from a blocking client: the loop does not run until the push is under way, so
        # only the socket itself can tell that its peer has gone.
        assert admin.client_kill_filter(_type="normal", skipme=True) >= 1
        time.sleep(0.2)
        assert await client.rpush("restart:fresh", "job") == 1
        assert await direct.lrange("restart:fresh", 0, -1) == [b"job"]
    finally:
        admin.close()
        await client.aclose()
