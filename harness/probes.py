"""Runs several benchmarks one after the other, each in its own process, and prints their reports together.

Each probe starts its own redis-server, fronts and workers on loopback and stops them before the next one starts,
so one probe's load never colours another's figures. Used by ``python -m harness.bench edge`` and ``hostile``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Probe:
    """One probe (a benchmark's name), the issue rows it reports, and its arguments."""

    bench: str
    rows: str
    args: tuple[str, ...] = ()
    timeout_s: float = 900.0


def run_probes(title: str, probes: list[Probe]) -> int:
    """Run ``probes`` in order, printing each one's output under a heading; return how many failed."""
    failed = 0
    print(f"# {title}\n")
    for probe in probes:
        command = [sys.executable, "-m", "harness.bench", probe.bench, *probe.args]
        print(f"## {probe.rows}\n$ {' '.join(['python', *command[1:]])}", flush=True)
        started = time.monotonic()
        try:
            done = subprocess.run(
                command, cwd=ROOT, capture_output=True, text=True, timeout=probe.timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            print(f"(timed out after {probe.timeout_s:.0f} s)\n", flush=True)
            failed += 1
            continue
        print(done.stdout.rstrip())
        if done.returncode != 0:
            failed += 1
            print(f"(exit {done.returncode})\n{done.stderr[-2000:]}")
        print(f"({time.monotonic() - started:.0f} s)\n", flush=True)
    return failed
