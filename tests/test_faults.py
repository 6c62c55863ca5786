"""Faults: dead workers are recovered, a full queue answers 429, stale jobs are dropped, Redis outages heal."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time

import aiohttp
import pytest
from redis.asyncio import Redis

from harness.audio import assert_speech, decode_audio
from harness.base import LONG_TEXT, make_settings
from harness.stores import RedisServer, redis_text
from harness.workers import WorkerProcess
from zsynth.core import protocol
from zsynth.speech.app import create_app


async def job_record(redis_url: str, job_id: str) -> dict[str, str]:
    client = Redis.from_url(redis_url)
    try:
        raw = await client.hgetall(protocol.job_key(job_id))
    finally:
        await client.aclose()
    return {redis_text(k): redis_text(v) for k, v in raw.items()}


@pytest.mark.heavy
async def test_unstarted_job_of_a_dead_worker_is_run_by_a_survivor(aiohttp_client, private_redis_url, tmp_path):
    doomed = WorkerProcess(private_redis_url, "doomed", tmp_path).wait_ready()
    redis = Redis.from_url(private_redis_url)
    # Ready is logged just before the claim loop first blocks: freeze it only once it waits in BLMOVE (on this db).
    db = int(private_redis_url.rsplit("/", 1)[1])
    for _ in range(100):
        if any(c.get("cmd") == "blmove" and int(c.get("db", -1)) == db for c in await redis.client_list()):
            break
        await asyncio.sleep(0.05)
    os.kill(doomed.proc.pid, signal.SIGSTOP)  # frozen inside BLMOVE: Redis still hands it the next job
    client = await aiohttp_client(create_app(make_settings(private_redis_url, tmp_path, jobs_first_chunk_timeout_s=40)))
    text = "This job was claimed by a worker that died before it spoke."
    request = asyncio.ensure_future(client.post("/v1/text-to-speech/v?output_format=pcm_16000", json={"text": text}))
    for _ in range(100):
        if await redis.llen(protocol.processing_key("doomed")):
            break
        await asyncio.sleep(0.05)
    assert await redis.llen(protocol.processing_key("doomed")) == 1, "the frozen worker did not claim the job"
    await redis.aclose()
    doomed.kill()
    survivor = WorkerProcess(private_redis_url, "survivor", tmp_path).wait_ready()
    try:
        resp = await asyncio.wait_for(request, 40)
        assert resp.status == 200
        samples, rate = decode_audio(await resp.read(), "pcm_16000")
        assert_speech(samples, rate, text)
        record = await job_record(private_redis_url, resp.headers["history-item-id"])
        assert record["state"] == "done" and record["worker_id"] == "survivor"
    finally:
        survivor.stop()


@pytest.mark.heavy
async def test_started_job_of_a_dead_worker_fails_fast_and_is_not_repeated(aiohttp_client, private_redis_url, tmp_path):
    # Both load at once; the survivor's busy job is not waited out at the end (kill, not stop: SIGTERM drains it).
    victim, survivor = (WorkerProcess(private_redis_url, name, tmp_path) for name in ("victim", "survivor2"))
    victim.wait_ready()
    survivor.wait_ready()
    try:
        client = await aiohttp_client(create_app(make_settings(private_redis_url, tmp_path, jobs_chunk_timeout_s=30)))
        # Keep the survivor busy so the long job lands on the victim.
        busy = asyncio.ensure_future(
            client.post("/v1/text-to-speech/v?output_format=pcm_16000", json={"text": LONG_TEXT})
        )
        await asyncio.sleep(0.5)
        resp = await client.post("/v1/text-to-speech/v/stream?output_format=pcm_22050", json={"text": LONG_TEXT})
        assert resp.status == 200
        assert await resp.content.readany()
        job_id = resp.headers["history-item-id"]
        assert protocol.STARTED_FIELD in await job_record(private_redis_url, job_id)
        # Whichever worker runs it, kill that one.
        redis = Redis.from_url(private_redis_url)
        in_victim = await redis.lrange(protocol.processing_key("victim"), 0, -1)
        await redis.aclose()
        (victim if any(job_id.encode() in raw for raw in in_victim) else survivor).kill()
        started = time.monotonic()
        with pytest.raises(Exception):  # noqa: B017 - aiohttp reports the cut-off transfer as a payload error
            await asyncio.wait_for(resp.read(), 30)
        # The reaper (heartbeat TTL 3 s) ended it well before the 30 s chunk deadline.
        assert time.monotonic() - started < 15
        record = await job_record(private_redis_url, job_id)
        assert record["state"] == "error" and record["code"] == "worker_died"
        busy.cancel()
    finally:
        victim.kill()
        survivor.kill()


@pytest.mark.stack
async def test_full_queue_answers_429_with_retry_after(aiohttp_client, private_redis_url, tmp_path):
    settings = make_settings(private_redis_url, tmp_path, jobs_max_queue=2, jobs_first_chunk_timeout_s=2)
    client = await aiohttp_client(create_app(settings))
    # No worker: the first two wait in the queue, the third finds it full.
    waiting = [
        asyncio.ensure_future(client.post("/v1/text-to-speech/v", json={"text": f"Queued {n}."})) for n in range(2)
    ]
    redis = Redis.from_url(private_redis_url)
    for _ in range(100):
        if await redis.llen(protocol.QUEUE) == 2:
            break
        await asyncio.sleep(0.02)
    await redis.aclose()
    resp = await client.post("/v1/text-to-speech/v", json={"text": "One too many."})
    assert resp.status == 429
    assert resp.headers["Retry-After"] == "1"
    assert (await resp.json())["detail"]["status"] == "system_busy"
    for done in await asyncio.gather(*waiting):
        assert done.status == 503  # nobody served them within the deadline


@pytest.mark.heavy
async def test_job_past_its_deadline_is_dropped_unrun(aiohttp_client, private_redis_url, tmp_path):
    client = await aiohttp_client(create_app(make_settings(private_redis_url, tmp_path, jobs_first_chunk_timeout_s=1)))
    resp = await client.post("/v1/text-to-speech/v", json={"text": "Nobody hears this in time."})
    assert resp.status == 503
    # The front that gave up took its job off the queue at once.
    assert await job_record_ids(private_redis_url) == []
    # A job whose front could not (it died, or lost Redis at that moment) is still dropped unrun by the worker.
    stale = protocol.Job("Left behind by a front.", "v", "pcm_16000", start_deadline=time.time() - 1)
    redis = Redis.from_url(private_redis_url)
    await redis.lpush(protocol.QUEUE, stale.to_json())
    worker = WorkerProcess(private_redis_url, "late", tmp_path).wait_ready()
    try:
        for _ in range(200):
            if not await redis.llen(protocol.QUEUE):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        record = await job_record(private_redis_url, stale.job_id)
        assert record["state"] == "error" and record["code"] == "deadline_exceeded"
        assert protocol.STARTED_FIELD not in record
    finally:
        await redis.aclose()
        worker.stop()


async def job_record_ids(redis_url: str) -> list[str]:
    """Ids of the jobs waiting in the queue."""
    client = Redis.from_url(redis_url)
    try:
        return [protocol.Job.from_json(raw).job_id for raw in await client.lrange(protocol.QUEUE, 0, -1)]
    finally:
        await client.aclose()


@pytest.mark.heavy
async def test_redis_outage_fails_fast_and_heals(aiohttp_client, tmp_path):
    server = RedisServer().start()
    worker = WorkerProcess(server.url, "outage", tmp_path).wait_ready()
    try:
        client = await aiohttp_client(create_app(make_settings(server.url, tmp_path)))
        ok = await client.post("/v1/text-to-speech/v?output_format=pcm_16000", json={"text": "Before the outage."})
        assert ok.status == 200
        server.stop()
        started = time.monotonic()
        resp = await client.post("/v1/text-to-speech/v", json={"text": "During the outage."})
        assert resp.status == 503
        assert resp.headers["Retry-After"]
        assert (await resp.json())["detail"]["status"] == "system_busy"
        assert time.monotonic() - started < 5, "a request hung while Redis was down"
        assert (await client.get("/readyz")).status == 503
        server.start()
        # The worker reconnects and beats again; the front's pool and pub/sub reconnect on their own.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (await client.get("/readyz")).status != 200:
            await asyncio.sleep(0.3)
        text = "After the outage, speech works again without a restart."
        resp = await client.post("/v1/text-to-speech/v?output_format=pcm_16000", json={"text": text})
        assert resp.status == 200, await resp.text()
        samples, rate = decode_audio(await resp.read(), "pcm_16000")
        assert_speech(samples, rate, text)
    finally:
        worker.stop()
        server.stop()


@pytest.mark.heavy
async def test_a_dropped_reply_subscription_fails_only_the_streams_that_lost_audio(aiohttp_client, tmp_path, caplog):
    """The reply listener once failed every open stream after each read that failed while it reconnected, so a job
    that had lost nothing (queued, or submitted after the drop) was cut short too, and logged only as "cancelled by
    the front". Now a dropped subscription costs only the events published while it was down, and every job's end
    is logged with its reason."""
    server = RedisServer().start()
    # One piece per job: the long job keeps the one slot, so the short one is still queued when the drop comes.
    worker = WorkerProcess(server.url, "drop", tmp_path, ZSYNTH_PIECE_MAX_CHARS="100000").wait_ready()
    long_text = " ".join(f"Sentence {n} keeps the only worker busy for a while longer." for n in range(12))
    short_text = "Queued while the subscription dropped, spoken whole."
    try:
        client = await aiohttp_client(create_app(make_settings(server.url, tmp_path, jobs_first_chunk_timeout_s=60.0)))
        caplog.set_level("INFO", logger="zsynth.services.dispatch")
        busy = await client.post("/v1/text-to-speech/v/stream?output_format=pcm_16000", json={"text": long_text})
        assert busy.status == 200
        await busy.content.readany()  # the long job runs
        queued = asyncio.create_task(
            client.post("/v1/text-to-speech/v?output_format=pcm_16000", json={"text": short_text})
        )
        admin = Redis.from_url(server.url)
        try:
            while not await admin.llen(protocol.QUEUE):
                await asyncio.sleep(0.02)
            assert await admin.client_kill_filter(_type="pubsub") >= 1  # the front's reply subscription, say by a proxy
        finally:
            await admin.aclose()
        resp = await queued
        assert resp.status == 200, await resp.text()
        assert_speech(*decode_audio(await resp.read(), "pcm_16000"), short_text)
        queued_id = resp.headers["history-item-id"]
        # The running stream lost what was published while the listener was away: it is whole, or cut with a reason.
        with contextlib.suppress(aiohttp.ClientPayloadError):
            await busy.read()
        ends = [r.getMessage() for r in caplog.records if " ended: " in r.getMessage()]
        assert f"job {queued_id} ended: done" in ends, ends
        busy_end = [line for line in ends if line.startswith(f"job {busy.headers['history-item-id']} ended: ")]
        assert len(busy_end) == 1 and busy_end[0].split(": ", 1)[1].split(":")[0] in ("done", "lost events"), ends
    finally:
        worker.stop()
        server.stop()
