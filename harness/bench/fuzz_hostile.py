#!/usr/bin/env python3
"""The release-length run of the hostile-text fuzz suite: many examples through a real stack, counted, not asserted.

Starts a redis-server, ``--workers`` Piper workers and one open front on loopback, then sends ``--examples``
Hypothesis examples (the strategies of ``harness/hostile_text.py``: long words, digit and punctuation runs, every
Unicode category, combining marks, RTL, emoji, control characters, tag-like text and break tags) from one client
thread per worker. Each answer's status is counted, at most ``--read-s`` seconds of audio are read before the
client hangs up (so the cost of an example is bounded and cancellation is exercised), and ``/healthz`` is polled
all along. It reports worker deaths (a worker process that exited), 5xx answers, the worst ``/healthz`` stall, the
workers' RSS growth and the time per example. Bounded by ``--examples`` and ``--budget-s``; loopback only.

    .venv/bin/python -m harness.bench fuzz-hostile --examples 10000 --max-chars 300 --read-s 0.5
"""

from __future__ import annotations

import argparse
import collections
import statistics
import threading
import time
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, seed, settings

from harness.hostile_text import HealthProbe, HostileRequest, HostileRun, hostile_requests
from harness.measure import rss_bytes
from harness.stack import local_stack

ROOT = Path(__file__).resolve().parents[2]


class Tally:
    """Outcomes of every example, shared by the client threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.statuses: collections.Counter[str] = collections.Counter()
        self.server_errors: list[str] = []
        self.seconds_per_char: list[float] = []
        self.seconds: list[float] = []
        self.count = 0

    def add(self, request: HostileRequest, status: int, seconds: float, code: str | None) -> None:
        """Count one example."""
        with self.lock:
            self.count += 1
            self.statuses[f"{status // 100}xx" if status < 400 else f"{status} {code}"] += 1
            self.seconds.append(seconds)
            self.seconds_per_char.append(seconds / max(1, len(request.text)))
            if status >= 500:
                self.server_errors.append(f"{status} {code} {request.describe()}")


def client_loop(
    base_url: str, tally: Tally, examples: int, max_chars: int, read_s: float, deadline: float, n: int
) -> None:
    """One client thread: ``examples`` Hypothesis examples, sent one after the other."""
    run = HostileRun(base_url)
    run.READ_S = read_s

    @seed(1000 + n)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=(Phase.generate,),
        suppress_health_check=list(HealthCheck),
    )
    @given(request=hostile_requests(max_chars))
    def one(request: HostileRequest) -> None:
        if time.monotonic() > deadline:
            return
        try:
            outcome = run.send(request)
        except Exception as err:  # a hung or reset connection is an outcome too
            tally.add(request, 599, 0.0, type(err).__name__)
            return
        tally.add(request, outcome.status, outcome.seconds, outcome.code)

    try:
        one()
    finally:
        run.close()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--examples", type=int, default=1000, help="examples in all (default 1000)")
    parser.add_argument("--workers", type=int, default=2, help="Piper workers, one client thread each (default 2)")
    parser.add_argument("--max-chars", type=int, default=300, help="longest generated text (default 300)")
    parser.add_argument("--read-s", type=float, default=0.5, help="audio read per example before hanging up")
    parser.add_argument("--budget-s", type=float, default=3600.0, help="stop sending after this long (default 1 h)")


def bench(args: argparse.Namespace) -> None:

    with local_stack(workers=args.workers, name="fuzz") as stack:
        workers, base_url = stack.workers, stack.base
        warm = HostileRun(base_url)
        for _ in workers:
            warm.speak_check()
        warm.close()
        baselines = {w.worker_id: rss_bytes(w.proc.pid) for w in workers}
        peaks = dict(baselines)
        tally = Tally()
        started = time.monotonic()
        deadline = started + args.budget_s
        per_thread = max(1, args.examples // args.workers)
        with HealthProbe(base_url) as health:
            threads = [
                threading.Thread(
                    target=client_loop,
                    args=(base_url, tally, per_thread, args.max_chars, args.read_s, deadline, i),
                )
                for i in range(args.workers)
            ]
            for thread in threads:
                thread.start()
            while any(t.is_alive() for t in threads):
                time.sleep(1.0)
                for worker in workers:
                    peaks[worker.worker_id] = max(peaks[worker.worker_id], rss_bytes(worker.proc.pid))
            worst_stall = health.take_worst()
            health_failures = health.failures
        elapsed = time.monotonic() - started
        deaths = [w.worker_id for w in workers if w.proc.poll() is not None]

    print(
        f"hostile-text fuzz: {tally.count} examples in {elapsed:.0f} s ({args.workers} Piper workers, "
        f"texts up to {args.max_chars} chars, {args.read_s} s of audio read each)"
    )
    print(f"  worker deaths:                 {len(deaths)} {deaths if deaths else ''}")
    print(f"  5xx answers:                   {len(tally.server_errors)}")
    for line in tally.server_errors[:10]:
        print(f"    {line}")
    print(f"  worst /healthz stall:          {worst_stall * 1e3:.0f} ms ({health_failures} failed polls)")
    for worker_id, base in baselines.items():
        print(
            f"  worker {worker_id} RSS:          {base / 2**20:.0f} MB -> peak {peaks[worker_id] / 2**20:.0f} MB "
            f"(+{(peaks[worker_id] - base) / 2**20:.0f} MB)"
        )
    if tally.seconds:
        print(
            f"  time per example:              p50 {statistics.median(tally.seconds):.2f} s, "
            f"max {max(tally.seconds):.2f} s; per character max {max(tally.seconds_per_char) * 1e3:.1f} ms"
        )
    print("  answers:")
    for status, count in sorted(tally.statuses.items()):
        print(f"    {status:<40} {count}")
