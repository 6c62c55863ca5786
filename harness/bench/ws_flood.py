#!/usr/bin/env python3
"""Benchmark the front's event loop during a flood of text with no white space on one realtime socket.

Starts its own redis-server (no worker: the segments wait in the queue, so only the front's work is measured) and a
front in this process; a second process sends ``--megabytes`` of one endless word in 10,000-character messages.
The front's event loop is sampled every millisecond; the figure is the longest stall, the time one turn of the loop
held every other socket and request of the front.

    python -m harness.bench ws-flood [--megabytes 10]     (from the repository root)
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

from harness.base import free_port
from harness.stores import redis_server
from zsynth.core.config import Settings
from zsynth.speech.app import create_app

KEY = "bench-flood-key"
MESSAGE_CHARS = 10_000


def _flood(url: str, megabytes: int) -> None:
    async def run() -> None:
        async with aiohttp.ClientSession() as session:
            ws = await session.ws_connect(url, headers={"xi-api-key": KEY}, max_msg_size=0)
            await ws.send_json({"text": " "})
            message = "z" * MESSAGE_CHARS
            for _ in range(megabytes * 1_000_000 // MESSAGE_CHARS):
                await ws.send_json({"text": message})
            await ws.send_json({"text": "done ", "flush": True})
            await asyncio.sleep(1.0)
            if ws.closed:  # the front refused the flood: the figure would not measure it
                raise SystemExit(f"the front closed the socket ({ws.close_code})")
            await ws.close()

    asyncio.run(run())


async def _bench(redis_url: str, data_dir: Path, megabytes: int) -> tuple[float, float]:
    settings = Settings(data_dir=data_dir).with_(
        redis_url=redis_url,
        auth_api_key=KEY,
        ws_max_messages_per_s=100_000.0,
        ws_max_queued_chars=2 * megabytes * 1_000_000,
        ws_max_queued_segments=2 * megabytes * 1_000,
    )
    runner = web.AppRunner(create_app(settings))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    url = f"http://127.0.0.1:{port}/v1/text-to-speech/any-voice/stream-input"
    client = multiprocessing.get_context("spawn").Process(target=_flood, args=(url, megabytes))
    started = time.perf_counter()
    client.start()
    worst = 0.0
    while client.is_alive():
        before = time.perf_counter()
        await asyncio.sleep(0.001)
        worst = max(worst, time.perf_counter() - before - 0.001)
    took = time.perf_counter() - started
    client.join()
    await runner.cleanup()
    if client.exitcode != 0:
        raise SystemExit("the flood did not complete")
    return worst, took


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--megabytes", type=int, default=10)


def bench(args: argparse.Namespace) -> None:
    # A throw-away redis-server on a free loopback port, waited for until it answers (harness.stores).
    with redis_server() as url, tempfile.TemporaryDirectory() as data_dir:
        worst, took = asyncio.run(_bench(url, Path(data_dir), args.megabytes))
    print(f"{args.megabytes} MB without white space in {MESSAGE_CHARS}-character messages, sent in {took:.1f} s")
    print(f"longest event-loop stall of the front: {worst * 1000:.1f} ms")
