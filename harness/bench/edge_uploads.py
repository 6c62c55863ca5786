#!/usr/bin/env python3
"""Two upload probes of the front's edge, on loopback: multipart floods and self-inflating lexicons.

Starts a redis-server and one front (open, on a free loopback port; no worker is needed), then:

* sends a multipart body of 100,000 empty parts (about 0.9 MB) to the cloning route and the lexicon route
  (``/v1/voices/add``, ``/v1/pronunciation-dictionaries/add-from-file``) while a second connection polls
  ``GET /healthz`` every 5 ms; reports the status each flood got and the worst ``/healthz`` answer time (the
  front's event-loop stall);
* uploads a self-inflating PLS lexicon (under 1 MB, a DTD whose nested entities expand to an 80 MB grapheme) five
  times and reports the front's resident memory before and after (after a 2 s settle).

Bounded: two floods and five uploads, 120 s timeout each. Usage::

    .venv/bin/python -m harness.bench edge-uploads
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import aiohttp

from harness.fronts import front_process
from harness.measure import poll_health, rss_mb
from harness.stores import redis_server
from harness.upload_bodies import empty_parts, inflating_pls, lexicon_form

ROOT = Path(__file__).resolve().parents[2]

TIMEOUT = aiohttp.ClientTimeout(total=120)
PARTS = 100_000
UPLOADS = 5


async def flood(base: str, path: str) -> tuple[int, float, float]:
    """POST 100,000 empty parts to ``path``: (status, seconds to the answer, worst /healthz stall meanwhile)."""
    body = empty_parts(PARTS)
    stop = asyncio.Event()
    poller = asyncio.create_task(poll_health(base, stop))
    await asyncio.sleep(0.1)
    start = time.perf_counter()
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        headers = {"Content-Type": "multipart/form-data; boundary=x"}
        try:
            async with session.post(base + path, data=body, headers=headers) as resp:
                await resp.read()
                status = resp.status
        except aiohttp.ClientError:
            status = 0  # the front closed the connection before reading all of it
    took = time.perf_counter() - start
    await asyncio.sleep(0.1)
    stop.set()
    return status, took, await poller


async def inflate(base: str, pid: int) -> tuple[float, float, list[int]]:
    """Upload the self-inflating lexicon five times: (RSS before, RSS after, statuses)."""
    body = inflating_pls()
    before = rss_mb(pid)
    statuses = []
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        for n in range(UPLOADS):
            form = lexicon_form(f"inflating {n}", body)
            async with session.post(base + "/v1/pronunciation-dictionaries/add-from-file", data=form) as resp:
                await resp.read()
                statuses.append(resp.status)
    await asyncio.sleep(2)
    return before, rss_mb(pid), statuses


async def idle(base: str) -> float:
    """The worst /healthz answer time over one second with no upload (the box's own noise)."""
    stop = asyncio.Event()
    poller = asyncio.create_task(poll_health(base, stop))
    await asyncio.sleep(1.0)
    stop.set()
    return await poller


async def run(base: str, pid: int) -> None:
    print(f"{'probe':<100} result")
    label = "worst /healthz answer over 1 s with no upload (the box's noise)"
    print(f"{label:<100} {await idle(base) * 1e3:8.1f} ms")
    for path in ("/v1/voices/add", "/v1/pronunciation-dictionaries/add-from-file"):
        status, took, worst = await flood(base, path)
        label = f"worst /healthz stall during {PARTS:,} empty multipart parts ({path})"
        print(f"{label:<100} {worst * 1e3:8.1f} ms  (HTTP {status} after {took:.2f} s)")
    before, after, statuses = await inflate(base, pid)
    label = f"front memory kept after {UPLOADS} self-inflating lexicon uploads"
    print(f"{label:<100} {after - before:+8.1f} MB  ({before:.0f} -> {after:.0f} MB; HTTP {statuses})")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""


def bench(args: argparse.Namespace) -> None:
    with redis_server() as redis_url, tempfile.TemporaryDirectory() as tmp:
        with front_process(redis_url, Path(tmp), ZSYNTH_LOG_LEVEL="WARNING") as (proc, base):
            asyncio.run(run(base, proc.pid))
