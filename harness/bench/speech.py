#!/usr/bin/env python3
"""Benchmark the speech path: engine first chunk vs end-to-end first byte, and throughput with 1 and 2 workers.

Starts its own redis-server, workers and front on loopback (free ports), so it needs nothing running. Bounded: a
fixed number of requests, each with a timeout. Usage::

    .venv/bin/python -m harness.bench speech [--requests 50] [--threads 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

import aiohttp
import redis

from harness.measure import pct
from harness.stack import local_stack
from zsynth.core import protocol

ROOT = Path(__file__).resolve().parents[2]

TEXT = "The first sentence is short. The second sentence is a little longer, so the job has more than one chunk."
SAT_TEXT = "Throughput is measured with texts of several sentences. Each one keeps a worker busy. That is the point."


def engine_first_chunk(requests: int, threads: int) -> tuple[list[float], float]:
    """In-process Piper: time to the first chunk of TEXT, and the real-time factor."""
    from workers.engines.base import VoiceSpec
    from workers.engines.piper import PiperEngine

    engine = PiperEngine(threads=threads)
    engine.warm_up()
    firsts: list[float] = []
    audio = 0.0
    busy = 0.0
    for _ in range(requests):
        start = time.perf_counter()
        first = None
        for chunk in engine.synthesize(TEXT, VoiceSpec("bench"), {}, lambda: False):
            if first is None:
                first = time.perf_counter() - start
            audio += len(chunk.pcm) / engine.sample_rate
        busy += time.perf_counter() - start
        assert first is not None
        firsts.append(first)
    return firsts, busy / audio


async def first_bytes(base: str, requests: int, job_ids: list[str] | None = None) -> list[float]:
    """Sequential stream requests: time from sending to the first audio byte (pcm at the engine's rate)."""
    results: list[float] = []
    async with aiohttp.ClientSession() as session:
        for _ in range(requests):
            start = time.perf_counter()
            async with session.post(
                f"{base}/v1/text-to-speech/bench/stream?output_format=pcm_22050",
                json={"text": TEXT},
                timeout=aiohttp.ClientTimeout(total=60),
            ) as resp:
                assert resp.status == 200, await resp.text()
                await resp.content.readany()
                results.append(time.perf_counter() - start)
                if job_ids is not None:
                    job_ids.append(resp.headers["history-item-id"])
                await resp.read()
    return results


def worker_first_chunk(redis_url: str, job_ids: list[str]) -> list[float]:
    """The same jobs seen inside the worker: from starting the job to publishing its first chunk."""
    client = redis.Redis.from_url(redis_url)
    spans = []
    for job_id in job_ids:
        started, first = client.hmget(protocol.job_key(job_id), ["started_at", protocol.STARTED_FIELD])
        spans.append(float(first) - float(started))  # type: ignore[arg-type]  # both set on every finished job
    client.close()
    return spans


async def saturate(base: str, requests: int, clients: int) -> tuple[float, float]:
    """`clients` concurrent loops share `requests`; return (audio seconds, wall seconds)."""
    remaining = requests
    audio = 0.0

    async def loop(session: aiohttp.ClientSession) -> None:
        nonlocal remaining, audio
        while remaining > 0:
            remaining -= 1
            async with session.post(
                f"{base}/v1/text-to-speech/bench?output_format=pcm_22050",
                json={"text": SAT_TEXT},
                timeout=aiohttp.ClientTimeout(total=120),
            ) as resp:
                assert resp.status == 200, await resp.text()
                audio += len(await resp.read()) / 2 / 22050

    async with aiohttp.ClientSession() as session:
        start = time.perf_counter()
        await asyncio.gather(*(loop(session) for _ in range(clients)))
        return audio, time.perf_counter() - start


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1, help="engine threads per worker (ZSYNTH_ENGINE_THREADS)")


def bench(args: argparse.Namespace) -> None:
    """Run the benchmark and print a small report."""
    os.environ["ZSYNTH_ENGINE_THREADS"] = str(args.threads)
    n = args.requests
    print(f"zsynth speech benchmark: Piper engine, {args.threads} engine thread(s) per worker, {os.cpu_count()} CPUs")

    firsts, rtf = engine_first_chunk(n, args.threads)
    print(
        f"engine in-process first chunk   p50 {pct(firsts, 50) * 1000:7.1f} ms   p95 {pct(firsts, 95) * 1000:7.1f} ms"
        f"   (RTF {rtf:.3f}, n={n})"
    )

    threads = {"ZSYNTH_ENGINE_THREADS": str(args.threads)}
    with local_stack(worker_env=threads, front_env={"ZSYNTH_LOG_LEVEL": "WARNING"}) as stack:
        redis_url, base = stack.redis_url, stack.base
        asyncio.run(first_bytes(base, 3))  # warm the front's connections
        job_ids: list[str] = []
        e2e = asyncio.run(first_bytes(base, n, job_ids))
        inside = worker_first_chunk(redis_url, job_ids)
        added = [outer - inner for outer, inner in zip(e2e, inside, strict=True)]
        print(
            f"end-to-end first byte (stream)  p50 {pct(e2e, 50) * 1000:7.1f} ms"
            f"   p95 {pct(e2e, 95) * 1000:7.1f} ms"
            f"   (front + Redis + worker, n={n})"
        )
        print(
            f"same jobs inside the worker     p50 {pct(inside, 50) * 1000:7.1f} ms"
            f"   p95 {pct(inside, 95) * 1000:7.1f} ms   (job start -> first chunk published)"
        )
        print(
            f"path overhead, per request      p50 {pct(added, 50) * 1000:+7.1f} ms"
            f"   p95 {pct(added, 95) * 1000:+7.1f} ms   (front + Redis + queue + HTTP, same jobs)"
        )
        audio1, wall1 = asyncio.run(saturate(base, n, clients=4))
        tput1 = audio1 / wall1
        print(f"throughput, 1 worker            {tput1:7.2f} audio-s per wall-s   ({n} requests, 4 clients)")
        stack.add_worker()
        audio2, wall2 = asyncio.run(saturate(base, n, clients=4))
        tput2 = audio2 / wall2
        print(f"throughput, 2 workers           {tput2:7.2f} audio-s per wall-s   ({n} requests, 4 clients)")
        print(f"scaling 2 vs 1 worker           {tput2 / tput1:7.2f}x")
