"""Scaling out on one Redis: several front processes share the same workers, each front hears only its own jobs."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import numpy as np
import pytest

from harness.audio import decode_audio
from harness.fronts import front_process
from harness.workers import WorkerProcess

pytestmark = pytest.mark.heavy

SHORT = "five words are said here"  # 2 s at the simulated engine's 2.5 words a second
LONG = " ".join(["twenty words of speech"] * 5)  # 20 words: 8 s


async def test_two_fronts_share_the_workers_and_keep_their_own_events(private_redis_url, tmp_path):
    env = {"ZSYNTH_ENGINE": "simulated", "ZSYNTH_LOAD_TEST_ONLY": "1", "ZSYNTH_SIM_CHUNK_HOLD": "0.02"}
    workers = [WorkerProcess(private_redis_url, f"scale-{i}", tmp_path, **env).wait_ready() for i in range(2)]
    try:
        with contextlib.ExitStack() as stack:
            bases = [stack.enter_context(front_process(private_redis_url, tmp_path))[1] for _ in range(2)]
            async with aiohttp.ClientSession() as session:

                async def speak(base: str, text: str) -> float:
                    url = f"{base}/v1/text-to-speech/any/stream?output_format=pcm_24000"
                    async with session.post(url, json={"text": text}) as resp:
                        assert resp.status == 200, await resp.text()
                        samples, rate = decode_audio(await resp.read(), "pcm_24000")
                    assert float(np.abs(samples).max()) > 0.05  # sound, not silence
                    return len(samples) / rate

                # Interleaved requests to both fronts: a short and a long text on each, several times over.
                calls = [(base, text) for _ in range(3) for base in bases for text in (SHORT, LONG)]
                durations = await asyncio.gather(*(speak(base, text) for base, text in calls))
        for (_, text), duration in zip(calls, durations, strict=True):
            assert duration == (2.0 if text == SHORT else 8.0), (text, duration)
    finally:
        for worker in workers:
            worker.stop()
