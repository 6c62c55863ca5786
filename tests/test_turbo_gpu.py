"""The turbo engine on a GPU: real-size random weights through the real worker loop (skipped without CUDA).

A worker process loads a full-size random-weight checkpoint on the GPU (CUDA graphs captured before READY), and
jobs go through the real dispatcher: chunk events arrive in sequence, their samples add up to what ``done`` reports,
each piece runs to its token cap (random weights never sample the stop token), the audio is finite and not silent,
and the same seed gives the same audio.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: the GPU smoke test runs on a GPU host only", allow_module_level=True)

from redis.asyncio import Redis  # noqa: E402

from harness.base import make_settings  # noqa: E402
from harness.workers import WorkerProcess  # noqa: E402
from workers.engines.turbo import text_pieces  # noqa: E402
from workers.engines.turbo_ckpt import write_random_checkpoint  # noqa: E402
from zsynth.core import protocol  # noqa: E402
from zsynth.services.dispatch import Dispatcher  # noqa: E402

pytestmark = [
    pytest.mark.heavy,
    pytest.mark.timeout(900),
    pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning"),
]

MAX_TOKENS = 100  # 4 s of audio per piece
SHORT = "Hello there, this is a short request."
LONG = " ".join(f"Sentence number {n} is long enough that the whole text needs two pieces here." for n in range(6))


@pytest.fixture(scope="module")
def full_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_random_checkpoint(tmp_path_factory.mktemp("turbo-full"), "full")


async def run_job(dispatcher: Dispatcher, text: str, seed: int) -> tuple[bytes, list[int], dict]:
    stream = await dispatcher.submit(protocol.Job(text, "builtin", "pcm_24000", seed=seed))
    sizes: list[int] = []
    audio = b""
    async with stream:
        async for event in stream.chunks():  # raises on a sequence gap, an error event or a missed deadline
            sizes.append(len(event.audio))
            audio += event.audio
    assert stream.terminal is not None and stream.terminal.kind == "done"
    return audio, sizes, stream.terminal.meta


async def test_full_size_engine_streams_through_the_worker_loop(private_redis_url: str, full_ckpt: Path, tmp_path):
    env = {
        "ZSYNTH_ENGINE": "turbo",
        "ZSYNTH_TURBO_CHECKPOINT": str(full_ckpt),
        "ZSYNTH_TURBO_DEVICE": "cuda",
        "ZSYNTH_TURBO_MAX_TOKENS": str(MAX_TOKENS),
    }
    worker = WorkerProcess(private_redis_url, f"turbo-gpu-{time.monotonic_ns()}", tmp_path, **env)
    settings = make_settings(private_redis_url, tmp_path, jobs_first_chunk_timeout_s=120.0, jobs_chunk_timeout_s=60.0)
    redis = Redis.from_url(private_redis_url)
    dispatcher = Dispatcher(settings, redis)
    try:
        worker.wait_ready(timeout=600)
        await dispatcher.start()
        short, short_sizes, short_meta = await run_job(dispatcher, SHORT, 3)
        long, long_sizes, long_meta = await run_job(dispatcher, LONG, 4)
        again, _, _ = await run_job(dispatcher, SHORT, 3)
    finally:
        await dispatcher.close()
        await redis.aclose()
        worker.stop()

    for audio, sizes, meta, text in ((short, short_sizes, short_meta, SHORT), (long, long_sizes, long_meta, LONG)):
        pieces = len(text_pieces(text))
        samples = np.frombuffer(audio, dtype="<i2").astype(np.float32) / 32768
        assert len(audio) % 2 == 0 and all(size % 2 == 0 for size in sizes)
        assert meta["samples"] == len(samples) and meta["sample_rate"] == 24000
        assert len(sizes) >= 2 * pieces, "audio streams within each piece"
        # Every piece runs to its cap (plus three closing silence tokens): 25 tokens a second.
        expected = pieces * (MAX_TOKENS + 3) / 25
        assert expected - 0.2 * pieces <= len(samples) / 24000 <= expected + 0.1
        assert np.isfinite(samples).all() and float(np.abs(samples).max()) > 1e-3
    assert again == short, "the same seed gives the same audio on the CUDA-graph path"
