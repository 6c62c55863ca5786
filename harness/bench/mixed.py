#!/usr/bin/env python3
"""Mixed load on real Piper workers: do realtime agents and short requests stay fast while long batch jobs run?

Runs on one redis-server and one front, once per ``--pieces`` value (ZSYNTH_PIECE_MAX_CHARS; 100 is the default
setting) and once without yielding (pieces so large that no job is ever split). Each run starts ``--workers``
Piper workers, then:

1. **idle**: ``--idle`` realtime flushes one after another (stream-input, a new socket per turn), nothing else;
2. **loaded**, for ``--seconds``: ``--long`` clients each stream long batch texts back to back (so every worker has
   long work), ``--agents`` realtime agents that flush one line every ``--every`` seconds, and one client sending
   a short paragraph every ``--short-every`` seconds.

It prints, for each run side by side: realtime flush to first audio p50/p95 idle and loaded, batch throughput in
audio-seconds per wall-second (long streams; all batch; all audio, realtime included: the work the workers did),
and the short requests' first byte p50/p95.

Everything runs on loopback and stops by itself; a run takes about ``--seconds`` plus half a minute. Example::

    .venv/bin/python -m harness.bench mixed --workers 2 --seconds 40
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from harness.fronts import front_process
from harness.measure import pct
from harness.stores import RedisServer
from harness.workers import WorkerProcess

ROOT = Path(__file__).resolve().parents[2]

FORMAT = "pcm_22050"  # Piper's own rate: no resampling cost in the workers, and bytes convert to seconds exactly
BYTES_PER_S = 22050 * 2
LONG = " ".join(
    f"Chapter passage {n} goes on at length, the way an audiobook reads one calm sentence after another."
    for n in range(24)
)
SHORT = "Thanks for waiting. Here is the short answer you asked for, in two sentences."
LINE = "Sure, I can help you with that order today, just one moment please."
NO_YIELD = 1_000_000  # a piece larger than any request: jobs are never split


@dataclass
class Run:
    """What the clients of one run saw."""

    idle_rt: list[float] = field(default_factory=list)
    loaded_rt: list[float] = field(default_factory=list)
    short_first: list[float] = field(default_factory=list)
    long_bytes: int = 0
    short_bytes: int = 0
    realtime_bytes: int = 0
    wall: float = 0.0
    errors: list[str] = field(default_factory=list)


@contextlib.contextmanager
def pool(redis_url: str, data_dir: str, workers: int, piece: int) -> Iterator[None]:
    """Start ``workers`` Piper workers with this piece size; stop them on the way out."""
    procs = [
        WorkerProcess(
            redis_url,
            f"mixed-{piece}-{n}",
            Path(data_dir),
            ZSYNTH_PIECE_MAX_CHARS=str(piece),
            ZSYNTH_LOG_LEVEL="WARNING",
        )
        for n in range(workers)
    ]
    try:
        for proc in procs:
            proc.wait_ready(120)
        yield
    finally:
        for proc in procs:
            proc.stop()


async def flush_first_audio(session: aiohttp.ClientSession, base: str, run: Run | None = None) -> float:
    """Seconds from a stream-input flush to its first audio frame; the socket then ends cleanly."""
    url = base.replace("http", "ws", 1) + f"/v1/text-to-speech/v/stream-input?output_format={FORMAT}"
    async with session.ws_connect(url) as ws:
        await ws.send_json({"text": " "})
        started = time.monotonic()
        await ws.send_json({"text": LINE + " ", "flush": True})
        first: float | None = None
        while (msg := await ws.receive(timeout=60)).type is aiohttp.WSMsgType.TEXT:
            frame = json.loads(msg.data)
            if "error" in frame:
                raise RuntimeError(f"realtime error: {frame}")
            if frame.get("audio") and run is not None:
                run.realtime_bytes += len(base64.b64decode(frame["audio"]))
            if frame.get("audio") and first is None:
                first = time.monotonic() - started
                await ws.send_json({"text": ""})
            if frame.get("isFinal"):
                break
    if first is None:
        raise RuntimeError("realtime: no audio")
    return first


async def stream(session: aiohttp.ClientSession, base: str, text: str, until: float) -> tuple[float, int]:
    """Stream a batch request; return (seconds to first byte, audio bytes received before ``until``)."""
    started = time.monotonic()
    first = float("nan")
    received = 0
    async with session.post(f"{base}/v1/text-to-speech/v/stream?output_format={FORMAT}", json={"text": text}) as resp:
        if resp.status != 200:
            raise RuntimeError(f"batch HTTP {resp.status}: {await resp.text()}")
        async for data in resp.content.iter_any():
            if received == 0:
                first = time.monotonic() - started
            if time.monotonic() > until:
                break
            received += len(data)
    return first, received


async def loaded_phase(base: str, args: argparse.Namespace, run: Run) -> None:
    """Long streams, realtime agents and short requests together for ``args.seconds``."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as session:
        started = time.monotonic()
        until = started + args.seconds

        async def long_client() -> None:
            while time.monotonic() < until:
                try:
                    _, received = await stream(session, base, LONG, until)
                    run.long_bytes += received
                except (RuntimeError, aiohttp.ClientError) as err:
                    run.errors.append(f"long: {err}")
                    await asyncio.sleep(1.0)

        async def agent(offset: float) -> None:
            await asyncio.sleep(2.0 + offset)  # the long streams hold every worker by then
            while time.monotonic() + 3.0 < until:
                turn = time.monotonic()
                try:
                    run.loaded_rt.append(await flush_first_audio(session, base, run))
                except (RuntimeError, aiohttp.ClientError, TimeoutError) as err:
                    run.errors.append(f"realtime: {err}")
                await asyncio.sleep(max(0.0, args.every - (time.monotonic() - turn)))

        async def short_client() -> None:
            await asyncio.sleep(2.5)
            while time.monotonic() + 3.0 < until:
                turn = time.monotonic()
                try:
                    first, received = await stream(session, base, SHORT, until + 60)
                    run.short_first.append(first)
                    run.short_bytes += received
                except (RuntimeError, aiohttp.ClientError) as err:
                    run.errors.append(f"short: {err}")
                await asyncio.sleep(max(0.0, args.short_every - (time.monotonic() - turn)))

        tasks = [long_client() for _ in range(args.long)]
        tasks += [agent(n * args.every / max(1, args.agents)) for n in range(args.agents)]
        tasks.append(short_client())
        await asyncio.gather(*tasks)
        run.wall = time.monotonic() - started


async def measure(base: str, args: argparse.Namespace) -> Run:
    """The idle figures, then the loaded phase."""
    run = Run()
    async with aiohttp.ClientSession() as session:
        await flush_first_audio(session, base)  # warm the path
        for _ in range(args.idle):
            run.idle_rt.append(await flush_first_audio(session, base))
    await loaded_phase(base, args, run)
    return run


def ms(values: list[float], q: float) -> str:
    return f"{pct(values, q) * 1000:.0f}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=40.0, help="length of each loaded phase")
    parser.add_argument("--pieces", default="100", help="ZSYNTH_PIECE_MAX_CHARS of each yielding run, comma-separated")
    parser.add_argument("--long", type=int, default=0, help="long-stream clients (default: one per worker)")
    parser.add_argument("--agents", type=int, default=2)
    parser.add_argument("--every", type=float, default=3.0, help="seconds between an agent's flushes")
    parser.add_argument("--short-every", type=float, default=2.0, help="seconds between short requests")
    parser.add_argument("--idle", type=int, default=10, help="idle realtime flushes")


def bench(args: argparse.Namespace) -> None:
    """Run with and without yielding and print the figures side by side."""
    args.long = args.long or args.workers
    print(
        f"mixed load: {args.workers} Piper workers, {args.long} long streams ({len(LONG)} chars each), "
        f"{args.agents} agents flushing every {args.every:g} s, a short request every {args.short_every:g} s, "
        f"{args.seconds:g} s loaded per run, {os.cpu_count()} CPUs",
        flush=True,
    )
    runs: dict[str, Run] = {}
    server = RedisServer().start()
    try:
        with tempfile.TemporaryDirectory() as data_dir:
            env = {"ZSYNTH_LOG_LEVEL": "WARNING", "ZSYNTH_FIRST_CHUNK_TIMEOUT": "60", "ZSYNTH_CHUNK_TIMEOUT": "60"}
            with front_process(server.url, Path(data_dir), **env) as (_, base):
                plans = [(f"yield {piece} chars", int(piece)) for piece in args.pieces.split(",")]
                for name, piece in [*plans, ("no yield", NO_YIELD)]:
                    with pool(server.url, data_dir, args.workers, piece):
                        runs[name] = asyncio.run(measure(base, args))
                    print(f"  {name}: done", flush=True)
    finally:
        server.stop()

    rows: list[tuple[str, Callable[[Run], str]]] = [
        ("realtime idle p50/p95 ms", lambda r: f"{ms(r.idle_rt, 50)}/{ms(r.idle_rt, 95)}"),
        ("realtime loaded p50/p95 ms", lambda r: f"{ms(r.loaded_rt, 50)}/{ms(r.loaded_rt, 95)}"),
        ("realtime turns loaded", lambda r: str(len(r.loaded_rt))),
        ("long batch audio-s per s", lambda r: f"{r.long_bytes / BYTES_PER_S / r.wall:.2f}"),
        ("all batch audio-s per s", lambda r: f"{(r.long_bytes + r.short_bytes) / BYTES_PER_S / r.wall:.2f}"),
        (
            "all audio-s per s",
            lambda r: f"{(r.long_bytes + r.short_bytes + r.realtime_bytes) / BYTES_PER_S / r.wall:.2f}",
        ),
        ("short first byte p50/p95 ms", lambda r: f"{ms(r.short_first, 50)}/{ms(r.short_first, 95)}"),
        ("short requests", lambda r: str(len(r.short_first))),
        ("errors", lambda r: str(len(r.errors))),
    ]
    names = list(runs)
    print(f"{'':30}" + "".join(f"{name:>22}" for name in names))
    for label, cell in rows:
        print(f"{label:30}" + "".join(f"{cell(runs[name]):>22}" for name in names))
    for name in names:
        for error in runs[name].errors[:5]:
            print(f"  {name}: {error}")
