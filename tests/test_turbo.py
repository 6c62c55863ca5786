"""The turbo engine's real code path on the CPU: chatterbox-tts modules with random weights of a tiny checkpoint.

The checkpoint has the published file names and module classes (T3 with a two-layer GPT-2, full-size S3Gen and
voice encoder, a small BPE tokenizer, a built-in voice made by the package's own conditioning code). It is built once
per run (``turbo_ckpt``, conftest.py); everything is slow on a CPU, so each test does as few synthesis calls as its
claim needs.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.audio import decode_audio
from harness.base import make_settings
from harness.workers import WorkerProcess
from zsynth.speech.app import create_app

from .turbo_helpers import MAX_TOKENS, make_voice, turbo_settings

try:
    import torch

    from workers.engines.turbo import TurboEngine, chunk_schedule, text_pieces
    from workers.engines.turbo_compat import TurboUnavailable
    from workers.engines.turbo_voices import CONDS_FILE, VoiceClipError
except ImportError as err:  # pragma: no cover - a clear message instead of a bare collection error
    raise ImportError(f"the turbo tests need torch and chatterbox-tts: run ./scripts/install --test ({err})") from err

from workers.engines.base import VoiceSpec

pytestmark = [
    pytest.mark.heavy,
    pytest.mark.timeout(1200),
    # Library chatter at run time (diffusers deprecations, librosa/torch user warnings) is not under test here.
    pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning"),
]

TEXT = "Hello there, this is the first sentence. And here comes a second one! Is this the third?"
LONG_TEXT = " ".join(
    f"Sentence number {n} is long enough that two pieces are needed for the whole text [laugh] here." for n in range(5)
)


@pytest.fixture(scope="session")
def turbo_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The data directory shared by the turbo worker and the in-process engine (voices live in it)."""
    data = tmp_path_factory.mktemp("turbo-data")
    make_voice(data / "voices" / "custom-aaaa", 6.2, 120.0, seed=1)
    make_voice(data / "voices" / "custom-bbbb", 6.5, 220.0, seed=2)
    return data


@pytest.fixture(scope="session")
def engine(turbo_ckpt: Path, turbo_data: Path) -> TurboEngine:
    """The engine loaded in this process through ``from_local`` (no warm-up: the worker test covers it)."""
    return TurboEngine(turbo_settings(turbo_ckpt, turbo_data))


def run(engine: TurboEngine, text: str, voice: VoiceSpec, seed: int | None = 7, **settings: object) -> list:
    return list(engine.synthesize(text, voice, settings, lambda: False, seed=seed))


def joined(chunks: list) -> np.ndarray:
    return np.concatenate([c.pcm for c in chunks]) if chunks else np.zeros(0, np.float32)


def test_text_pieces_split_at_sentences_and_keep_tags_whole():
    pieces = text_pieces(LONG_TEXT)
    assert len(pieces) >= 2
    assert all(len(p) <= 300 for p in pieces)
    assert all(p.endswith(".") for p in pieces), pieces
    assert " ".join(pieces) == " ".join(LONG_TEXT.split())
    assert sum(p.count("[laugh]") for p in pieces) == 5
    wordy = "A " + "very " * 80 + "[clear throat] long sentence."
    assert any("[clear throat]" in p for p in text_pieces(wordy))


def test_bad_setups_stop_the_engine_with_what_to_do(turbo_ckpt: Path, tmp_path: Path):
    with pytest.raises(TurboUnavailable, match="ZSYNTH_TURBO_CHECKPOINT"):
        TurboEngine(turbo_settings(None, tmp_path))
    partial = tmp_path / "partial"
    partial.mkdir()
    for name in ("ve.safetensors", "t3_turbo_v1.safetensors", "tokenizer_config.json"):
        (partial / name).symlink_to(turbo_ckpt / name)
    with pytest.raises(TurboUnavailable, match=r"lacks s3gen_meanflow\.safetensors.*conds\.pt"):
        TurboEngine(turbo_settings(partial, tmp_path))
    if not torch.cuda.is_available():
        with pytest.raises(TurboUnavailable, match="no CUDA device"):
            TurboEngine(turbo_settings(turbo_ckpt, tmp_path, turbo_device="cuda"))


def test_clip_of_five_seconds_or_less_is_refused_before_the_model(engine: TurboEngine, tmp_path: Path):
    short = make_voice(tmp_path / "custom-short", 4.0, 150.0, seed=3)
    with pytest.raises(VoiceClipError, match="more than 5 s"):
        engine.conditioning(VoiceSpec("custom-short", path=str(short)))
    assert not (short / CONDS_FILE).exists()


def test_conditioning_is_built_once_without_autograd_saved_and_reloaded(engine: TurboEngine, tmp_path: Path):
    voice_dir = make_voice(tmp_path / "custom-cccc", 6.2, 180.0, seed=4)
    voice = VoiceSpec("custom-cccc", path=str(voice_dir))
    built_before = engine.voices.built
    conds = engine.conditioning(voice)
    assert engine.voices.built == built_before + 1
    tensors = [v for v in conds.gen.values() if torch.is_tensor(v)]
    tensors += [v for v in vars(conds.t3).values() if torch.is_tensor(v)]
    assert tensors and all(t.grad_fn is None and not t.requires_grad for t in tensors)
    assert (voice_dir / CONDS_FILE).is_file()
    assert engine.conditioning(voice) is conds  # the device cache answers the second time

    engine.voices._entries.clear()  # as after a restart: only the disk copy is left
    loaded_before = engine.voices.loaded
    again = engine.conditioning(voice)
    assert engine.voices.loaded == loaded_before + 1 and engine.voices.built == built_before + 1
    assert torch.equal(again.gen["embedding"], conds.gen["embedding"])
    assert torch.equal(again.t3.cond_prompt_speech_tokens, conds.t3.cond_prompt_speech_tokens)


def test_chunks_start_small_and_double_up_to_the_largest():
    assert chunk_schedule(8, 128) == (8, 16, 32, 64, 128)
    assert chunk_schedule(12, 40) == (12, 24, 40)
    assert chunk_schedule(40, 40) == (40,)
    assert chunk_schedule(50, 40) == (50,)


def test_long_text_streams_several_chunks_per_piece_in_order_without_clicks(engine: TurboEngine):
    chunks = run(engine, LONG_TEXT, VoiceSpec("builtin"))
    pieces = text_pieces(LONG_TEXT)
    assert engine.sample_rate == 24000
    assert [c.extra["piece"] for c in chunks] == sorted(c.extra["piece"] for c in chunks)
    assert {c.extra["piece"] for c in chunks} == set(range(len(pieces)))
    for index, piece in enumerate(pieces):
        own = [c for c in chunks if c.extra["piece"] == index]
        assert len(own) >= 2, "audio must stream within a piece, not once per piece"
        assert own[0].text == piece and all(c.text == "" for c in own[1:])
        assert [c.extra["piece_end"] for c in own] == [False] * (len(own) - 1) + [True]
    for chunk in chunks:
        assert chunk.pcm.dtype == np.float32 and chunk.pcm.ndim == 1 and np.isfinite(chunk.pcm).all()
    audio = joined(chunks)
    # Each piece is capped at MAX_TOKENS speech tokens (25 per second) plus the three closing silence tokens.
    assert 0.5 * len(pieces) <= len(audio) / 24000 <= len(pieces) * (MAX_TOKENS + 3) / 25 + 0.1
    assert float(np.abs(audio).max()) > 1e-3
    # No seam jumps: the step across each chunk boundary is within the signal's own sample-to-sample steps nearby.
    edge = 0
    for chunk in chunks[:-1]:
        edge += len(chunk.pcm)
        # The neighbourhood leaves the seam's own step out, or the check could never fail.
        before, after = audio[max(0, edge - 480) : edge], audio[edge : edge + 480]
        steps = np.abs(np.concatenate([np.diff(before), np.diff(after)]))
        assert abs(float(audio[edge] - audio[edge - 1])) <= float(steps.max()) + 1e-6


def test_seeded_requests_are_repeatable_and_voices_do_not_leak(engine: TurboEngine, turbo_data: Path):
    make_voice(turbo_data / "voices" / "custom-xxxx", 6.2, 130.0, seed=5)
    other_dir = make_voice(turbo_data / "voices" / "custom-yyyy", 6.2, 240.0, seed=6)
    voice_a = VoiceSpec("custom-xxxx")  # found in ZSYNTH_DATA_DIR/voices, as the worker passes it today
    voice_b = VoiceSpec("custom-yyyy", path=str(other_dir))
    first = joined(run(engine, "Short one.", voice_a))
    other = joined(run(engine, "Short one.", voice_b))
    again = joined(run(engine, "Short one.", voice_a))
    np.testing.assert_array_equal(first, again)
    assert other.shape != first.shape or not np.allclose(other, first, atol=1e-3)
    stopped = list(engine.synthesize(LONG_TEXT, voice_a, {}, lambda: True, seed=7))
    assert stopped == []


async def test_worker_serves_cloned_voices_over_http(
    aiohttp_client, private_redis_url: str, turbo_ckpt: Path, turbo_data: Path, engine: TurboEngine
):
    """The real worker loop: load, warm up, clone two voices, stream them, reuse the saved conditioning."""
    env = {
        "ZSYNTH_ENGINE": "turbo",
        "ZSYNTH_TURBO_CHECKPOINT": str(turbo_ckpt),
        "ZSYNTH_TURBO_DEVICE": "cpu",
        "ZSYNTH_TURBO_MAX_TOKENS": str(MAX_TOKENS),
        "ZSYNTH_TURBO_FIRST_CHUNK_TOKENS": "8",
    }
    worker = WorkerProcess(private_redis_url, f"turbo-{time.monotonic_ns()}", turbo_data, **env)
    try:
        worker.wait_ready(timeout=900)
        settings = make_settings(
            private_redis_url, turbo_data, jobs_first_chunk_timeout_s=300.0, jobs_chunk_timeout_s=300.0
        )
        client = await aiohttp_client(create_app(settings))

        async def speak(voice_id: str) -> bytes:
            resp = await client.post(
                f"/v1/text-to-speech/{voice_id}/stream?output_format=pcm_24000", json={"text": TEXT, "seed": 11}
            )
            assert resp.status == 200, await resp.text()
            assert resp.headers["x-voice-id"] == voice_id
            return await resp.read()

        first_a = await speak("custom-aaaa")
        saved = turbo_data / "voices" / "custom-aaaa" / CONDS_FILE
        assert saved.is_file()
        saved_at = saved.stat().st_mtime_ns
        first_b = await speak("custom-bbbb")
        second_a = await speak("custom-aaaa")
    finally:
        worker.stop()

    samples, rate = decode_audio(first_a, "pcm_24000")
    assert rate == 24000 and len(first_a) % 2 == 0
    assert 0.5 <= len(samples) / rate <= (MAX_TOKENS + 3) / 25 + 0.1  # three sentences, one piece
    assert float(np.abs(samples).max()) > 1e-3
    assert first_a == second_a, "the same voice and seed must give the same audio after another voice ran"
    assert first_b != first_a
    assert saved.stat().st_mtime_ns == saved_at, "the saved conditioning is reused, not rebuilt"

    # Another process (this one) reuses the conditioning the worker saved, and makes the same audio from it.
    loaded_before = engine.voices.loaded
    built_before = engine.voices.built
    here = joined(run(engine, TEXT, VoiceSpec("custom-aaaa"), seed=11))
    assert engine.voices.loaded == loaded_before + 1 and engine.voices.built == built_before
    np.testing.assert_allclose(np.clip(here, -1, 1), samples, atol=2.5 / 32768)


def test_prepared_gpu_run_pieces_on_the_cpu(engine: TurboEngine, tmp_path: Path):
    """harness/gpu_run.py's phases on this engine (tiny, CPU): figures that add up, and the files it writes."""
    import json

    from harness import gpu_run
    from harness.bench.turbo import LONG, SHORT
    from workers.engines.turbo_static import StaticT3

    dev = gpu_run.Device(torch, "cpu")
    row = gpu_run.measure(engine, dev, SHORT, 1, 16, time.monotonic() + 600)
    assert row["requests"] == 1 and row["tokens_per_piece"] == 16
    assert row["audio_s"] == pytest.approx((16 + 3) / 25, abs=0.1)  # the piece ran to its cap
    assert 0 < row["ttfa_ms"]["p50"] <= 1000 * row["rtf"]["p50"] * row["audio_s"]
    assert row["decode_ms_per_chunk"]["n"] == row["chunks_per_request"] >= 2
    assert row["t3_ms_per_token"]["p50"] > 0 and row["watermark_ms_per_chunk"]["p50"] > 0
    modes = gpu_run.decode_modes(engine, dev, 20, 10)
    assert modes["graphs_vs_eager_same_prefix"] == modes["tokens"] == 20  # on the CPU both are the eager step
    assert modes["graphs_vs_hf_same_prefix"] == modes["compared_with_hf"] == 10
    diffs = gpu_run.bf16_diffs(engine, StaticT3(engine.model.t3, 60, torch.bfloat16))
    assert 0 < diffs["t3"]["logits_rel_l2"] < 0.05 and diffs["t3"]["top1_agreement"] > 0.8
    assert 0 < diffs["s3gen_flow_mel"]["rel_l2"] < 0.05
    voice = gpu_run.cloned_voice(engine, dev, tmp_path)
    assert voice["clip_hashes"] >= 1 and voice["device_cache_ms"] < voice["build_ms"]

    report: dict[str, Any] = {
        "meta": {
            "date": "now",
            "mode": "test",
            "device": "cpu",
            "torch": "t",
            "cuda": None,
            "python": "3",
            "transformers": "5",
            "token_bound": "bounded",
        },  # fmt: skip
        "streaming": {"float32": {"short": row, "long": row}},
        "t3_modes": modes,
        "bf16_vs_fp32": diffs,
        "cloned_voice": voice,
    }
    report["targets"] = gpu_run.verdicts(report)
    gpu_run.write_outputs(tmp_path / "out", report)
    saved = json.loads((tmp_path / "out" / "gpu-figures.json").read_text())
    assert saved["streaming"]["float32"]["short"]["requests"] == 1
    page = (tmp_path / "out" / "gpu-figures.md").read_text()
    assert "| float32 | short (52 chars, 16 tokens/piece) | 1 |" in page
    fast_t3 = "yes" if row["t3_ms_per_token"]["p50"] <= 4 else "no"
    assert [verdict["met"] for verdict in report["targets"]] == ["no", "no", fast_t3]
    assert gpu_run.token_cap(LONG) == round(25 * 231.5 / 14)  # two pieces of 264 and 199 characters


def test_prepared_gpu_run_refuses_to_pass_cpu_figures_as_gpu_ones():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "harness.gpu_run"], cwd=root, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2 and "--reduced" in done.stderr
