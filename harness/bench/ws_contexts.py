#!/usr/bin/env python3
"""Benchmark how many contexts one multi-stream-input socket can start by looping open, flush, close.

Starts its own redis-server (no worker: a context's job stays queued, so no context ever finishes its audio and the
figure is what the front lets one socket start) and a front in this process with one key; a second process opens a
context with ``--chars`` characters of text, flushes it and closes it, again and again, at ``--rate`` messages a
second (under the socket's default message rate) for ``--seconds``. Printed: the contexts whose jobs were queued at
once (sampled every 0.1 s), the characters they hold, and how the socket ended.

    python -m harness.bench ws-contexts [--seconds 20] [--chars 10000]     (from the repository root)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

import aiohttp
from aiohttp import web
from redis.asyncio import Redis

from harness.base import free_port
from harness.stores import redis_server
from zsynth.core import protocol
from zsynth.core.config import Settings
from zsynth.speech.app import create_app

KEY = "bench-contexts-key"


def _loop(url: str, seconds: float, chars: int, rate: float, report: Connection) -> None:
    """The client: open, flush, close contexts until the time is up or the front ends the socket."""

    async def run() -> tuple[int, str]:
        text = ("word " * (chars // 5 + 1))[:chars]
        sent = 0
        async with aiohttp.ClientSession() as session:
            ws = await session.ws_connect(url, headers={"xi-api-key": KEY})
            ended = "still open"

            async def read() -> None:
                nonlocal ended
                async for msg in ws:
                    if msg.type is aiohttp.WSMsgType.TEXT and "error" in (frame := json.loads(msg.data)):
                        ended = f"error frame {frame['error']}"
                ended = f"{ended}, close {ws.close_code}" if ws.close_code is not None else ended

            reader = asyncio.create_task(read())
            deadline = time.monotonic() + seconds
            try:
                while time.monotonic() < deadline and not ws.closed:
                    async with asyncio.timeout(max(0.01, deadline - time.monotonic())):
                        await ws.send_json({"text": text, "context_id": f"c{sent}", "flush": True})
                        await ws.send_json({"context_id": f"c{sent}", "close_context": True})
                    sent += 1
                    await asyncio.sleep(2 / rate)
            except (TimeoutError, ConnectionError):
                pass  # the front stopped reading (the sixth context waits) or closed
            if not ws.closed:
                await ws.close()
            await reader
            return sent, ended

    report.send(asyncio.run(run()))


async def _bench(redis_url: str, data_dir: Path, args: argparse.Namespace) -> tuple[int, int, int, str]:
    settings = Settings(data_dir=data_dir).with_(
        redis_url=redis_url, auth_api_key=KEY, jobs_first_chunk_timeout_s=3600.0
    )
    runner = web.AppRunner(create_app(settings))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    url = f"http://127.0.0.1:{port}/v1/text-to-speech/any-voice/multi-stream-input"
    redis = Redis.from_url(redis_url)
    ours, theirs = multiprocessing.Pipe()
    client = multiprocessing.get_context("spawn").Process(
        target=_loop, args=(url, args.seconds, args.chars, args.rate, theirs)
    )
    client.start()
    most = 0
    while client.is_alive() and not ours.poll():
        most = max(most, await redis.llen(protocol.QUEUE))
        await asyncio.sleep(0.1)
    sent, ended = ours.recv()
    client.join()
    most = max(most, await redis.llen(protocol.QUEUE))
    queued_chars = sum(len(json.loads(raw)["text"]) for raw in await redis.lrange(protocol.QUEUE, 0, -1))
    await redis.aclose()
    await runner.cleanup()
    return sent, most, queued_chars, ended


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--chars", type=int, default=10_000, help="characters of each context's text")
    parser.add_argument("--rate", type=float, default=80.0, help="client messages a second (the cap is 100)")


def bench(args: argparse.Namespace) -> None:
    # A throw-away redis-server on a free loopback port, waited for until it answers (harness.stores).
    with redis_server() as url, tempfile.TemporaryDirectory() as data_dir:
        sent, most, chars, ended = asyncio.run(_bench(url, Path(data_dir), args))
    print(f"one socket looping open, flush, close of {args.chars}-character contexts for {args.seconds:g} s")
    print(f"contexts the client sent: {sent}; contexts queued at once: {most} ({chars} characters); socket: {ended}")
