#!/usr/bin/env python3
"""Voice safety figures (issue 26 items 5-6, issue 27 item 5), on loopback, in one run.

Starts a moto S3 server, a redis-server, one front and one Piper worker (each on its own data directory, both on the
same bucket), then prints one row per probe:

* **bucket FLAC bomb**: a 0.28 MB FLAC (8 channels of silence at 192 kHz, minutes long) is put in the bucket as a
  voice's reference; speech is asked for through the front, then a job for a second such voice goes straight to the
  queue (so the worker fetches it itself). The row gives the worker's peak RSS growth (``VmHWM`` reset first) and
  what each request got.
* **ten 59 s clips**: one cloning request with ten 59 s clips of 8 channels at 192 kHz (over 60 s in total); the row
  gives the front's CPU time for the request (``/proc/<pid>/stat``) and its answer.
* **forged delete**: a voice is cloned, then ``XADD zsynth:voices:log * op delete voice_id <id> revision 0 box x``
  is written straight to Redis; the row says whether the voice is still listed and spoken 3 s later, and again after
  the front restarts, and whether the bucket got a tombstone.

Bounded: a handful of requests, each with a 120 s timeout. Usage::

    .venv/bin/python -m harness.bench voice-safety
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import soundfile as sf

from harness.fronts import front_process
from harness.stores import moto_env, moto_server, redis_server
from harness.voice_clips import flac_bomb, reference_file
from harness.workers import WorkerProcess
from zsynth.core import protocol

ROOT = Path(__file__).resolve().parents[2]

PREFIX = "bench/"
TIMEOUT = aiohttp.ClientTimeout(total=120)
BOMB_BYTES = 280_000
TEXT = "The library keeps every voice in one place."


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for {pid}")


def reset_peak(pid: int) -> None:
    """Reset the process's peak RSS (VmHWM) to its current RSS."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def long_clip(seconds: float = 59.0, channels: int = 8, rate: int = 192000) -> bytes:
    """A FLAC of ``seconds`` of quiet noise in ``channels`` channels at ``rate`` (small: FLAC packs it well)."""
    out = io.BytesIO()
    block = np.zeros((rate, channels), dtype=np.int16)
    with sf.SoundFile(out, "w", samplerate=rate, channels=channels, format="FLAC", subtype="PCM_16") as fh:
        for _ in range(int(seconds)):
            fh.write(block)
    return out.getvalue()


async def put_voice(s3: Any, bucket: str, voice_id: str, reference: str, data: bytes) -> None:
    """A voice in the bucket as another box would have written it: its clip, then its meta.json."""
    meta = {"format": 1, "voice_id": voice_id, "name": "bench", "revision": 0, "reference": reference}
    await s3.put_object(Bucket=bucket, Key=f"{PREFIX}{voice_id}/{reference}", Body=data)
    await s3.put_object(Bucket=bucket, Key=f"{PREFIX}{voice_id}/meta.json", Body=json.dumps(meta).encode())


async def speak(url: str, voice_id: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as http,
        http.post(f"{url}/v1/text-to-speech/{voice_id}?output_format=pcm_22050", json={"text": TEXT}) as resp,
    ):
        body = await resp.read()
        if resp.status == 200:
            return 200, f"{len(body) / 44100:.1f} s of audio"
        return resp.status, json.loads(body).get("detail", {}).get("code", "?")


async def queue_job(redis_url: str, voice_id: str) -> str:
    """One job straight to the queue (no front in between): its terminal outcome."""
    from redis.asyncio import Redis

    from harness.base import make_settings
    from zsynth.services.dispatch import Dispatcher, JobFailed

    redis = Redis.from_url(redis_url)
    dispatcher = Dispatcher(make_settings(redis_url, Path(tempfile.mkdtemp())), redis)
    await dispatcher.start()
    try:
        async with await dispatcher.submit(protocol.Job(TEXT, voice_id, "pcm_22050")) as stream:
            chunks = 0
            try:
                async for _ in stream.chunks():
                    chunks += 1
            except JobFailed as err:
                return f"error {err.code}"
            return f"done, {chunks} chunks"
    finally:
        await dispatcher.close()
        await redis.aclose()


async def bomb_row(s3: Any, bucket: str, url: str, redis_url: str, worker: WorkerProcess) -> str:
    bomb = flac_bomb(BOMB_BYTES)
    first, second = (f"custom-bomb{uuid.uuid4().hex[:12]}" for _ in range(2))
    for voice_id in (first, second):
        await put_voice(s3, bucket, voice_id, "reference.flac", bomb)
    pid = worker.proc.pid
    before = _status_kib(pid, "VmRSS")
    reset_peak(pid)
    started = time.monotonic()
    front_answer = await speak(url, first)
    queued = await asyncio.wait_for(queue_job(redis_url, second), 120)
    growth = (_status_kib(pid, "VmHWM") - before) / 1024
    alive = "alive" if worker.proc.poll() is None else f"DEAD ({worker.proc.returncode})"
    return (
        f"bucket FLAC bomb ({len(bomb) / 1e6:.2f} MB) worker RSS growth   {growth:+8.1f} MB   "
        f"front {front_answer[0]} {front_answer[1]}, queued job {queued}, worker {alive}, "
        f"{time.monotonic() - started:.1f} s"
    )


async def clips_row(url: str, pid: int) -> str:
    clip = long_clip()
    form = aiohttp.FormData()
    form.add_field("name", "ten long clips")
    for n in range(10):
        form.add_field("files", clip, filename=f"clip{n}.flac", content_type="audio/flac")
    before = cpu_seconds(pid)
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http, http.post(f"{url}/v1/voices/add", data=form) as resp:
        body = await resp.json()
    spent = cpu_seconds(pid) - before
    message = body.get("detail", {}).get("message", "")[:60] if resp.status != 200 else body.get("voice_id")
    return f"CPU before refusing ten 59 s 8-channel clips ({10 * len(clip) / 1e6:.2f} MB)  {spent:6.2f} s   " + (
        f"{resp.status} {message!r}"
    )


async def clone(url: str) -> str:
    form = aiohttp.FormData()
    form.add_field("name", "forged delete target")
    form.add_field("files", reference_file("wav"), filename="ref.wav", content_type="audio/wav")
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http, http.post(f"{url}/v1/voices/add", data=form) as resp:
        assert resp.status == 200, await resp.text()
        return str((await resp.json())["voice_id"])


async def served(url: str, voice_id: str) -> str:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http, http.get(f"{url}/v1/voices") as resp:
        listed = voice_id in {v["voice_id"] for v in (await resp.json())["voices"]}
    status, _ = await speak(url, voice_id)
    return "served" if listed and status == 200 else f"gone (listed {listed}, speech {status})"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark has no options."""


async def bench(args: argparse.Namespace) -> None:
    with contextlib.ExitStack() as stack:
        endpoint = stack.enter_context(moto_server())
        os.environ.update(moto_env(endpoint))
        import aioboto3
        from redis.asyncio import Redis

        bucket = f"bench-{uuid.uuid4().hex[:8]}"
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        redis_url = stack.enter_context(redis_server())
        env = {"ZSYNTH_VOICES_BUCKET": bucket, "ZSYNTH_VOICES_PREFIX": PREFIX}
        async with aioboto3.Session().client("s3") as s3:
            await s3.create_bucket(Bucket=bucket)
            worker = WorkerProcess(redis_url, "bench-worker", tmp / "worker", **env)
            stack.callback(worker.stop)
            front = contextlib.ExitStack()
            proc, url = front.enter_context(front_process(redis_url, tmp / "front", **env))
            worker.wait_ready()
            rows = [await bomb_row(s3, bucket, url, redis_url, worker), await clips_row(url, proc.pid)]

            voice_id = await clone(url)
            redis = Redis.from_url(redis_url)
            fields: dict[Any, Any] = {"op": "delete", "voice_id": voice_id, "revision": "0", "box": "x"}
            await redis.xadd(protocol.VOICES_LOG, fields)
            await redis.aclose()
            await asyncio.sleep(3.0)
            after_forgery = await served(url, voice_id)
            front.close()
            with front_process(redis_url, tmp / "front", **env) as (_, url):
                after_restart = await served(url, voice_id)
                listing = await s3.list_objects_v2(Bucket=bucket, Prefix=f"{PREFIX}{voice_id}/")
            tombstone = any(o["Key"].endswith("tombstone.json") for o in listing.get("Contents", []))
            rows.append(
                f"a voice after one forged delete: {after_forgery} after 3 s, {after_restart} after a front restart, "
                f"bucket tombstone {'written' if tombstone else 'absent'}"
            )
    print("\n".join(rows))
