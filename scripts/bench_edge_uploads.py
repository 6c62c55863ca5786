#!/usr/bin/env python3
"""Two upload probes of the front's edge, on loopback: multipart floods and self-inflating lexicons.

Starts a redis-server and one front (open, on a free loopback port; no worker is needed), then:

* sends a multipart body of 100,000 empty parts (about 0.9 MB) to each multipart route of the front
  (``/v1/voices/add``, ``/v1/voices/{id}/edit``, ``/v1/pronunciation-dictionaries/add-from-file``) while a
  second connection polls ``GET /healthz`` every 5 ms; reports the status each flood got and the worst
  ``/healthz`` answer time (the front's event-loop stall);
* uploads a self-inflating PLS lexicon (under 1 MB, a DTD whose nested entities expand to an 80 MB grapheme) five
  times and reports the front's resident memory before and after (after a 2 s settle).

Bounded: three floods and five uploads, 120 s timeout each. Usage::

    .venv/bin/python scripts/bench_edge_uploads.py
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers import front_process, redis_server  # noqa: E402

TIMEOUT = aiohttp.ClientTimeout(total=120)
PARTS = 100_000
UPLOADS = 5
PLS_NS = "http://www.w3.org/2005/01/pronunciation-lexicon"


def empty_parts(count: int, boundary: str = "x") -> bytes:
    """A multipart body of ``count`` parts with no headers and no data (9 bytes each)."""
    return f"--{boundary}\r\n\r\n\r\n".encode() * count + f"--{boundary}--\r\n".encode()


def inflating_pls(pad: int = 900_000) -> bytes:
    """A PLS lexicon under 1 MB whose DTD expands one grapheme to 80 MB (amplification kept under expat's 100x)."""
    entities = ['<!ENTITY a0 "' + "x" * 1000 + '">']
    entities += [f'<!ENTITY a{i} "' + f"&a{i - 1};" * 10 + '">' for i in range(1, 5)]
    entities.append('<!ENTITY a5 "' + "&a4;" * 8 + '">')
    return (
        '<?xml version="1.0"?><!DOCTYPE lexicon [' + "".join(entities) + "]>"
        f'<lexicon xmlns="{PLS_NS}" alphabet="ipa"><!-- {"p" * pad} -->'
        "<lexeme><grapheme>&a5;</grapheme><alias>x</alias></lexeme></lexicon>"
    ).encode()


def rss_mb(pid: int) -> float:
    """A process's resident memory (VmRSS), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def poll_health(base: str, stop: asyncio.Event) -> float:
    """The worst /healthz answer time (seconds) until ``stop`` is set."""
    worst = 0.0
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        while not stop.is_set():
            start = time.perf_counter()
            async with session.get(base + "/healthz") as resp:
                await resp.read()
            worst = max(worst, time.perf_counter() - start)
            await asyncio.sleep(0.005)
    return worst


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
            form = aiohttp.FormData()
            form.add_field("name", f"inflating {n}")
            form.add_field("file", body, filename="l.pls", content_type="application/pls+xml")
            async with session.post(base + "/v1/pronunciation-dictionaries/add-from-file", data=form) as resp:
                await resp.read()
                statuses.append(resp.status)
    await asyncio.sleep(2)
    return before, rss_mb(pid), statuses


async def run(base: str, pid: int) -> None:
    print(f"{'probe':<72} result")
    for path in ("/v1/voices/add", "/v1/voices/custom-none/edit", "/v1/pronunciation-dictionaries/add-from-file"):
        status, took, worst = await flood(base, path)
        label = f"worst /healthz stall during {PARTS:,} empty multipart parts ({path})"
        print(f"{label:<72} {worst * 1e3:8.1f} ms  (HTTP {status} after {took:.2f} s)")
    before, after, statuses = await inflate(base, pid)
    label = f"front memory kept after {UPLOADS} self-inflating lexicon uploads"
    print(f"{label:<72} {after - before:+8.1f} MB  ({before:.0f} -> {after:.0f} MB; HTTP {statuses})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    with redis_server() as redis_url, tempfile.TemporaryDirectory() as tmp:
        with front_process(redis_url, Path(tmp), ZSYNTH_LOG_LEVEL="WARNING") as (proc, base):
            asyncio.run(run(base, proc.pid))


if __name__ == "__main__":
    main()
