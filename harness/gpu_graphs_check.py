"""Device check of the warm start and of streams sharing T3's buffers (issue 47, items 2 and 3), in one short run.

On a GPU it builds the tiny random checkpoint (a two-layer T3, S3Gen and the voice encoder at full size), then:

1. loads the engine and warms it up twice, as two worker starts would, timing each: the load (``from_local``) and
   the warm-up (T3's, the flow's and the vocoder's CUDA graphs captured with ``torch.cuda.CUDAGraph`` into one pool,
   then a short synthesis); the target is a warm-up of 30 s or less;
2. replays every flow and vocoder bucket on random inputs and compares it with the same bucket's eager pass;
3. runs two streams alone, then interleaved chunk by chunk, with the same seeds, and compares their audio.

    python -m harness.gpu_graphs_check [--device cpu] [--out DIR]

It prints one JSON line per check and writes ``gpu-graphs-check.json`` into ``--out`` (default ``$OUT``, else
``.bench/gpu-graphs-check``); the exit status is 1 if a check failed. ``--device cpu`` runs the same steps with nothing
captured (a check of the script itself, not of the graphs).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

TEXTS = ("The first stream speaks this sentence.", "And the second one speaks another.")
TOLERANCE = 1e-4  # replay against eager: the same kernels; a different cuDNN choice may change the last bits


def _report(results: dict[str, Any], name: str, value: Any) -> None:
    results[name] = value
    print(json.dumps({name: value}), flush=True)


def warm_start(settings: Any) -> tuple[Any, dict[str, float]]:
    """Load the engine and warm it up, timing both."""
    import torch

    from workers.engines.turbo import TurboEngine

    started = time.perf_counter()
    engine = TurboEngine(settings)
    loaded = time.perf_counter() - started
    started = time.perf_counter()
    engine.warm_up()
    if engine.device == "cuda":
        torch.cuda.synchronize()
    return engine, {
        "load_s": round(loaded, 2),
        "warm_up_s": round(time.perf_counter() - started, 2),
        "t3_graphs": len(engine.t3.graphs),
        "flow_graphs": len(engine.flow.graphs),
        "vocoder_graphs": len(engine.vocoder.graphs),
    }


def replay_against_eager(engine: Any) -> dict[str, float]:
    """Largest |replay - eager| per bucket, on random inputs in the bucket's own buffers."""
    import torch

    gen = torch.Generator(device=engine.device).manual_seed(0)
    diffs: dict[str, float] = {}
    flow, vocoder = engine.flow, engine.vocoder
    with torch.inference_mode():
        for bucket, graph in sorted(flow.graphs.items()):
            bufs = flow.statics(bucket)
            bufs.tokens.copy_(torch.randint(0, 6561, bufs.tokens.shape, generator=gen, device=engine.device))
            for buf in (bufs.noise, bufs.spks, bufs.cond):
                buf.copy_(torch.randn(buf.shape, generator=gen, device=engine.device))
            flow._length.fill_(bucket - 7)
            graph.replay()
            replayed = flow._outputs[bucket].clone()
            eager = flow.run_bucket(bufs, bucket)
            diffs[f"flow {bucket}"] = float((replayed - eager).abs().max())
        for bucket, graph in sorted(vocoder.graphs.items()):
            for buf in (vocoder._mel_bufs[bucket], vocoder._stft_bufs[bucket]):
                buf.copy_(torch.randn(buf.shape, generator=gen, device=engine.device))
            vocoder._length.fill_(bucket - 3)
            graph.replay()
            replayed = [t.clone() for t in vocoder._outputs[bucket]]
            eager = vocoder.run_bucket(bucket)
            diffs[f"vocoder {bucket}"] = max(float((a - b).abs().max()) for a, b in zip(replayed, eager, strict=True))
    return diffs


def streams(engine: Any) -> dict[str, Any]:
    """Two streams alone, then interleaved chunk by chunk: the largest difference in their audio."""
    import numpy as np

    from workers.engines.base import VoiceSpec

    def open_stream(index: int) -> Any:
        return engine.synthesize(TEXTS[index], VoiceSpec("builtin"), {}, lambda: False, seed=100 + index)

    alone = [[c.pcm for c in open_stream(i)] for i in range(2)]
    switches = engine.t3.switches
    gens = [open_stream(0), open_stream(1)]
    together: list[list[Any]] = [[], []]
    live = {0, 1}
    while live:
        for i in (0, 1):
            if i in live:
                chunk = next(gens[i], None)
                if chunk is None:
                    live.discard(i)
                else:
                    together[i].append(chunk.pcm)
    same_shape = all(
        len(a) == len(t) and all(x.shape == y.shape for x, y in zip(a, t, strict=True))
        for a, t in zip(alone, together, strict=True)
    )
    diff = (
        max(float(np.abs(x - y).max(initial=0.0)) for a, t in zip(alone, together, strict=True)
            for x, y in zip(a, t, strict=True))
        if same_shape
        else None
    )  # fmt: skip
    return {
        "chunks": [len(a) for a in alone],
        "same_chunks": same_shape,
        "max_abs_diff": diff,
        "switches": engine.t3.switches - switches,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or ROOT / ".bench/gpu-graphs-check"))
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")

    import torch

    from workers.engines.turbo_ckpt import write_random_checkpoint
    from zsynth.core.config import Settings

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run with --device cpu to check the script itself", file=sys.stderr)
        return 2
    results: dict[str, Any] = {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu"}
    work = Path(tempfile.mkdtemp(prefix="gpu-graphs-check-"))
    started = time.perf_counter()
    ckpt = write_random_checkpoint(work / "ckpt", "tiny")
    _report(results, "checkpoint_s", round(time.perf_counter() - started, 1))
    settings = Settings(engine="turbo", data_dir=work / "data").with_(
        turbo_checkpoint=ckpt, turbo_device=args.device, turbo_max_tokens=120
    )
    engine, first = warm_start(settings)
    _report(results, "first_start", first)
    del engine
    if args.device == "cuda":
        torch.cuda.empty_cache()
    engine, second = warm_start(settings)
    _report(results, "second_start", second)
    _report(results, "replay_vs_eager_max_abs", replay_against_eager(engine))
    _report(results, "streams", streams(engine))

    failures = []
    if args.device == "cuda":
        failures += [f"{name}: {d:.2e}" for name, d in results["replay_vs_eager_max_abs"].items() if not d <= TOLERANCE]
        if not first["flow_graphs"] or not first["vocoder_graphs"]:
            failures.append("S3Gen graphs were not captured (see the warnings above)")
        failures += [f"{name} warm-up {s['warm_up_s']} s > 30 s" for name, s in (("first", first), ("second", second))
                     if s["warm_up_s"] > 30]  # fmt: skip
    stream = results["streams"]
    if not stream["same_chunks"] or stream["max_abs_diff"] is None or stream["max_abs_diff"] > TOLERANCE:
        failures.append(f"interleaved streams differ from alone: {stream}")
    _report(results, "failures", failures)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu-graphs-check.json").write_text(json.dumps(results, indent=2) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
