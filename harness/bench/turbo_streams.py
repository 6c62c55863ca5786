"""What switching T3 between streams costs: the state copies of ``StaticT3.activate``, and the memory per stream.

A worker that shares its slot chunk by chunk switches T3's static buffers from one stream to another before a chunk's
steps: the stream leaving has its sampler state and the cache positions it wrote since it last left copied out, the
stream arriving has its sampler state and its whole written prefix copied in (``workers/engines/turbo_static.py``).
This times those switches on T3 of the real size (GPT-2 medium backbone, random weights, no checkpoint needed) at
several prefix lengths, and prints the memory one stream's own copy takes (``StaticT3.stream_bytes``).

    python -m harness.bench turbo-streams [--device cpu|cuda] [--dtype float32|bfloat16] [--switches N]

On the CPU it is memcpy bandwidth (and not a GPU figure); on a GPU the copies are device-to-device.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="bfloat16")
    parser.add_argument("--max-tokens", type=int, default=1000, help="ZSYNTH_TURBO_MAX_TOKENS (cache length)")
    parser.add_argument("--switches", type=int, default=20, help="switches timed per prefix length")
    parser.add_argument("--chunk", type=int, default=128, help="positions a stream writes between two switches")


def bench(args: argparse.Namespace) -> int:

    import torch

    from workers.engines.turbo_ckpt import turbo_t3_config
    from workers.engines.turbo_compat import apply_workarounds
    from workers.engines.turbo_static import StaticT3, T3Stream

    apply_workarounds()
    from chatterbox.models.t3 import T3

    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    t3 = T3(turbo_t3_config()).to(args.device).eval()
    st = StaticT3(t3, args.max_tokens, dtype=dtype if dtype != torch.float32 else None, graphs=False)
    cfg = t3.tfmr.config

    def sync() -> None:
        if args.device == "cuda":
            torch.cuda.synchronize()

    print(
        f"T3 backbone: {cfg.n_layer} layers, {cfg.n_embd} wide; cache of {st.max_len} positions in {args.dtype} on "
        f"{args.device}; one stream's own copy: {st.stream_bytes / 2**20:.1f} MiB"
    )
    rows: list[dict[str, Any]] = []
    for prefix in (400, 800, 1200, st.max_len - args.chunk):
        a, b = T3Stream(), T3Stream()
        st.activate(a)
        a.filled = prefix + args.chunk
        st.activate(b)  # the first switch allocates a's copy: not timed
        times = []
        for _ in range(2 * args.switches):
            leave = st.resident
            arrive = a if leave is b else b
            assert leave is not None
            leave.filled, leave.saved = prefix + args.chunk, prefix  # a chunk's steps wrote past its prefix
            arrive.filled = arrive.saved = prefix  # its own copy holds its prefix
            sync()
            started = time.perf_counter()
            st.activate(arrive)
            sync()
            times.append(time.perf_counter() - started)
        copied = 2 * st.k.numel() // st.max_len * st.k.element_size() * (prefix + args.chunk)
        rows.append({"prefix": prefix, "ms": statistics.median(times) * 1000, "mib": copied / 2**20})
        print(f"prefix {prefix:5d} positions (+{args.chunk} written): switch p50 {rows[-1]['ms']:.2f} ms, "
              f"{rows[-1]['mib']:.0f} MiB copied")  # fmt: skip
    return 0
