#!/usr/bin/env python3
"""What one long word costs a Piper worker: its RSS growth and the time until the job ends.

Starts a redis-server and one real Piper worker, then queues jobs straight on Redis (so the front's text stage,
which cuts long words, is bypassed: this is what a worker does with a hostile text that reaches it unbounded). The
worker's RSS is sampled from ``/proc/<pid>/status`` every 20 ms while each job runs. Cases:

* ``word``: one run of ``--chars`` characters without white space ("1st2nd3rd4th" repeated), the issue's case;
* ``prose``: the same number of characters of ordinary sentences, for comparison;
* ``after``: a short sentence queued after both, which shows the worker still serves.

Bounded: one job per case, each given at most ``--timeout`` seconds. Usage::

    .venv/bin/python -m harness.bench worker-memory [--chars 2000] [--timeout 90] [--max-rss 2GiB]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from harness.measure import rss_bytes
from harness.stack import local_stack
from harness.workers import WorkerProcess
from zsynth.core import protocol

ROOT = Path(__file__).resolve().parents[2]

PROSE = "The quick brown fox jumps over the lazy dog, and the dog does not mind at all. "
SAMPLE_RATE = 22050


@dataclass
class Outcome:
    """What one job did to the worker and what its client got."""

    label: str
    chars: int
    idle_mb: float
    peak_mb: float
    first_s: float | None
    total_s: float
    audio_s: float
    ending: str


class Sampler:
    """Samples a process's RSS every 20 ms on a thread and keeps the largest value seen."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_bytes(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss_bytes(self.pid))

    def close(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def run_job(client: redis.Redis, worker: WorkerProcess, label: str, text: str, timeout: float) -> Outcome:
    """Queue one job on Redis, follow its events, and sample the worker's RSS until it ends (or the timeout)."""
    channel = protocol.reply_channel(f"bench-{label}")
    pubsub = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
    pubsub.subscribe(channel)
    pubsub.get_message(timeout=1.0)  # the subscription is confirmed before the job is pushed
    idle = rss_bytes(worker.proc.pid)
    sampler = Sampler(worker.proc.pid)
    job = protocol.Job(text, "bench", "pcm_22050", reply_to=channel)
    started = time.monotonic()
    client.lpush(protocol.QUEUE, job.to_json())
    first: float | None = None
    samples = 0
    ending = f"no answer in {timeout:.0f}s"
    while time.monotonic() - started < timeout:
        message = pubsub.get_message(timeout=0.5)
        if message is None:
            if worker.proc.poll() is not None:
                ending = f"worker exited ({worker.proc.returncode})"
                break
            continue
        event = protocol.Event.decode(message["data"])
        if event.kind == "chunk":
            first = first if first is not None else time.monotonic() - started
            samples += int(event.meta.get("samples", 0))
            continue
        ending = "done" if event.kind == "done" else f"error {event.meta.get('code')}"
        break
    total = time.monotonic() - started
    peak = sampler.close()
    pubsub.close()
    if ending.startswith("no answer"):
        client.publish(protocol.CANCEL_CHANNEL, job.job_id)  # let the worker go before the next case
    return Outcome(label, len(text), idle / 1e6, peak / 1e6, first, total, samples / SAMPLE_RATE, ending)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--chars", type=int, default=2000)
    parser.add_argument("--timeout", type=float, default=90.0)
    parser.add_argument("--max-rss", default="", help="ZSYNTH_WORKER_MAX_RSS for the worker (default: its own)")


def bench(args: argparse.Namespace) -> None:
    word = ("1st2nd3rd4th" * (args.chars // 12 + 1))[: args.chars]
    prose = (PROSE * (args.chars // len(PROSE) + 1))[: args.chars]
    env = {"ZSYNTH_WORKER_MAX_RSS": args.max_rss} if args.max_rss else {}
    with local_stack(fronts=0, worker_env=env, name="bench-memory") as stack:
        worker = stack.workers[0]
        client = redis.Redis.from_url(stack.redis_url)
        try:
            time.sleep(1.0)  # let the start-up settle before the idle figure is taken
            outcomes = [
                run_job(client, worker, "word", word, args.timeout),
                run_job(client, worker, "prose", prose, args.timeout),
                run_job(client, worker, "after", "A short sentence after them.", args.timeout),
            ]
            beat = client.get(protocol.heartbeat_key(worker.worker_id))
        finally:
            client.close()
    print(f"{'case':<6} {'chars':>6} {'idle MB':>8} {'peak MB':>8} {'growth MB':>9} {'first s':>7} {'total s':>7} "
          f"{'audio s':>7}  ending")  # fmt: skip
    for o in outcomes:
        first = f"{o.first_s:7.2f}" if o.first_s is not None else "      -"
        print(
            f"{o.label:<6} {o.chars:>6} {o.idle_mb:>8.0f} {o.peak_mb:>8.0f} {o.peak_mb - o.idle_mb:>+9.0f} {first} "
            f"{o.total_s:>7.2f} {o.audio_s:>7.1f}  {o.ending}"
        )
    print("worker heartbeat after the cases:", "alive" if beat else "gone", json.loads(beat) if beat else "")
