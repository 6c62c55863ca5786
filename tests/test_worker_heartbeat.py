"""A live worker is never reaped: its heartbeat recovers by itself from a Redis restart or a connection that stopped
answering, and one missed read of it never reaps anybody."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis as sync_redis
from redis.asyncio import Redis

from harness.base import make_settings
from harness.stores import RedisServer
from harness.workers import WorkerProcess
from workers.engines import load_engine
from workers.worker import Worker
from zsynth.core import protocol
from zsynth.core.config import Settings
from zsynth.services.dispatch import Dispatcher

TTL_S = 2
#: 100 words of simulated speech (2.5 words a second, 0.5 s chunks: 80 chunks) at 0.1 s a chunk: 8 s, four times
#: the heartbeat's TTL, and longer than the 3 TTLs its connection stalls for.
LONG_WORDS = " ".join(f"word{n}" for n in range(100))
LONG_CHUNKS = 66  # at least this many of its 80 arrive (as 100 of 120 did when it was 150 words)
SIMULATED = {"engine": "simulated", "sim_load_test_only": True, "sim_chunk_hold_s": 0.1}
SIMULATED_ENV = {
    "ZSYNTH_ENGINE": "simulated",
    "ZSYNTH_LOAD_TEST_ONLY": "1",
    "ZSYNTH_SIM_CHUNK_HOLD": "0.1",
    "ZSYNTH_HEARTBEAT_TTL": str(TTL_S),
}


class StallingProxy:
    """A loopback TCP proxy to Redis that can stop answering on the connections open at a given moment.

    While stalled, those connections carry nothing either way (as a link that stopped answering, or a server that
    does not read), without closing; connections opened meanwhile flow normally. Resuming lets the held bytes through.
    """

    def __init__(self, port: int) -> None:
        self.port = port
        self.server: asyncio.Server | None = None
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._pairs: set[asyncio.Event] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    def stall(self) -> None:
        for gate in self._pairs:
            gate.clear()

    def resume(self) -> None:
        for gate in self._pairs:
            gate.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        gate = asyncio.Event()
        gate.set()
        self._pairs.add(gate)
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pump(source, sink, gate))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter, gate: asyncio.Event) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while data := await source.read(65536):
                await gate.wait()
                sink.write(data)
                await sink.drain()
        sink.close()

    async def close(self) -> None:
        self.resume()
        if self.server is not None:
            self.server.close()
        for task in list(self._tasks):
            task.cancel()


@contextlib.asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[Worker]:
    """Run an in-process worker until the block ends."""
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        worker.request_stop()
        worker.request_stop()  # a second stop aborts whatever it still runs
        try:
            await asyncio.wait_for(asyncio.shield(task), 30)
        except TimeoutError:
            # Its shutdown waits on a connection the proxy held (a voice-library read, say): what the test checks
            # was checked already, so the worker is cancelled rather than waited for.
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _wait_claimed(redis: Redis, worker_id: str) -> None:
    for _ in range(200):
        if await redis.llen(protocol.processing_key(worker_id)):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{worker_id} never claimed the job")


def _reaped(caplog: Any) -> list[str]:
    return [r.getMessage() for r in caplog.records if "reaped dead worker" in r.getMessage()]


@pytest.mark.stack
async def test_a_worker_whose_redis_connection_stops_answering_is_not_reaped(private_redis_url, tmp_path, caplog):
    """The issue's regression: a worker's connection stopped answering (after a Redis fault) while it ran a job
    longer than its heartbeat TTL. Its heartbeat, on that connection, went silent and another worker reaped it while
    it spoke. The heartbeat now drops a connection that does not answer in time and beats on a fresh one."""
    host_port, db = private_redis_url.removeprefix("redis://").rsplit("/", 1)
    proxy = StallingProxy(int(host_port.rsplit(":", 1)[1]))
    proxied_url = f"redis://{await proxy.start()}/{db}"
    base: dict[str, Any] = {**SIMULATED, "worker_heartbeat_interval_s": 0.5, "worker_heartbeat_ttl_s": TTL_S}
    victim_settings = make_settings(proxied_url, tmp_path / "victim", worker_id="victim", **base)
    reaper_settings = make_settings(private_redis_url, tmp_path / "reaper", worker_id="reaper", **base)
    front = make_settings(private_redis_url, tmp_path, jobs_chunk_timeout_s=30.0, jobs_first_chunk_timeout_s=30.0)
    redis = Redis.from_url(private_redis_url)
    dispatcher = Dispatcher(front, redis)
    await dispatcher.start()
    # The victim's claim loop, heartbeat, voice library and cancel listener reach Redis through the proxy; its engine
    # thread publishes directly, so the job keeps speaking while those connections stall.
    victim = Worker(victim_settings, load_engine(victim_settings), Redis.from_url(proxied_url), _sync(front))
    reaper = Worker(reaper_settings, load_engine(reaper_settings), Redis.from_url(private_redis_url), _sync(front))
    caplog.set_level(logging.INFO, logger="workers.worker")
    try:
        stream = await dispatcher.submit(protocol.Job(LONG_WORDS, "v", "pcm_16000"))
        async with running(victim), stream:
            await _wait_claimed(redis, "victim")
            async with running(reaper):
                chunks = 0
                async for _ in stream.chunks():
                    chunks += 1
                    if chunks == 3:
                        proxy.stall()  # every connection the victim has open stops answering...
                        asyncio.get_running_loop().call_later(3 * TTL_S, proxy.resume)  # ...for 3 TTLs
                assert chunks >= LONG_CHUNKS, chunks
                await asyncio.sleep(TTL_S)  # the reaper looks a while longer
        # (The victim may reap the stopped reaper worker on its way out: that one is dead.)
        assert [line for line in _reaped(caplog) if line.endswith(" victim")] == [], _reaped(caplog)
        record = await redis.hgetall(protocol.job_key(stream.job.job_id))
        assert record[b"state"] == b"done" and record[b"worker_id"] == b"victim"
        dropped = [r.getMessage() for r in caplog.records if "heartbeat took over" in r.getMessage()]
        assert dropped, "the stalled heartbeat connection was never dropped"
    finally:
        await dispatcher.close()
        await proxy.close()
        await redis.aclose()


def _sync(settings: Settings) -> sync_redis.Redis:
    return sync_redis.Redis.from_url(settings.redis.url, socket_timeout=10)


@pytest.mark.heavy
async def test_a_redis_restart_then_a_long_job_reaps_no_worker(tmp_path, caplog):
    """Redis restarts (every worker's connections drop and their heartbeats fail once), then each of two real
    workers runs a job longer than the heartbeat TTL: both finish, and neither is reaped."""
    server = RedisServer().start()
    logs = [tmp_path / f"w{n}.log" for n in range(2)]
    workers = [
        WorkerProcess(server.url, f"w{n}", tmp_path, log_path=str(logs[n]), **SIMULATED_ENV).wait_ready()
        for n in range(2)
    ]
    try:
        server.stop()
        await asyncio.sleep(1.0)
        server.start()
        admin = Redis.from_url(server.url)
        for _ in range(100):  # both beat again on the restarted server
            if await admin.exists(*(protocol.heartbeat_key(w.worker_id) for w in workers)) == 2:
                break
            await asyncio.sleep(0.1)
        # ... and both wait on the queue again: a claim loop still in its reconnect backoff (up to a second) would
        # leave both jobs to the other worker.
        for _ in range(100):
            if sum(client.get("cmd") == "blmove" for client in await admin.client_list()) == 2:
                break
            await asyncio.sleep(0.1)
        await admin.aclose()
        redis = Redis.from_url(server.url)
        dispatcher = Dispatcher(make_settings(server.url, tmp_path, jobs_chunk_timeout_s=30.0), redis)
        await dispatcher.start()
        try:
            streams = [await dispatcher.submit(protocol.Job(LONG_WORDS, "v", "pcm_16000")) for _ in workers]
            for stream in streams:
                async with stream:
                    assert sum([1 async for _ in stream.chunks()]) >= LONG_CHUNKS
            records = [await redis.hgetall(protocol.job_key(stream.job.job_id)) for stream in streams]
            assert [r[b"state"] for r in records] == [b"done", b"done"]
            assert sorted(r[b"worker_id"] for r in records) == [b"w0", b"w1"]  # each worker ran one long job
        finally:
            await dispatcher.close()
            await redis.aclose()
        text = "".join(log.read_text() for log in logs)
        assert "heartbeat failed" in text  # the restart was felt
        assert "reaped dead worker" not in text, text
    finally:
        for worker in workers:
            worker.stop()
        server.stop()


@pytest.mark.stack
async def test_one_missed_read_of_a_heartbeat_reaps_nobody(private_redis_url, tmp_path):
    """A heartbeat missing at one look (a key read just as it expired, a beat a moment late) is not a death: the
    reaper needs it missing for longer than its TTL across two looks."""
    settings = make_settings(private_redis_url, tmp_path, worker_id="reaper", worker_heartbeat_ttl_s=1, **SIMULATED)
    redis = Redis.from_url(private_redis_url)
    reaper = Worker(settings, load_engine(settings), redis, _sync(settings))
    job = protocol.Job("Spoken by a live worker.", "v", "pcm_16000", reply_to="replies:test")
    try:
        await redis.sadd(protocol.WORKERS, "live")
        await redis.lpush(protocol.processing_key("live"), job.to_json())
        assert await reaper.reap_dead_workers() == 0  # missing once: not reaped
        await redis.set(protocol.heartbeat_key("live"), "{}", ex=5)  # it beats again
        await reaper.reap_dead_workers()
        await redis.delete(protocol.heartbeat_key("live"))  # missing again, for a moment
        await asyncio.sleep(settings.worker.heartbeat_ttl_s)
        assert await reaper.reap_dead_workers() == 0  # one look since it was last seen: still not reaped
        assert await redis.llen(protocol.processing_key("live")) == 1
        assert await redis.sismember(protocol.WORKERS, "live")
        await asyncio.sleep(settings.worker.heartbeat_ttl_s)  # now missing over a TTL across two looks: dead
        await reaper.reap_dead_workers()
        assert await redis.llen(protocol.processing_key("live")) == 0
        assert [protocol.Job.from_json(raw).job_id for raw in await redis.lrange(protocol.QUEUE, 0, -1)] == [job.job_id]
    finally:
        await reaper.beat_redis.aclose()
        await redis.aclose()
