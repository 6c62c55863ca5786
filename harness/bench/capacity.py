#!/usr/bin/env python3
"""Capacity: how many (simulated) GPU workers one front process and one Redis keep busy.

For each worker count K it starts redis-server, one front and K workers running the simulated engine (load tests
only: each chunk holds the slot for ``--hold`` seconds and carries ``--audio`` seconds of PCM), drives 1.25K concurrent
clients with short segments through the load generator for ``--seconds``, and reports:

* busy %: the share of the K slots spent inside jobs during the steady middle of the run (from the job records);
* time to first audio p50/p95/p99 at the client;
* CPU of the front per audio-second delivered, per job and per chunk, and of Redis per job, and their RSS;
* the share of a core used by the front, Redis, all K workers together and the load generator itself, because on a
  small box they all share the same cores and a full box, not the front, may be what keeps workers waiting.

``--mode`` is the load generator's: ``http`` (streamed requests), ``ws`` (voice agents, one multi-stream-input
socket per client and a context per turn) or ``ws-connect`` (a new stream-input socket per turn).

Everything runs on loopback and stops by itself. Example::

    .venv/bin/python -m harness.bench capacity --workers 8,32,64 --seconds 20 --mode ws --hold 0.1 --audio 1.0
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import redis

from harness import load as loadgen
from harness.base import free_port, wait_for
from harness.measure import pct, proc_stats
from harness.stores import RedisServer
from zsynth.core import protocol

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def stack(workers: int, hold: float, audio: float, data_dir: str) -> Iterator[tuple[str, dict[str, list[int]], str]]:
    """Redis, one front and `workers` simulated workers; yield (base URL, pids of front/redis/workers, redis URL)."""
    server = RedisServer().start()
    port = free_port()
    env = dict(
        os.environ,
        ZSYNTH_REDIS_URL=server.url,
        ZSYNTH_PORT=str(port),
        ZSYNTH_DATA_DIR=data_dir,
        ZSYNTH_LOG_LEVEL="WARNING",
        ZSYNTH_ENGINE="simulated",
        ZSYNTH_LOAD_TEST_ONLY="1",
        ZSYNTH_SIM_CHUNK_HOLD=str(hold),
        ZSYNTH_SIM_CHUNK_AUDIO=str(audio),
        ZSYNTH_MAX_QUEUE="100000",
    )
    procs: list[subprocess.Popen[bytes]] = []
    try:
        front = subprocess.Popen([sys.executable, "-m", "zsynth", "serve"], env=env, cwd=ROOT)
        procs.append(front)
        for index in range(workers):
            worker_env = dict(env, ZSYNTH_WORKER_ID=f"sim-{index}")
            procs.append(subprocess.Popen([sys.executable, "-m", "zsynth", "worker"], env=worker_env, cwd=ROOT))
        client = redis.Redis.from_url(server.url)
        wait_for(lambda: len(client.keys(protocol.heartbeat_key("sim-*"))) == workers, 300, f"{workers} workers")
        client.close()
        wait_for(lambda: _answers(port), 30, "front")
        assert server.proc is not None
        pids = {"front": [front.pid], "redis": [server.proc.pid], "workers": [proc.pid for proc in procs[1:]]}
        yield f"http://127.0.0.1:{port}", pids, server.url
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
        server.stop()


def _answers(port: int) -> bool:
    import urllib.request

    with contextlib.suppress(OSError), urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=0.5):
        return True
    return False


def cpu_seconds(pids: list[int]) -> float:
    """CPU seconds used so far by these processes together."""
    return sum(proc_stats(pid)[0] for pid in pids)


def busy_share(redis_url: str, workers: int, start: float, end: float) -> float:
    """Share of worker-seconds inside jobs between start and end (unix times), from every job record."""
    client = redis.Redis.from_url(redis_url)
    busy = 0.0
    keys = list(client.scan_iter(protocol.job_key("*"), count=1000))
    with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.hmget(key, ["started_at", "finished_at"])
        for started, finished in pipe.execute():
            if started is None or finished is None:
                continue
            lo, hi = max(start, float(started)), min(end, float(finished))
            busy += max(0.0, hi - lo)
    client.close()
    return busy / (workers * (end - start))


def run_one(args: argparse.Namespace, workers: int) -> dict[str, object]:
    """Measure one worker count."""
    with (
        tempfile.TemporaryDirectory() as data_dir,
        stack(workers, args.hold, args.audio, data_dir) as (
            base,
            pids,
            redis_url,
        ),
    ):
        # Enough segments for the whole run; the time limit ends it.
        load_args = loadgen.parse_args(
            [
                "--base",
                base,
                "--mode",
                args.mode,
                "--clients",
                str(math.ceil(workers * args.oversubscribe)),
                "--requests",
                str(workers * 2 * 1000),
                "--duration",
                str(args.seconds),
                "--timeout",
                "30",
                "--format",
                "pcm_24000",
                "--text",
                args.text,
            ]
        )
        groups = {**pids, "client": [os.getpid()]}  # the load generator runs in this process
        cpu_before = {name: cpu_seconds(group) for name, group in groups.items()}
        started = time.time()
        results, wall = asyncio.run(loadgen.run_load(load_args))
        ended = time.time()
        cpu = {name: cpu_seconds(group) - cpu_before[name] for name, group in groups.items()}
        rss = {name: proc_stats(pids[name][0])[1] / 2**20 for name in ("front", "redis")}
        margin = min(3.0, args.seconds / 5)
        share = busy_share(redis_url, workers, started + margin, ended - margin)
        audio_s = results.audio_bytes / (24000 * 2)
        return {
            "workers": workers,
            "busy_pct": round(100 * share, 1),
            "jobs": results.done,
            "jobs_per_s": round(results.done / wall, 1),
            "audio_s_per_s": round(audio_s / wall, 1),
            "ttfa_ms": [round(pct(results.ttfa, q) * 1000, 1) for q in (50, 95, 99)],
            "errors": dict(results.errors),
            "front_cpu_pct": round(100 * cpu["front"] / wall, 1),
            "front_cpu_ms_per_audio_s": round(1000 * cpu["front"] / audio_s, 2) if audio_s else None,
            "front_cpu_ms_per_job": round(1000 * cpu["front"] / results.done, 2) if results.done else None,
            # Every chunk carries --audio seconds, so the chunk count follows from the audio delivered.
            "front_cpu_ms_per_chunk": round(1000 * cpu["front"] * args.audio / audio_s, 3) if audio_s else None,
            "redis_cpu_ms_per_job": round(1000 * cpu["redis"] / results.done, 3) if results.done else None,
            "workers_cpu_pct": round(100 * cpu["workers"] / wall, 1),
            "client_cpu_pct": round(100 * cpu["client"] / wall, 1),
            "redis_cpu_pct": round(100 * cpu["redis"] / wall, 1),
            "front_rss_mib": round(rss["front"], 1),
            "redis_rss_mib": round(rss["redis"], 1),
        }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--workers", default="8,16,32,64", help="comma-separated worker counts")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--hold", type=float, default=0.05, help="seconds each chunk holds the slot")
    parser.add_argument("--audio", type=float, default=0.5, help="seconds of audio per chunk")
    parser.add_argument("--mode", choices=("http", "ws", "ws-connect"), default="http")
    parser.add_argument("--oversubscribe", type=float, default=1.25, help="clients per worker (>1 keeps a queue)")
    parser.add_argument("--text", default=loadgen.DEFAULT_TEXT)


def bench(args: argparse.Namespace) -> None:
    """Sweep worker counts and print one row each."""
    print(
        f"capacity: simulated engine, {args.hold * 1000:.0f} ms per {args.audio:.2f} s chunk, mode {args.mode}, "
        f"{args.seconds:.0f} s per point, {os.cpu_count()} CPUs"
    )
    header = (
        f"{'workers':>7} {'busy%':>6} {'jobs/s':>7} {'audio/s':>8} {'ttfa p50/p95/p99 ms':>22} "
        f"{'front%':>7} {'front ms/audio-s':>16} {'front ms/job':>12} {'ms/chunk':>8} {'redis ms/job':>12} "
        f"{'redis%':>6} {'workers%':>8} {'client%':>7} errors"
    )
    print(header)
    for workers in (int(w) for w in args.workers.split(",")):
        row = run_one(args, workers)
        ttfa = "/".join(str(v) for v in row["ttfa_ms"])  # type: ignore[attr-defined]  # run_one's row: a list here
        print(
            f"{row['workers']:>7} {row['busy_pct']:>6} {row['jobs_per_s']:>7} {row['audio_s_per_s']:>8} {ttfa:>22} "
            f"{row['front_cpu_pct']:>7} {row['front_cpu_ms_per_audio_s']!s:>16} {row['front_cpu_ms_per_job']!s:>12} "
            f"{row['front_cpu_ms_per_chunk']!s:>8} "
            f"{row['redis_cpu_ms_per_job']!s:>12} {row['redis_cpu_pct']:>6} {row['workers_cpu_pct']:>8} "
            f"{row['client_cpu_pct']:>7} {row['errors'] or '-'}",
            flush=True,
        )
