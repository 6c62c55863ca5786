#!/usr/bin/env python3
"""The worker-safety figures (issue 26), in one run on loopback: what hostile text and clips cost a worker.

Runs, one after the other, each probe script (each starts and stops its own redis-server, workers, fronts and moto
on free loopback ports):

* ``bench_worker_memory.py``: worker RSS growth and time for a 2,000-character word sent straight to a Piper worker
  (the front's word cut bypassed), with the default ceiling and with a 500 MB one;
* ``bench_text_stage.py``: Piper's cost per word length (the figures behind the word bound), normalization time on
  hostile runs, and the front's event-loop stall for 10,000 digits with normalization on;
* ``bench_voice_safety.py``: worker RSS for a 0.28 MB FLAC bomb named in the bucket; CPU time before refusing ten
  59 s 8-channel clips (and the forged-delete row of issue 27);
* ``fuzz_hostile.py``: worker deaths, 5xx answers and the worst ``/healthz`` stall over ``--fuzz-examples``
  Hypothesis examples of hostile text (10,000 for a release: about an hour on two cores).

Bounded: each probe is bounded itself and killed after its time limit. Usage::

    .venv/bin/python -m harness.bench hostile [--fuzz-examples 2000]
"""

from __future__ import annotations

import argparse

from harness.probes import Probe, run_probes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--fuzz-examples", type=int, default=2000, help="examples of the fuzz run (default 2000)")


def bench(args: argparse.Namespace) -> int:
    probes = [
        Probe("worker-memory", "a 2,000-character word sent straight to a worker (default ceiling)"),
        Probe("worker-memory", "the same word with a 500 MB ceiling", ("--max-rss", "500MB")),
        Probe("text-stage", "the text stage: Piper per word length, normalization, the front's loop"),
        Probe("voice-safety", "bucket FLAC bomb, ten 59 s clips (and a forged delete)"),
        Probe(
            "fuzz-hostile",
            f"hostile-text fuzz run, {args.fuzz_examples} examples",
            ("--examples", str(args.fuzz_examples)),
            timeout_s=max(900.0, args.fuzz_examples * 3.0),
        ),
    ]
    return 1 if run_probes("zsynth worker-safety figures (issue 26)", probes) else 0
