"""Realtime scheduling on a private worker: a closed socket frees the worker, realtime goes ahead of batch, and
the front closes open sockets with GOING_AWAY when it shuts down."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from harness.audio import assert_speech, decode_audio
from harness.base import LONG_TEXT, make_settings
from harness.stores import redis_text
from harness.workers import WorkerProcess
from zsynth.core import protocol
from zsynth.speech.app import create_app

PATH = "/v1/text-to-speech/v/stream-input?output_format=pcm_16000"


@pytest.fixture
def whole_job_worker(private_redis_url, tmp_path):
    """A worker whose jobs never yield their slot (one piece per job) and that holds one stream at a time
    (``ZSYNTH_MAX_STREAMS=1``): only the queue order decides what runs next. A worker with room would take the
    waiting batch job as a stream of its own at once (docs/scheduling.md), which is not what this test is about."""
    worker = WorkerProcess(
        private_redis_url,
        f"rt-{time.monotonic_ns()}",
        tmp_path,
        ZSYNTH_PIECE_MAX_CHARS="100000",
        ZSYNTH_MAX_STREAMS="1",
    ).wait_ready()
    yield worker
    worker.stop()


async def _job_records(redis_url: str) -> list[dict[str, str]]:
    redis = Redis.from_url(redis_url)
    try:
        records = []
        async for key in redis.scan_iter(protocol.job_key("*")):
            raw = await redis.hgetall(key)
            records.append({redis_text(k): redis_text(v) for k, v in raw.items()})
        return records
    finally:
        await redis.aclose()


@pytest.mark.heavy
async def test_disconnect_mid_speech_frees_the_worker(aiohttp_client, private_redis_url, private_worker, tmp_path):
    client = await aiohttp_client(create_app(make_settings(private_redis_url, tmp_path)))
    ws = await client.ws_connect(PATH)
    await ws.send_json({"text": " "})
    await ws.send_json({"text": LONG_TEXT + " ", "flush": True})
    first = json.loads((await ws.receive(timeout=30)).data)
    assert first["audio"]
    await ws.close()  # the client goes away while the segment is being spoken
    started = time.monotonic()
    short = "A short request right after."
    resp = await client.post("/v1/text-to-speech/v?output_format=pcm_16000", json={"text": short})
    assert resp.status == 200
    samples, rate = decode_audio(await resp.read(), "pcm_16000")
    assert_speech(samples, rate, short)
    # The long segment needs ~30 sentences of synthesis; the worker was freed within about one of them.
    assert time.monotonic() - started < 8.0
    codes = [r.get("code") for r in await _job_records(private_redis_url)]
    assert "cancelled" in codes


@pytest.mark.heavy
async def test_realtime_segment_goes_ahead_of_waiting_batch_jobs(
    aiohttp_client, private_redis_url, whole_job_worker, tmp_path
):
    client = await aiohttp_client(
        create_app(make_settings(private_redis_url, tmp_path, jobs_first_chunk_timeout_s=60.0))
    )
    busy = "This batch request keeps the only worker busy for a little while, sentence after sentence. " * 6
    running = asyncio.create_task(client.post("/v1/text-to-speech/v?output_format=pcm_16000", json={"text": busy}))
    await asyncio.sleep(1.0)  # it is claimed by now
    waiting = asyncio.create_task(
        client.post("/v1/text-to-speech/v?output_format=pcm_16000", json={"text": "A batch job that waits."})
    )
    await asyncio.sleep(0.3)
    ws = await client.ws_connect(PATH)
    await ws.send_json({"text": " "})
    await ws.send_json({"text": "Realtime words jump the queue. ", "flush": True})
    await ws.send_json({"text": ""})
    frames = []
    while (msg := await ws.receive(timeout=60)).type is aiohttp.WSMsgType.TEXT:
        frames.append(json.loads(msg.data))
    assert frames[-1] == {"isFinal": True}
    for resp in await asyncio.gather(running, waiting):
        assert resp.status == 200
    records = {r["chars"]: r for r in await _job_records(private_redis_url) if r.get("state") == "done"}
    realtime = records[str(len("Realtime words jump the queue."))]
    batch = records[str(len("A batch job that waits."))]
    assert float(realtime["started_at"]) < float(batch["started_at"]), "the realtime segment should run first"


@pytest.mark.stack
async def test_shutdown_closes_sockets_with_going_away(private_redis_url, tmp_path):
    client = TestClient(TestServer(create_app(make_settings(private_redis_url, tmp_path))))
    await client.start_server()
    try:
        sockets = [await client.ws_connect(PATH) for _ in range(3)]
        for ws in sockets:
            await ws.send_json({"text": " "})
        await asyncio.sleep(0.2)
        # Clients keep reading while the front shuts down, as real ones do.
        readers = [asyncio.create_task(ws.receive(timeout=10)) for ws in sockets]
    finally:
        await client.server.close()
    for ws, reader in zip(sockets, readers, strict=True):
        msg = await reader
        assert msg.type is aiohttp.WSMsgType.CLOSE, msg
        assert ws.close_code == aiohttp.WSCloseCode.GOING_AWAY
    await client.close()


@pytest.mark.stack
async def test_synthesis_failure_ends_the_socket_with_1008(aiohttp_client, private_redis_url, tmp_path):
    """No worker answers within the first-chunk deadline: an error frame, then close 1008."""
    app = create_app(make_settings(private_redis_url, tmp_path, jobs_first_chunk_timeout_s=1.0))
    ws = await (await aiohttp_client(app)).ws_connect(PATH)
    await ws.send_json({"text": " "})
    await ws.send_json({"text": "Nobody is there to speak this. ", "flush": True})
    frames = []
    while (msg := await ws.receive(timeout=15)).type is aiohttp.WSMsgType.TEXT:
        frames.append(json.loads(msg.data))
    assert ws.close_code == 1008
    assert frames[-1]["error"] == "synthesis_unavailable"
    assert frames[-1]["code"] == 1008


@pytest.mark.stack
async def test_realtime_jobs_are_claimed_first_come_first_served(private_redis_url, tmp_path):
    """Realtime jobs go ahead of batch jobs, and among themselves keep their order (the claim side is BLMOVE RIGHT)."""
    from zsynth.core.config import Settings
    from zsynth.services.dispatch import Dispatcher

    redis = Redis.from_url(private_redis_url)
    dispatcher = Dispatcher(Settings(data_dir=tmp_path).with_(redis_url=private_redis_url), redis)
    await dispatcher.start()
    try:
        names: list[tuple[str, protocol.Priority]] = [
            ("b1", "batch"),
            ("r1", "realtime"),
            ("b2", "batch"),
            ("r2", "realtime"),
            ("r3", "realtime"),
        ]
        for name, priority in names:
            stream = await dispatcher.submit(protocol.Job(name, "v", "pcm_16000", priority=priority))
            await dispatcher.release(stream.job.job_id)
        claimed = []
        while (raw := await redis.rpop(protocol.QUEUE)) is not None:
            claimed.append(protocol.Job.from_json(redis_text(raw)).text)
        assert claimed == ["r1", "r2", "r3", "b1", "b2"]
    finally:
        await dispatcher.close()
        await redis.aclose()


@pytest.mark.stack
async def test_realtime_order_holds_while_workers_claim_between_pushes(private_redis_url, tmp_path):
    """Pushes and claims interleaved: a realtime job still queues behind the realtime jobs left, and once they are all
    claimed, the next one goes straight to the front of the batch jobs."""
    from zsynth.core.config import Settings
    from zsynth.services.dispatch import Dispatcher

    redis = Redis.from_url(private_redis_url)
    dispatcher = Dispatcher(Settings(data_dir=tmp_path).with_(redis_url=private_redis_url), redis)
    await dispatcher.start()

    async def push(name: str, priority: protocol.Priority) -> None:
        stream = await dispatcher.submit(protocol.Job(name, "v", "pcm_16000", priority=priority))
        await dispatcher.release(stream.job.job_id)

    async def claim() -> str:
        raw = await redis.rpop(protocol.QUEUE)
        assert raw is not None
        return protocol.Job.from_json(redis_text(raw)).text

    try:
        await push("b1", "batch")
        await push("r1", "realtime")
        await push("r2", "realtime")
        assert await claim() == "r1"
        await push("r3", "realtime")
        await push("b2", "batch")
        assert [await claim(), await claim()] == ["r2", "r3"]  # every realtime job is claimed, the newest included
        await push("r4", "realtime")
        await push("r5", "realtime")
        assert [await claim() for _ in range(4)] == ["r4", "r5", "b1", "b2"]
        assert await redis.llen(protocol.QUEUE) == 0
    finally:
        await dispatcher.close()
        await redis.aclose()
