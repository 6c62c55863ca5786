#!/usr/bin/env python3
"""How many connections that never finish their request headers a front still holds after a while, on loopback.

Starts a redis-server and one front (``zsynth serve``, open, default connection settings unless overridden) on a
free loopback port. Opens ``--connections`` (default 5,000) TCP connections that each send the first line and one
header of a request, never the blank line that ends the headers, spread over enough loopback source addresses
(127.0.0.10, 127.0.0.11, ...) to stay under the per-address cap, so what is measured is the header deadline and not
the cap. While they wait, one ordinary ``GET /healthz`` from another loopback address must still be answered. After
``--hold`` seconds (default 60) it counts the connections the front has not closed.

Bounded: the connections are opened in batches, every read has a timeout, and the run takes about ``--hold`` plus a
few seconds. The open-file limit of this process (inherited by the front) is raised to its hard limit so that both
sides can hold the connections. Usage::

    .venv/bin/python -m harness.bench edge-connections [--connections 5000] [--hold 60] [--per-address 200]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import tempfile
import time
from pathlib import Path

import aiohttp

from harness.fronts import front_process
from harness.stores import redis_server

ROOT = Path(__file__).resolve().parents[2]

PARTIAL = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"  # no blank line: the headers never end
BATCH = 250


def raise_file_limit(needed: int) -> int:
    """Raise this process's soft open-file limit towards ``needed`` (up to the hard limit); the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, needed)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


async def open_partial(port: int, source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """One connection from ``source`` that sent unfinished headers; None when it could not be opened."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0)), timeout=10
        )
        writer.write(PARTIAL)
        await writer.drain()
    except (OSError, TimeoutError):
        return None
    return reader, writer


async def still_open(reader: asyncio.StreamReader) -> bool:
    """Whether the server has not closed this connection (no EOF, no reset within a short read)."""
    try:
        data = await asyncio.wait_for(reader.read(1), timeout=1.0)
    except TimeoutError:
        return True
    except OSError:
        return False
    return bool(data)


async def healthz(base: str) -> str:
    """The status of an ordinary request from another loopback address, or the error it met."""
    connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0), force_close=True)
    try:
        async with (
            aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=10)) as http,
            http.get(f"{base}/healthz") as resp,
        ):
            return f"HTTP {resp.status}"
    except (aiohttp.ClientError, TimeoutError) as err:
        return type(err).__name__


async def run(base: str, connections: int, hold: float, per_address: int) -> None:
    port = int(base.rsplit(":", 1)[1])
    sources = [f"127.0.0.{10 + n // per_address}" for n in range(connections)]
    opened: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    start = time.monotonic()
    for first in range(0, connections, BATCH):
        batch = await asyncio.gather(*(open_partial(port, src) for src in sources[first : first + BATCH]))
        opened.extend(pair for pair in batch if pair is not None)
    print(
        f"  opened {len(opened)}/{connections} connections with unfinished headers in {time.monotonic() - start:.1f} s"
    )
    during = await healthz(base)
    await asyncio.sleep(max(0.0, hold - (time.monotonic() - start)))
    held = sum(await asyncio.gather(*(still_open(reader) for reader, _ in opened)))
    after = await healthz(base)
    for _, writer in opened:
        writer.close()
    print()
    print(f"  {'probe':<62} value")
    print(f"  {f'connections with unfinished headers still held after {hold:g} s':<62} {held:,}/{connections:,}")
    print(f"  {'GET /healthz from another address while they wait':<62} {during}")
    print(f"  {'GET /healthz from another address afterwards':<62} {after}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--connections", type=int, default=5000, help="connections to open (default 5000)")
    parser.add_argument("--hold", type=float, default=60.0, help="seconds after the first connect to count (60)")
    parser.add_argument("--per-address", type=int, default=200, help="connections per loopback source address")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the front (repeatable)")


def bench(args: argparse.Namespace) -> None:
    if not 1 <= args.connections <= 20000 or not 1 <= args.hold <= 300 or args.per_address < 1:
        args.parser.error("--connections 1-20000, --hold 1-300 s, --per-address at least 1")
    limit = raise_file_limit(2 * args.connections + 256)
    print(f"open-file limit of this process and the front: {limit}")
    env = dict(item.split("=", 1) for item in args.env)
    with redis_server() as redis_url, tempfile.TemporaryDirectory() as tmp:
        with front_process(redis_url, Path(tmp), ZSYNTH_LOG_LEVEL="WARNING", **env) as (_, base):
            with contextlib.suppress(KeyboardInterrupt):
                asyncio.run(run(base, args.connections, args.hold, args.per_address))
