#!/usr/bin/env python3
"""What JSON bodies carrying unknown ``voice_settings`` fields cost Redis and the front's event loop, on loopback.

Starts a redis-server, one simulated worker (``ZSYNTH_ENGINE=simulated``: fixed chunk timing, real PCM) and one front
on free loopback ports, then for each case sends ``--requests`` (default 10) concurrent ``POST
/v1/text-to-speech/joe/stream`` requests whose ``voice_settings`` carry one unknown string field of the given size,
while ``GET /healthz`` is polled on its own connection. For each case it prints:

* the statuses the synthesis requests got;
* Redis growth: ``used_memory_peak`` after the case minus ``used_memory`` before it (the junk travelling inside the
  queued jobs shows up here);
* the worst ``/healthz`` answer time during the case (a body parsed on the event loop stalls every request).

Cases: 20 MB of junk (the issue's probe; refused with 413 once JSON routes have their own small limit) and 200 KiB
(under that limit: the field is dropped before the job is built). Bounded: two cases, ``--requests`` each, a 120 s
timeout per request. Usage::

    .venv/bin/python -m harness.bench edge-bodies [--requests 10]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
from pathlib import Path

import aiohttp
import redis

from harness.measure import poll_health
from harness.stack import local_stack

ROOT = Path(__file__).resolve().parents[2]

TIMEOUT = aiohttp.ClientTimeout(total=120)
CASES = (("20 MB", 20_000_000), ("200 KiB", 200 * 1024))


def body_of(junk_bytes: int) -> bytes:
    """A synthesis body whose voice_settings carry one unknown field of ``junk_bytes`` characters."""
    settings = {"stability": 0.5, "junk": "x" * junk_bytes}
    return json.dumps({"text": "Hello there.", "voice_settings": settings}).encode()


async def one_case(base: str, client: redis.Redis, junk_bytes: int, requests: int) -> tuple[str, float, float]:
    """(statuses, Redis growth in MB, worst /healthz seconds) for ``requests`` concurrent bodies."""
    body = body_of(junk_bytes)
    before = int(client.info("memory")["used_memory"])
    stop = asyncio.Event()
    health = asyncio.create_task(poll_health(base, stop, every_s=0.01))
    url = base + "/v1/text-to-speech/joe/stream?output_format=pcm_16000"
    headers = {"Content-Type": "application/json"}

    async def send(session: aiohttp.ClientSession) -> str:
        async with session.post(url, data=body, headers=headers) as resp:
            answer = await resp.read()
            if resp.status == 200:
                return "200"
            return f"{resp.status} {json.loads(answer)['detail']['code']}"

    try:
        async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
            statuses = await asyncio.gather(*(send(session) for _ in range(requests)))
    finally:
        stop.set()
    worst = await health
    peak = int(client.info("memory")["used_memory_peak"])
    counted = ", ".join(f"{n}x {status}" for status, n in sorted(collections.Counter(statuses).items()))
    return counted, (peak - before) / 1e6, worst


def stack_case(junk_bytes: int, requests: int) -> tuple[str, float, float]:
    """One case on a stack of its own: Redis keeps its memory peak for life (CONFIG RESETSTAT leaves it)."""
    engine_env = {"ZSYNTH_ENGINE": "simulated", "ZSYNTH_LOAD_TEST_ONLY": "true"}
    with local_stack(worker_env=engine_env, front_env={"ZSYNTH_LOG_LEVEL": "WARNING"}) as stack:
        client = redis.Redis.from_url(stack.redis_url)
        try:
            return asyncio.run(one_case(stack.base, client, junk_bytes, requests))
        finally:
            client.close()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--requests", type=int, default=10, help="concurrent requests per case (default 10)")


def bench(args: argparse.Namespace) -> None:
    rows = [(label, *stack_case(size, args.requests)) for label, size in CASES]
    print(f"{args.requests} concurrent POST /v1/text-to-speech/joe/stream, one unknown voice_settings field each")
    print(f"  {'junk field':<10} {'statuses':<36} {'Redis growth (peak)':>20} {'worst /healthz':>16}")
    for label, statuses, growth, worst in rows:
        print(f"  {label:<10} {statuses:<36} {growth:>17.1f} MB {worst * 1e3:>13.0f} ms")
