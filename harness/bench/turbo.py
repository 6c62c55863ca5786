"""Benchmark the turbo engine: real-time factor, time to first audio, speech tokens per second, peak memory.

RTF is synthesis time over audio time (below 1 is faster than real time); TTFA is the time to the first audio
chunk; tok/s counts speech tokens per second of the whole request (sampling, mel decoding and vocoding together).

Run through ``python -m harness.bench turbo [--checkpoint DIR] [--repeats N] [--max-tokens N]``. With a
checkpoint (or ZSYNTH_TURBO_CHECKPOINT) it measures those weights; without one it builds random weights of the real
size on a CUDA box, and says so. Without CUDA it runs on the CPU with the tiny random checkpoint to prove the path
works and says plainly that the figures are not GPU figures.

This is the quick look at a host's own weights; ``./scripts/gpu-run`` (docs/gpu-run.md) is the full measurement:
20 requests per text, T3 and S3Gen timed apart, the T3 decode modes and bfloat16 compared, results written as files.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

SHORT = "Hello! Thanks for calling, how can I help you today?"
LONG = (
    "The quarterly report is ready. Revenue grew in every region, led by strong demand for the new service plans. "
    "Costs stayed flat, so margins improved for the third quarter in a row. Next, the team will review hiring "
    "plans and the product roadmap for the coming year. Questions can be sent to the finance office before "
    "Friday. After that, the numbers will be shared with the whole company in the monthly meeting, together with "
    "a short summary of what changed and why."
)


def _peak_memory(torch: Any, device: str) -> str:
    if device == "cuda":
        return f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB GPU"
    return f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB RSS (process peak)"


def measure(engine: Any, text: str, repeats: int) -> dict[str, Any]:
    """Time ``repeats`` syntheses of ``text``; report medians."""
    import torch

    from workers.engines.base import VoiceSpec

    runs: list[dict[str, float]] = []
    for n in range(repeats):
        if engine.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        first = 0.0
        samples = tokens = 0
        for chunk in engine.synthesize(text, VoiceSpec("bench"), {}, lambda: False, seed=n):
            if not first and len(chunk.pcm):
                first = time.perf_counter() - started
            samples += len(chunk.pcm)
            tokens += int(chunk.extra.get("tokens", 0))
        total = time.perf_counter() - started
        audio = samples / engine.sample_rate
        runs.append(
            {"ttfa_s": first, "total_s": total, "audio_s": audio, "rtf": total / audio, "tok_s": tokens / total}
        )
    middle = {key: sorted(run[key] for run in runs)[len(runs) // 2] for key in runs[0]}
    middle["chars"] = len(text)
    middle["peak_memory"] = _peak_memory(torch, engine.device)  # type: ignore[assignment]  # a report, not a figure
    return middle


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--checkpoint", type=Path, default=os.environ.get("ZSYNTH_TURBO_CHECKPOINT") or None)
    parser.add_argument("--repeats", type=int, default=None, help="runs per text (median reported)")
    parser.add_argument("--max-tokens", type=int, default=None, help="speech tokens per piece (25 per second)")
    parser.add_argument("--work-dir", type=Path, default=None, help="where random weights are built (kept)")


def bench(args: argparse.Namespace) -> int:

    warnings.simplefilter("ignore")
    try:
        import torch

        from workers.engines.turbo import TurboEngine
        from workers.engines.turbo_ckpt import is_random, write_random_checkpoint
    except ImportError as err:
        print(f"the turbo engine is not installed ({err}): run ./scripts/install-gpu (or --cpu)", file=sys.stderr)
        return 2
    from zsynth.core.config import Settings

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    if not cuda:
        print("NO CUDA DEVICE: GPU figures need a CUDA box. Running on the CPU with the tiny random-weight checkpoint")
        print("to prove the benchmark path works; the numbers below are NOT GPU figures.")
    ckpt = args.checkpoint if cuda else None
    if ckpt is None:
        size = "full" if cuda else "tiny"
        ckpt = args.work_dir or Path(tempfile.gettempdir()) / f"zsynth-turbo-random-{size}"
        if not (ckpt / "conds.pt").is_file():
            print(f"building a {size} random-weight checkpoint in {ckpt} ...", flush=True)
            write_random_checkpoint(ckpt, size)
    random_size = is_random(ckpt)
    # Random weights rarely emit the stop token: cap pieces so each runs a known length instead of 40 s.
    max_tokens = args.max_tokens or (1000 if random_size is None else (250 if cuda else 40))
    repeats = args.repeats or (3 if cuda else 1)
    settings = Settings(engine="turbo", engine_threads=os.cpu_count() or 1).with_(
        turbo_checkpoint=ckpt, turbo_device=device, turbo_max_tokens=max_tokens
    )
    started = time.perf_counter()
    engine = TurboEngine(settings)
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    engine.warm_up()
    warm_s = time.perf_counter() - started
    where = torch.cuda.get_device_name() if cuda else f"CPU ({os.cpu_count()} cores)"
    weights = "REAL weights" if random_size is None else f"RANDOM weights ({random_size} size)"
    print(f"device: {where}; torch {torch.__version__}; {weights} from {ckpt}")
    print(f"load {load_s:.1f} s, warm-up {warm_s:.1f} s, max {max_tokens} speech tokens per piece, {repeats} run(s)")
    print(f"{'text':<6} {'chars':>5} {'audio s':>8} {'total s':>8} {'TTFA s':>7} {'RTF':>6} {'tok/s':>7}  peak memory")
    results = {}
    for name, text in (("short", SHORT), ("long", LONG)):
        row = measure(engine, text, repeats)
        results[name] = row
        print(
            f"{name:<6} {row['chars']:>5} {row['audio_s']:>8.2f} {row['total_s']:>8.2f} {row['ttfa_s']:>7.2f} "
            f"{row['rtf']:>6.2f} {row['tok_s']:>7.1f}  {row['peak_memory']}",
            flush=True,
        )
    print(json.dumps({"device": where, "weights": weights, "max_tokens": max_tokens, "results": results}))
    return 0
