"""A hostile text cannot take a worker down: bounded engine calls, a memory ceiling per job, no poison re-runs.

The front cuts long words before a job is queued; these tests reach the worker with texts that were never cut
(queued straight on Redis, or a front without that stage), which is what the worker must survive on its own.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import redis as sync_redis
from redis.asyncio import Redis

from harness.audio import assert_speech, decode_audio
from harness.base import ROOT, make_settings, wait_for
from harness.measure import sample_sum, scrape
from harness.workers import WorkerProcess
from workers.engines.base import VoiceSpec
from workers.memory import MEMORY_EXIT_CODE, MemoryWatch
from zsynth.core import protocol
from zsynth.core.config import Settings, SettingsError
from zsynth.speech.app import create_app

pytestmark = pytest.mark.timeout(300)

LONG_WORD = ("1st2nd3rd4th" * 200)[:2000]  # the case: 2,000 characters without white space
MB = 10**6


# ----- Piper: bounded calls ------------------------------------------------------------------------------------


@pytest.mark.unit
def test_phoneme_runs_are_bounded_and_cut_at_word_breaks():
    from workers.engines.piper import WORD_BREAK, phoneme_runs

    words = [list("abcdefg")] * 60  # 60 words of 7 phonemes: 479 with the breaks
    phonemes = [p for word in words for p in [*word, WORD_BREAK]][:-1]
    runs = phoneme_runs(phonemes, 256)
    assert len(runs) == 2 and all(len(run) <= 256 and not inside for run, inside in runs)
    assert abs(len(runs[0][0]) - len(runs[1][0])) <= 8  # even halves, not 256 and a crumb
    assert [*runs[0][0], WORD_BREAK, *runs[1][0]] == phonemes  # only the break at the cut is dropped
    word = list("x" * 1000)  # one word: cut inside it, and said so
    runs = phoneme_runs(word, 256)
    assert [len(run) for run, _ in runs] == [250, 250, 250, 250]
    assert [inside for _, inside in runs] == [True, True, True, False]
    assert phoneme_runs(list("short"), 256) == [(list("short"), False)]
    assert phoneme_runs([], 256) == []


class _CountingSession:
    """Wraps onnxruntime's session (a third-party object) to record the phoneme ids each call gets."""

    def __init__(self, session):
        self.session = session
        self.calls: list[int] = []

    def run(self, outputs, inputs, *args):
        self.calls.append(int(inputs["input"].shape[1]))
        return self.session.run(outputs, inputs, *args)

    def __getattr__(self, name):
        return getattr(self.session, name)


@pytest.fixture(scope="module")
def piper():
    from workers.engines.piper import PiperEngine

    engine = PiperEngine()
    engine._voice.session = _CountingSession(engine._voice.session)
    return engine


@pytest.mark.unit
def test_a_long_sentence_reaches_onnx_in_bounded_calls(piper):
    """A 300-character sentence (the longest a worker speaks whole, about 330 phonemes): several bounded calls, one
    chunk of speech whose timing covers it; before, one call took every phoneme of a sentence, and a
    2,000-character word, one sentence then, took 2.8 GB."""
    from workers.engines.piper import MAX_CALL_PHONEMES

    piper._voice.session.calls.clear()
    sentence = ("seventeen seventy seven " * 13).strip()[:300]
    chunks = list(piper.synthesize(sentence, VoiceSpec("v"), {}, lambda: False))
    calls = piper._voice.session.calls
    assert len(calls) >= 2
    assert max(calls) <= 2 * MAX_CALL_PHONEMES + 3  # ids: each phoneme and its pad, plus ^, pad and $
    assert len(chunks) == 1 and chunks[0].text == sentence
    pcm = chunks[0].pcm
    assert len(pcm) / piper.sample_rate > 8.0  # every run was spoken: 39 words
    assert float(np.sqrt(np.mean(pcm**2))) > 0.02  # not silence
    assert chunks[0].timing is not None and sum(n for _, n in chunks[0].timing) == len(pcm)


@pytest.mark.unit
def test_cancellation_is_honoured_between_bounded_calls(piper):
    piper._voice.session.calls.clear()
    asked = []

    def should_stop() -> bool:
        asked.append(time.monotonic())
        return len(piper._voice.session.calls) >= 1  # stop once the first call has run

    assert list(piper.synthesize(LONG_WORD, VoiceSpec("v"), {}, should_stop)) == []
    assert len(piper._voice.session.calls) == 1  # not the 3,000 phonemes in one call, nor all the runs


# ----- the ceiling: settings and the watch ---------------------------------------------------------------------


@pytest.mark.unit
def test_max_rss_setting_takes_bytes_and_units():
    assert Settings.from_env({"ZSYNTH_WORKER_MAX_RSS": "2GiB"}).worker.max_rss == 2 * 1024**3
    assert Settings.from_env({"ZSYNTH_WORKER_MAX_RSS": "1500MB"}).worker.max_rss == 1500 * MB
    assert Settings.from_env({"ZSYNTH_WORKER_MAX_RSS": "123456"}).worker.max_rss == 123456
    assert Settings.from_env({}).worker.max_rss == 0  # the engine's default
    with pytest.raises(SettingsError, match="ZSYNTH_WORKER_MAX_RSS"):
        Settings.from_env({"ZSYNTH_WORKER_MAX_RSS": "lots"})


@pytest.mark.unit
def test_memory_watch_acts_once_then_gives_up_after_the_grace():
    over: list[int] = []
    stuck: list[int] = []
    watch = MemoryWatch(100 * MB, over.append, stuck.append, grace_s=0.2)
    watch.check(500 * MB)  # not armed: between jobs nothing happens
    watch.arm()
    watch.check(90 * MB)
    assert not watch.over and over == []
    watch.check(120 * MB)
    watch.check(130 * MB)
    assert watch.over and over == [120 * MB] and stuck == []
    time.sleep(0.25)
    watch.check(130 * MB)
    assert stuck == [130 * MB]
    watch.arm()  # the next job starts clean
    assert not watch.over
    watch.check(160 * MB)  # past 1.5x the ceiling: over and stuck at once
    assert over[-1] == 160 * MB and stuck[-1] == 160 * MB
    watch.disarm()


# ----- the ceiling on a real worker ----------------------------------------------------------------------------


def _heartbeat(url: str, worker_id: str) -> dict | None:
    client = sync_redis.Redis.from_url(url)
    try:
        raw = client.get(protocol.heartbeat_key(worker_id))
    finally:
        client.close()
    return json.loads(raw) if raw else None


def _idle_rss(url: str, data_dir: Path) -> int:
    """A Piper worker's RSS once warm and idle, as its heartbeat reports it."""
    worker = WorkerProcess(url, "measure", data_dir).wait_ready()
    try:
        time.sleep(1.0)
        beat = _heartbeat(url, "measure")
        assert beat is not None and beat["rss"] > 50 * MB
        return int(beat["rss"])
    finally:
        worker.stop()


@pytest.mark.heavy
async def test_job_over_the_ceiling_gets_400_and_the_worker_serves_on(aiohttp_client, private_redis_url, tmp_path):
    """A worker whose ceiling is 100 MB over its idle RSS. The 2,000-character word, queued straight on Redis (no
    front cuts it), ends with input_too_complex within one bounded call; so does a request of dense 12-character
    words through the front (words no text stage cuts), with 400 in the ElevenLabs envelope. Each job is marked and
    its slot freed; the worker gives its memory back and speaks the next request."""
    ceiling = _idle_rss(private_redis_url, tmp_path) + 100 * MB
    worker = WorkerProcess(private_redis_url, "capped", tmp_path, ZSYNTH_WORKER_MAX_RSS=str(ceiling)).wait_ready()
    redis = Redis.from_url(private_redis_url)

    def idle_under_ceiling() -> bool:  # the engine's arena was given back
        beat = _heartbeat(private_redis_url, "capped") or {}
        return beat.get("state") == "idle" and 0 < beat.get("rss", 0) < ceiling

    try:
        pubsub = redis.pubsub(ignore_subscribe_messages=True)
        await pubsub.subscribe("replies:test")
        job = protocol.Job(LONG_WORD, "joe", "pcm_22050", reply_to="replies:test")
        started = time.monotonic()
        await redis.lpush(protocol.QUEUE, job.to_json())
        event = await _next_event_async(pubsub, timeout=30)
        while event.kind == "chunk":  # the worker's sentence split cuts the word: its first pieces may be spoken
            event = await _next_event_async(pubsub, timeout=30)
        await pubsub.aclose()
        assert (event.kind, event.meta["code"]) == ("error", "input_too_complex")
        assert time.monotonic() - started < 20.0  # one bounded call past the ceiling, not the whole word
        assert await redis.hexists(protocol.job_key(job.job_id), protocol.MEMORY_FIELD)  # never to be run again
        wait_for(idle_under_ceiling, 10, "an idle heartbeat under the ceiling")

        client = await aiohttp_client(create_app(make_settings(private_redis_url, tmp_path)))
        resp = await client.post("/v1/text-to-speech/v?output_format=pcm_22050", json={"text": "1st2nd3rd4th " * 160})
        body = await resp.json()
        assert resp.status == 400, body
        assert body["detail"]["code"] == "input_too_complex" and body["detail"]["type"] == "validation_error"
        marked = [key async for key in redis.scan_iter(protocol.JOB_KEY_PREFIX + "*")]
        assert len(marked) == 2 and all([await redis.hexists(key, protocol.MEMORY_FIELD) for key in marked])
        assert await redis.llen(protocol.processing_key("capped")) == 0  # its slot was released
        assert worker.proc.poll() is None
        wait_for(idle_under_ceiling, 10, "an idle heartbeat under the ceiling")

        text = "A short sentence after the long ones."
        resp = await client.post("/v1/text-to-speech/v?output_format=pcm_22050", json={"text": text})
        assert resp.status == 200
        samples, rate = decode_audio(await resp.read(), "pcm_22050")
        assert_speech(samples, rate, text)
        assert worker.proc.poll() is None
        # Its own metrics count both jobs the ceiling stopped, by their outcome too, and show the ceiling.
        scraped = scrape(worker.metrics_url)
        assert sample_sum(scraped, "zsynth_worker_memory_ceiling_stops_total") == 2
        assert sample_sum(scraped, "zsynth_worker_jobs_total", outcome="input_too_complex") == 2
        assert sample_sum(scraped, "zsynth_worker_max_rss_bytes") == ceiling
    finally:
        await redis.aclose()
        worker.stop()


# A worker process whose engine allocates past 1.5x its ceiling and never looks at should_stop.
_STUCK_WORKER = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    import numpy as np
    import redis as sync_redis
    from redis.asyncio import Redis
    from workers.engines.base import EngineChunk
    from workers.memory import rss_bytes
    from workers.worker import Worker
    from zsynth.core.config import Settings

    class Hog:
        name = "hog"
        sample_rate = 16000
        def warm_up(self): pass
        def forget_voice(self, voice_id): pass
        def synthesize(self, text, voice, settings, should_stop, seed=None, timing=True):
            hog = np.ones(400 * 10**6, dtype=np.uint8)  # touched: resident
            time.sleep(60)  # never asks should_stop
            yield EngineChunk(pcm=np.zeros(160, dtype=np.float32) + hog[0], text=text)

    async def main():
        url, data = sys.argv[1], sys.argv[2]
        ceiling = rss_bytes() + 50 * 10**6
        settings = Settings(data_dir=Path(data)).with_(redis_url=url, worker_id="hog", worker_max_rss=ceiling)
        worker = Worker(settings, Hog(), Redis.from_url(url), sync_redis.Redis.from_url(url))
        await worker.run()

    asyncio.run(main())
    """
)


@pytest.mark.heavy
def test_job_that_will_not_stop_restarts_the_worker_cleanly(private_redis_url, tmp_path):
    """The engine ignores the stop: the worker publishes input_too_complex, frees its slot, and exits non-zero at
    once (the RSS passed the hard limit), so systemd starts a fresh one; the job is marked so nobody runs it again."""
    client = sync_redis.Redis.from_url(private_redis_url)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe("replies:test")
    proc = subprocess.Popen([sys.executable, "-c", _STUCK_WORKER, private_redis_url, str(tmp_path)], cwd=ROOT)
    try:
        wait_for(lambda: client.exists(protocol.heartbeat_key("hog")), 60, "the hog worker's heartbeat")
        job = protocol.Job("Anything at all.", "v", "pcm_16000", reply_to="replies:test")
        client.lpush(protocol.QUEUE, job.to_json())
        assert proc.wait(30) == MEMORY_EXIT_CODE
        event = _next_event(pubsub)
        assert event.kind == "error" and event.meta["code"] == "input_too_complex"
        assert client.llen(protocol.processing_key("hog")) == 0
        record = client.hgetall(protocol.job_key(job.job_id))
        assert record[b"state"] == b"error" and record[b"code"] == b"input_too_complex"
        assert int(record[protocol.MEMORY_FIELD.encode()]) > 50 * MB
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        pubsub.close()
        client.close()


def _next_event(pubsub) -> protocol.Event:
    """The next event on a subscription (the subscription's own confirmation is skipped)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.5)
        if message is not None:
            return protocol.Event.decode(message["data"])
    raise AssertionError("no event within 5 s")


async def _next_event_async(pubsub, timeout: float = 5.0) -> protocol.Event:
    """The same on an asyncio subscription."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = await pubsub.get_message(timeout=0.5)
        if message is not None:
            return protocol.Event.decode(message["data"])
    raise AssertionError(f"no event within {timeout} s")


# ----- poison jobs ---------------------------------------------------------------------------------------------


class _Idle:
    name = "idle"
    sample_rate = 16000

    def warm_up(self) -> None:
        """Nothing to warm."""

    def forget_voice(self, voice_id: str) -> None:
        """Nothing is cached per voice."""

    def synthesize(self, text, voice, settings, should_stop, seed=None, timing=True):
        return iter(())


@pytest.mark.stack
async def test_memory_killed_job_is_never_requeued(private_redis_url, tmp_path):
    """A dead worker's unstarted job goes back to the queue once, unless it passed the memory ceiling: that one
    ends with input_too_complex for its client, never on a second worker."""
    from workers.worker import Worker

    settings = make_settings(private_redis_url, tmp_path, worker_id="reaper", worker_heartbeat_ttl_s=1)
    redis = Redis.from_url(private_redis_url)
    chunk_redis = sync_redis.Redis.from_url(private_redis_url)
    try:
        plain = protocol.Job("An ordinary job.", "v", "pcm_16000", reply_to="replies:test")
        poison = protocol.Job(LONG_WORD, "v", "pcm_16000", reply_to="replies:test")
        await redis.sadd(protocol.WORKERS, "dead")  # a worker whose heartbeat is gone, with both jobs in flight
        await redis.lpush(protocol.processing_key("dead"), plain.to_json(), poison.to_json())
        await redis.hset(protocol.job_key(poison.job_id), protocol.MEMORY_FIELD, str(3 * 10**9))
        pubsub = redis.pubsub(ignore_subscribe_messages=True)
        await pubsub.subscribe("replies:test")
        reaper = Worker(settings, _Idle(), redis, chunk_redis)
        assert await reaper.reap_dead_workers() == 0  # one look never reaps: the heartbeat must stay missing a TTL
        await asyncio.sleep(settings.worker.heartbeat_ttl_s)
        assert await reaper.reap_dead_workers() == 1
        queued = [protocol.Job.from_json(raw) for raw in await redis.lrange(protocol.QUEUE, 0, -1)]
        assert [(j.job_id, j.attempts) for j in queued] == [(plain.job_id, 1)]  # the ordinary one, retried once
        event = await _next_event_async(pubsub)
        assert event.job_id == poison.job_id and event.meta["code"] == "input_too_complex"
        record = await redis.hgetall(protocol.job_key(poison.job_id))
        assert record[b"state"] == b"error" and record[b"code"] == b"input_too_complex"
        await pubsub.aclose()
        # A restarted worker fails its own leftovers the same way (never worker_restarted for a memory kill).
        await redis.lpush(protocol.processing_key("reaper"), poison.to_json())
        await reaper._recover_in_flight()
        assert await redis.llen(protocol.processing_key("reaper")) == 0
        # And a copy of it that reaches the queue (the remainder of a yielded job) is dropped unrun.
        await redis.delete(protocol.QUEUE)
        await redis.lpush(protocol.QUEUE, poison.to_json())
        await reaper.run(burst=True)
        record = await redis.hgetall(protocol.job_key(poison.job_id))
        assert record[b"code"] == b"input_too_complex" and reaper.jobs_done == 0
    finally:
        chunk_redis.close()
        await redis.aclose()


# ----- Turbo: bounded text tokens ------------------------------------------------------------------------------


@pytest.mark.unit
def test_turbo_text_tokens_are_cut_to_the_cap(tmp_path):
    """The tokenizer of the random-weight checkpoint (the published file set): a 10,000-character word gives T3 at
    most TEXT_MAX_TOKENS, which fit the static cache's prefill; an ordinary piece is untouched."""
    pytest.importorskip("chatterbox", reason="the turbo engine's packages: ./scripts/install --test")
    from transformers import AutoTokenizer

    from workers.engines.turbo import TEXT_MAX_TOKENS, text_token_ids
    from workers.engines.turbo_ckpt import _write_tokenizer
    from workers.engines.turbo_static import PREFILL_MAX

    _write_tokenizer(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path))
    assert TEXT_MAX_TOKENS == PREFILL_MAX - 1 - 375 - 1  # speaker token, prompt, start: the prefill stays static
    word = ("1st2nd3rd4th" * 834)[:10000]
    assert len(tokenizer(word).input_ids) > 10 * TEXT_MAX_TOKENS  # whole, it would be thousands of tokens
    ids = text_token_ids(tokenizer, word)
    assert tuple(ids.shape) == (1, TEXT_MAX_TOKENS)
    assert ids[0].tolist() == tokenizer(word).input_ids[:TEXT_MAX_TOKENS]  # its start, in order
    sentence = "Hello there, this is an ordinary sentence."
    assert text_token_ids(tokenizer, sentence)[0].tolist() == tokenizer(sentence).input_ids
