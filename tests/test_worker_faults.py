"""A killed worker never leaves its client hanging; a departed client frees the worker."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from redis.asyncio import Redis

from harness.audio import assert_speech, decode_audio
from harness.base import LONG_TEXT, make_settings
from zsynth.core import protocol
from zsynth.speech.app import create_app


@pytest.mark.heavy
async def test_killed_worker_mid_stream_ends_the_response(aiohttp_client, private_redis_url, private_worker, tmp_path):
    settings = make_settings(private_redis_url, tmp_path, jobs_chunk_timeout_s=3.0)
    client = await aiohttp_client(create_app(settings))
    resp = await client.post("/v1/text-to-speech/v/stream?output_format=pcm_22050", json={"text": LONG_TEXT})
    assert resp.status == 200
    first = await resp.content.readany()
    assert first
    private_worker.kill()
    started = time.monotonic()
    with pytest.raises(aiohttp.ClientPayloadError):
        await asyncio.wait_for(resp.read(), 15)
    # The client learnt of the failure within the chunk deadline (plus slack), not after minutes.
    assert time.monotonic() - started < 3.0 + 3.0


@pytest.mark.heavy
async def test_killed_worker_before_first_byte_gets_503(aiohttp_client, private_redis_url, private_worker, tmp_path):
    settings = make_settings(private_redis_url, tmp_path, jobs_first_chunk_timeout_s=3.0)
    client = await aiohttp_client(create_app(settings))
    private_worker.kill()
    started = time.monotonic()
    resp = await client.post("/v1/text-to-speech/v", json={"text": "Nobody is left to speak this."})
    assert resp.status == 503
    assert resp.headers["Retry-After"]
    body = await resp.json()
    assert body["detail"]["status"] == "system_busy"
    assert time.monotonic() - started < 3.0 + 3.0


@pytest.mark.heavy
async def test_client_disconnect_frees_the_worker(aiohttp_client, private_redis_url, private_worker, tmp_path):
    client = await aiohttp_client(create_app(make_settings(private_redis_url, tmp_path)))
    resp = await client.post("/v1/text-to-speech/v/stream?output_format=pcm_22050", json={"text": LONG_TEXT})
    assert resp.status == 200
    assert await resp.content.readany()
    long_job = resp.headers["history-item-id"]
    resp.close()  # the client goes away after the first chunk
    started = time.monotonic()
    short = "A short request right after."
    resp2 = await client.post("/v1/text-to-speech/v?output_format=pcm_16000", json={"text": short})
    assert resp2.status == 200
    samples, rate = decode_audio(await resp2.read(), "pcm_16000")
    assert_speech(samples, rate, short)
    # The long text needs ~30 sentences of synthesis; the worker was freed within about one of them.
    assert time.monotonic() - started < 6.0
    redis = Redis.from_url(private_redis_url)
    record = await redis.hgetall(protocol.job_key(long_job))
    await redis.aclose()
    assert record[b"state"] == b"error"
    assert record[b"code"] == b"cancelled"


class _BreaksAfterOneChunk:
    """An engine whose second chunk fails the way a missing file does (fault injection for the worker loop)."""

    name = "breaks"
    sample_rate = 16000

    def warm_up(self) -> None:
        """Nothing to warm."""

    def forget_voice(self, voice_id: str) -> None:
        """Nothing is cached per voice."""

    def synthesize(self, text, voice, settings, should_stop, seed=None, timing=True):
        import numpy as np

        from workers.engines.base import EngineChunk

        yield EngineChunk(pcm=np.full(1600, 0.1, dtype=np.float32), text=text)
        raise FileNotFoundError("reference clip is gone")


@pytest.mark.stack
async def test_engine_failure_mid_job_reaches_the_client_as_an_error(private_redis_url, tmp_path):
    """An engine error after audio started ends the job with synthesis_failed (not a hang, not a Redis outage)."""
    import redis as sync_redis

    from workers.worker import Worker
    from zsynth.services.dispatch import Dispatcher, JobFailed

    settings = make_settings(private_redis_url, tmp_path)
    redis = Redis.from_url(private_redis_url)
    dispatcher = Dispatcher(settings, redis)
    await dispatcher.start()
    chunk_redis = sync_redis.Redis.from_url(private_redis_url)
    worker = Worker(settings, _BreaksAfterOneChunk(), redis, chunk_redis)
    try:
        stream = await dispatcher.submit(protocol.Job("Two chunks, one of them broken.", "v", "pcm_16000"))
        await worker.run(burst=True)
        async with stream:
            chunks = []
            with pytest.raises(JobFailed) as failed:
                async for event in stream.chunks():
                    chunks.append(event)
        assert len(chunks) == 1 and len(chunks[0].audio) == 3200
        assert failed.value.code == "synthesis_failed" and "reference clip is gone" in failed.value.message
        assert await redis.llen(protocol.processing_key(settings.worker.id)) == 0  # the slot was released
    finally:
        await dispatcher.close()
        chunk_redis.close()
        await redis.aclose()


@pytest.mark.stack
async def test_a_job_pushed_twice_is_spoken_once(private_redis_url, tmp_path, caplog):
    """A push Redis ran twice (a retried command whose reply a failover cut) leaves two copies of one job in the
    queue: the first copy claimed owns the job and the second is dropped without a word, so the client hears the
    audio once and no second terminal event reaches its stream."""
    import redis as sync_redis

    from workers.engines import load_engine
    from workers.worker import Worker
    from zsynth.services.dispatch import Dispatcher

    settings = make_settings(private_redis_url, tmp_path)
    redis = Redis.from_url(private_redis_url)
    dispatcher = Dispatcher(settings, redis)
    await dispatcher.start()
    chunk_redis = sync_redis.Redis.from_url(private_redis_url)
    worker = Worker(settings, load_engine(settings), redis, chunk_redis)
    text = "Pushed twice by a retry, and spoken only once."
    caplog.set_level("INFO", logger="workers.worker")
    try:
        stream = await dispatcher.submit(protocol.Job(text, "joe", "pcm_16000"))
        await redis.lpush(protocol.QUEUE, stream.queued_as)  # the same job JSON again, claimed after the first
        await worker.run(burst=True)  # both copies are claimed before the client reads anything
        audio = b"".join([event.audio async for event in stream.chunks()])
        assert_speech(*decode_audio(audio, "pcm_16000"), text)
        assert stream.queue.empty(), "a second run's events reached the stream"
        assert await redis.llen(protocol.QUEUE) == 0
        assert await redis.llen(protocol.processing_key(settings.worker.id)) == 0
        assert await redis.hget(protocol.job_key(stream.job.job_id), "state") == b"done"
        dropped = [r.getMessage() for r in caplog.records if "dropped unrun, silently" in r.getMessage()]
        assert len(dropped) == 1 and stream.job.job_id in dropped[0], dropped
        await stream.close()
    finally:
        await dispatcher.close()
        chunk_redis.close()
        await redis.aclose()
