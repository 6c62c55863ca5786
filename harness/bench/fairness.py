#!/usr/bin/env python3
"""Fair shares: does another key's one-sentence request still answer while one key floods the realtime sockets?

Starts one redis-server, ``--workers`` Piper workers and one front with two full keys, all on loopback. Then:

1. **idle**: key B asks ``--probes`` times for one sentence (``POST /v1/text-to-speech/{voice}``, the whole answer
   read), one after another, and once per probe flushes the same sentence on a ``stream-input`` socket (first audio):
   what one sentence costs on this box with nothing else running;
2. **flood**, for ``--seconds``: key A holds ``--sockets`` ``multi-stream-input`` sockets with ``--contexts`` contexts
   each, every context flushing a long text and starting again as soon as it is final (a socket that is closed is
   opened again), as the issue's F4 did; after a few seconds of it, key B asks the same ``--probes`` times again.

It prints, idle and under the flood, key B's answer time p50 and max (HTTP, whole answer) and its realtime first
audio, the target (2 s plus the idle answer time), and what the flood got (segments spoken, errors by code).
Everything runs on loopback and stops by itself; ``--reduced`` is a shorter run (15 s of flood, 3 probes).

    .venv/bin/python -m harness.bench fairness --reduced
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from harness.fronts import front_process
from harness.stores import RedisServer
from harness.workers import WorkerProcess

ROOT = Path(__file__).resolve().parents[2]

FORMAT = "pcm_22050"
KEY_A, KEY_B = "bench-fairness-flooder", "bench-fairness-other"
SENTENCE = "Could you tell me when my order will arrive?"
LONG = " ".join(
    f"Part {n} of a long reading goes on and on, one calm sentence after another, to keep a context busy."
    for n in range(20)
)


@dataclass
class Figures:
    """What key B saw, and what the flood got."""

    http: list[float] = field(default_factory=list)
    realtime: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    flood_segments: int = 0
    flood_errors: collections.Counter[str] = field(default_factory=collections.Counter)
    flood_reconnects: int = 0


@contextlib.contextmanager
def pool(redis_url: str, data_dir: str, workers: int) -> Iterator[None]:
    """Start ``workers`` Piper workers; stop them on the way out."""
    procs = [WorkerProcess(redis_url, f"fair-{n}", Path(data_dir), ZSYNTH_LOG_LEVEL="WARNING") for n in range(workers)]
    try:
        for proc in procs:
            proc.wait_ready(120)
        yield
    finally:
        for proc in procs:
            proc.stop()


async def sentence(session: aiohttp.ClientSession, base: str) -> float:
    """Seconds for key B's one-sentence request, its whole answer read."""
    started = time.monotonic()
    async with session.post(
        f"{base}/v1/text-to-speech/v?output_format={FORMAT}", json={"text": SENTENCE}, headers={"xi-api-key": KEY_B}
    ) as resp:
        body = await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {body[:200]!r}")
        if len(body) < 22050:  # under half a second of audio: not the sentence
            raise RuntimeError(f"HTTP answer of {len(body)} bytes")
    return time.monotonic() - started


async def realtime_first_audio(session: aiohttp.ClientSession, base: str) -> float:
    """Seconds from key B's stream-input flush of the sentence to its first audio frame."""
    url = base.replace("http", "ws", 1) + f"/v1/text-to-speech/v/stream-input?output_format={FORMAT}"
    async with session.ws_connect(url, headers={"xi-api-key": KEY_B}) as ws:
        await ws.send_json({"text": " "})
        started = time.monotonic()
        await ws.send_json({"text": SENTENCE + " ", "flush": True})
        while (msg := await ws.receive(timeout=60)).type is aiohttp.WSMsgType.TEXT:
            frame = json.loads(msg.data)
            if "error" in frame:
                raise RuntimeError(f"realtime error: {frame.get('error')}")
            if frame.get("audio"):
                await ws.send_json({"text": ""})
                return time.monotonic() - started
    raise RuntimeError(f"realtime: socket closed ({ws.close_code}) before any audio")


async def probes(session: aiohttp.ClientSession, base: str, count: int, figures: Figures) -> None:
    """Key B's requests, one after another: a sentence over HTTP, then the same flushed on a socket."""
    for _ in range(count):
        for kind, probe, into in (
            ("http", sentence, figures.http),
            ("realtime", realtime_first_audio, figures.realtime),
        ):
            try:
                into.append(await probe(session, base))
            except (RuntimeError, aiohttp.ClientError, TimeoutError) as err:
                figures.errors.append(f"{kind}: {err}")
            await asyncio.sleep(0.5)


async def flood_socket(session: aiohttp.ClientSession, base: str, contexts: int, until: float, fig: Figures) -> None:
    """One of key A's sockets: ``contexts`` contexts, each speaking a long text again as soon as it is final."""
    url = base.replace("http", "ws", 1) + f"/v1/text-to-speech/v/multi-stream-input?output_format={FORMAT}"
    turn = 0
    while time.monotonic() < until:
        try:
            async with session.ws_connect(url, headers={"xi-api-key": KEY_A}, heartbeat=None) as ws:
                for _ in range(contexts):
                    turn += 1
                    await ws.send_json({"text": LONG + " ", "context_id": f"c{turn}", "flush": True})
                while time.monotonic() < until:
                    msg = await ws.receive(timeout=max(0.1, until - time.monotonic()))
                    if msg.type is not aiohttp.WSMsgType.TEXT:
                        break
                    frame = json.loads(msg.data)
                    if "error" in frame:
                        fig.flood_errors[str(frame["error"])] += 1
                    elif frame.get("isFinal"):
                        turn += 1
                        await ws.send_json({"context_id": frame.get("contextId"), "close_context": True})
                        await ws.send_json({"text": LONG + " ", "context_id": f"c{turn}", "flush": True})
                    elif frame.get("audio"):
                        fig.flood_segments += 1
        except TimeoutError:
            pass  # the flood's time is up
        except (aiohttp.ClientError, ConnectionError) as err:
            fig.flood_errors[type(err).__name__] += 1
        fig.flood_reconnects += 1
        await asyncio.sleep(0.2)


async def measure(base: str, args: argparse.Namespace) -> tuple[Figures, Figures]:
    """The idle probes, then the flood with the same probes inside it."""
    idle, flood = Figures(), Figures()
    timeout = aiohttp.ClientTimeout(total=None)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        await probes(session, base, args.probes, idle)
        until = time.monotonic() + args.seconds
        sockets = [
            asyncio.create_task(flood_socket(session, base, args.contexts, until, flood)) for _ in range(args.sockets)
        ]
        await asyncio.sleep(args.warmup)  # every context has queued its first segments by now
        await probes(session, base, args.probes, flood)
        await asyncio.gather(*sockets)
    return idle, flood


def ms(values: list[float], q: float) -> str:
    """A percentile of ``values`` in milliseconds (nearest rank), or "-"."""
    if not values:
        return "-"
    ranked = sorted(values)
    return f"{ranked[min(len(ranked) - 1, round(q / 100 * (len(ranked) - 1)))] * 1000:.0f}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sockets", type=int, default=13, help="key A's multi-stream-input sockets")
    parser.add_argument("--contexts", type=int, default=5, help="contexts on each of them")
    parser.add_argument("--seconds", type=float, default=45.0, help="length of the flood")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds of flood before key B's first probe")
    parser.add_argument("--probes", type=int, default=8, help="key B's requests in each phase")
    parser.add_argument("--reduced", action="store_true", help="a shorter run: 15 s of flood, 3 probes")


def bench(args: argparse.Namespace) -> None:
    """Run the idle and flood phases and print key B's figures."""
    if args.reduced:
        args.seconds, args.probes = 15.0, 3
    print(
        f"fairness: {args.workers} Piper workers; key A floods {args.sockets} sockets x {args.contexts} contexts of "
        f"{len(LONG)}-character texts for {args.seconds:g} s; key B asks for one sentence ({len(SENTENCE)} chars) "
        f"{args.probes} times idle and {args.probes} times in the flood; {os.cpu_count()} CPUs",
        flush=True,
    )
    server = RedisServer().start()
    try:
        with tempfile.TemporaryDirectory() as data_dir:
            env = {"ZSYNTH_LOG_LEVEL": "WARNING", "ZSYNTH_API_KEYS": f"{KEY_A},{KEY_B}"}
            with (
                front_process(server.url, Path(data_dir), **env) as (_, base),
                pool(server.url, data_dir, args.workers),
            ):
                idle, flood = asyncio.run(measure(base, args))
    finally:
        server.stop()
    target = 2000 + float(ms(idle.http, 50)) if idle.http else float("nan")
    print(f"{'key B':34}{'idle':>14}{'flood':>14}")
    print(f"{'sentence answer p50/max ms':34}{ms(idle.http, 50) + '/' + ms(idle.http, 100):>14}", end="")
    print(f"{ms(flood.http, 50) + '/' + ms(flood.http, 100):>14}")
    print(f"{'realtime first audio p50/max ms':34}{ms(idle.realtime, 50) + '/' + ms(idle.realtime, 100):>14}", end="")
    print(f"{ms(flood.realtime, 50) + '/' + ms(flood.realtime, 100):>14}")
    print(f"{'answers / errors':34}{f'{len(idle.http) + len(idle.realtime)}/{len(idle.errors)}':>14}", end="")
    print(f"{f'{len(flood.http) + len(flood.realtime)}/{len(flood.errors)}':>14}")
    verdict = "met" if flood.http and max(flood.http) * 1000 <= target else "MISSED"
    print(f"target: every flood answer within 2 s + the idle answer ({target:.0f} ms): {verdict}")
    errors = ", ".join(f"{code} {count}" for code, count in flood.flood_errors.most_common()) or "none"
    print(f"key A's flood: {flood.flood_segments} audio frames, {flood.flood_reconnects} sockets, errors: {errors}")
    for error in [*idle.errors, *flood.errors][:5]:
        print(f"  key B error: {error}")
