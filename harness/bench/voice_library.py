#!/usr/bin/env python3
"""Benchmark the voice library across boxes: how soon box B speaks a voice cloned on box A, and 404s a removed one.

Starts, on this machine, a redis-server, a moto S3 server and two boxes (two data directories, each with a real
front and a real Piper worker, all on loopback), then repeats ``--runs`` times:

* as a baseline, stream B's built-in voice: the time from the request to the first audio byte;
* clone on A (a 12 s reference clip), then at once ask B to stream that voice: the time from A's 200 to B's first
  audio byte (B fetches the voice on demand when the announcement has not landed yet), and, separately, the time
  from A's 200 until B lists the voice (the announcement path alone);
* delete on A, then poll ``GET /v1/voices/{id}`` on B every 10 ms: the time from A's 200 to B's 404.

Prints each run and the p50 and max of each figure. Bounded: ``--runs`` (at most 20) and a 30 s limit per step.

    python -m harness.bench voice-library [--runs 5]        (from the repository root)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from tempfile import TemporaryDirectory

import aioboto3
import aiohttp

from harness.fronts import front_process
from harness.stores import moto_env, moto_server, redis_server
from harness.voice_clips import reference_file
from harness.workers import WorkerProcess

STEP_LIMIT_S = 30.0
TEXT = "The first words of a voice that was cloned on the other box."


async def clone(http: aiohttp.ClientSession, url: str, clip: bytes) -> tuple[str, float]:
    form = aiohttp.FormData()
    form.add_field("name", "bench")
    form.add_field("files", clip, filename="ref.wav", content_type="audio/wav")
    async with http.post(f"{url}/v1/voices/add", data=form) as resp:
        assert resp.status == 200, await resp.text()
        return str((await resp.json())["voice_id"]), time.perf_counter()


async def first_audio(http: aiohttp.ClientSession, url: str, voice_id: str, since: float) -> float:
    path = f"{url}/v1/text-to-speech/{voice_id}/stream?output_format=pcm_22050"
    async with http.post(path, json={"text": TEXT}) as resp:
        assert resp.status == 200, await resp.text()
        first: float | None = None
        async for chunk in resp.content.iter_any():  # read to the end: the job runs whole, as for any client
            if chunk and first is None:
                first = time.perf_counter() - since
    if first is None:
        raise AssertionError("no audio")
    return first


async def until(check: Callable[[], Awaitable[bool]], since: float, interval: float = 0.01) -> float:
    deadline = since + STEP_LIMIT_S
    while not await check():
        if time.perf_counter() > deadline:
            raise AssertionError("step took longer than the limit")
        await asyncio.sleep(interval)
    return time.perf_counter() - since


async def measure(url_a: str, url_b: str, runs: int) -> None:
    clip = reference_file("wav")
    audio, listed, gone, builtin = [], [], [], []
    async with aiohttp.ClientSession() as http:

        async def lists(voice_id: str) -> bool:
            async with http.get(f"{url_b}/v1/voices") as resp:
                return voice_id in {v["voice_id"] for v in (await resp.json())["voices"]}

        async def is_404(voice_id: str) -> bool:
            async with http.get(f"{url_b}/v1/voices/{voice_id}") as resp:
                return resp.status == 404

        for run in range(1, runs + 1):
            # The baseline: first audio from B for its built-in voice.
            builtin.append(await first_audio(http, url_b, "joe", time.perf_counter()))
            # First audio from B, asked for the moment A answered.
            voice_id, done = await clone(http, url_a, clip)
            audio.append(await first_audio(http, url_b, voice_id, done))
            async with http.delete(f"{url_a}/v1/voices/{voice_id}") as resp:
                assert resp.status == 200
            # The announcement alone: a fresh clone B has never been asked for, until B lists it.
            voice_id, done = await clone(http, url_a, clip)
            listed.append(await until(functools.partial(lists, voice_id), done))
            async with http.delete(f"{url_a}/v1/voices/{voice_id}") as resp:
                assert resp.status == 200
                deleted = time.perf_counter()
            gone.append(await until(functools.partial(is_404, voice_id), deleted))
            print(
                f"run {run}: built-in voice's first audio from B {builtin[-1] * 1000:.0f} ms; "
                f"clone on A -> first audio from B {audio[-1] * 1000:.0f} ms, "
                f"-> listed on B {listed[-1] * 1000:.0f} ms; delete on A -> 404 on B {gone[-1] * 1000:.0f} ms"
            )
    for name, values in (
        ("built-in voice: request -> first audio from B (baseline)", builtin),
        ("clone on A -> first audio from B", audio),
        ("clone on A -> listed on B", listed),
        ("delete on A -> 404 on B", gone),
    ):
        print(f"{name}: p50 {statistics.median(values) * 1000:.0f} ms, max {max(values) * 1000:.0f} ms")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--runs", type=int, default=5, choices=range(1, 21), metavar="1-20")


def bench(args: argparse.Namespace) -> None:
    """Start the two boxes, run the benchmark, stop everything."""
    with contextlib.ExitStack() as stack:
        endpoint = stack.enter_context(moto_server())
        os.environ.update(moto_env(endpoint))
        bucket = f"bench-{uuid.uuid4().hex[:8]}"

        async def create() -> None:
            async with aioboto3.Session().client("s3") as s3:
                await s3.create_bucket(Bucket=bucket)

        asyncio.run(create())
        redis_url = stack.enter_context(redis_server())
        env = {"ZSYNTH_VOICES_BUCKET": bucket, "ZSYNTH_LOG_LEVEL": "WARNING"}
        urls = []
        for name in ("a", "b"):
            data_dir = Path(stack.enter_context(TemporaryDirectory(prefix=f"bench-box-{name}-")))
            worker = WorkerProcess(redis_url, f"bench-{name}", data_dir, **env)
            stack.callback(worker.stop)
            urls.append(stack.enter_context(front_process(redis_url, data_dir, **env))[1])
            worker.wait_ready()
        asyncio.run(measure(urls[0], urls[1], args.runs))
