#!/usr/bin/env python3
"""Soak: a bounded run of mixed traffic against a local stack with 2 workers, watching for leaks.

Starts redis-server, one front and two Piper workers on loopback, then for ``--minutes`` (default 10) drives a mix
of HTTP streams, whole-body requests, realtime WebSocket turns and clone/delete cycles. It reports requests and
errors by kind, the memory (RSS) and open file descriptors of each process after warm-up and at the end, and the
Redis keys and pub/sub channels left behind once job records have expired.

    .venv/bin/python -m harness.bench soak --minutes 10
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import os
import random
import time
from collections import Counter
from pathlib import Path

import aiohttp
import numpy as np
import redis
import soundfile as sf

from harness.measure import proc_stats
from harness.stack import local_stack

ROOT = Path(__file__).resolve().parents[2]

TEXTS = [
    "A short sentence.",
    "Two sentences this time. The second is a little longer than the first one.",
    "Realtime speech arrives in pieces, and each piece is spoken as soon as it is complete.",
]


def _text(value: bytes | str) -> str:
    """A Redis reply as text (the client is typed to return either)."""
    return value.decode() if isinstance(value, bytes) else value


def fds(pid: int) -> int:
    """Open file descriptors of a process."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def reference_clip() -> bytes:
    """About 12 s of a voiced buzz with syllable rhythm, as a WAV file (no download)."""
    rate = 24000
    t = np.arange(int(12 * rate)) / rate
    pitch = 140 + 20 * np.sin(2 * np.pi * 0.3 * t)
    phase = 2 * np.pi * np.cumsum(pitch) / rate
    voice = sum(np.sin(k * phase) / k for k in range(1, 8)) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t)) * 0.2
    buf = io.BytesIO()
    sf.write(buf, voice.astype(np.float32), rate, format="WAV")
    return buf.getvalue()


async def one(session: aiohttp.ClientSession, base: str, kind: str, clip: bytes, tally: Counter[str]) -> None:
    """One request of the given kind; count its outcome."""
    text = random.choice(TEXTS)
    try:
        if kind == "stream":
            async with session.post(f"{base}/v1/text-to-speech/soak/stream", json={"text": text}) as resp:
                await resp.read()
                tally[f"stream_{resp.status}"] += 1
        elif kind == "convert":
            url = f"{base}/v1/text-to-speech/soak?output_format=pcm_16000"
            async with session.post(url, json={"text": text}) as resp:
                await resp.read()
                tally[f"convert_{resp.status}"] += 1
        elif kind == "ws":
            url = base.replace("http://", "ws://") + "/v1/text-to-speech/soak/stream-input?output_format=pcm_16000"
            async with session.ws_connect(url) as ws:
                await ws.send_json({"text": " "})
                for word in text.split():
                    await ws.send_json({"text": word + " ", "try_trigger_generation": True})
                await ws.send_json({"text": ""})
                audio = 0
                async for msg in ws:
                    data = json.loads(msg.data)
                    if data.get("audio"):
                        audio += len(base64.b64decode(data["audio"]))
                tally[f"ws_close_{ws.close_code}" + ("" if audio else "_silent")] += 1
        else:
            form = aiohttp.FormData()
            form.add_field("name", "soak")
            form.add_field("file", clip, filename="ref.wav", content_type="audio/wav")
            async with session.post(f"{base}/voices", data=form) as resp:
                body = await resp.json()
                tally[f"clone_{resp.status}"] += 1
            if resp.status == 200:
                async with session.delete(f"{base}/voices/{body['voice_id']}") as resp:
                    tally[f"delete_{resp.status}"] += 1
    except (aiohttp.ClientError, TimeoutError, ValueError) as err:
        tally[f"{kind}_{type(err).__name__}"] += 1


async def drive(base: str, seconds: float, clients: int, tally: Counter[str]) -> None:
    """`clients` loops of random request kinds until the time is up."""
    clip = reference_clip()
    deadline = time.monotonic() + seconds
    kinds = ["stream"] * 4 + ["convert"] * 3 + ["ws"] * 3 + ["clone"]
    timeout = aiohttp.ClientTimeout(total=60)

    async def loop(session: aiohttp.ClientSession) -> None:
        while time.monotonic() < deadline:
            await asyncio.wait_for(one(session, base, random.choice(kinds), clip, tally), 90)

    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(*(loop(session) for _ in range(clients)))


def snapshot(pids: dict[str, int]) -> dict[str, tuple[float, int]]:
    """RSS in MiB and open fds per process."""
    return {name: (round(proc_stats(pid)[1] / 2**20, 1), fds(pid)) for name, pid in pids.items()}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=60.0, help="seconds of traffic before the first snapshot")
    parser.add_argument("--clients", type=int, default=4)


def bench(args: argparse.Namespace) -> None:
    """Run the soak and print its report."""
    random.seed(1)
    job_ttl = "20"
    env = {"ZSYNTH_JOB_TTL": job_ttl, "ZSYNTH_LOG_LEVEL": "WARNING"}
    with local_stack(workers=2, worker_env=env, front_env=env, name="soak") as stack:
        server, workers, front, base = stack.redis, stack.workers, stack.front, stack.base
        assert server.proc is not None
        pids = {"front": front.pid, "redis": server.proc.pid}
        pids.update({w.worker_id: w.proc.pid for w in workers})
        tally: Counter[str] = Counter()
        asyncio.run(drive(base, args.warmup, args.clients, tally))
        start = snapshot(pids)
        t0 = time.monotonic()
        asyncio.run(drive(base, args.minutes * 60 - args.warmup, args.clients, tally))
        end = snapshot(pids)
        wall = time.monotonic() - t0
        time.sleep(int(job_ttl) + 2)  # let job records and cancel markers expire
        client = redis.Redis.from_url(server.url)
        keys = sorted(_text(k) for k in client.keys("*"))
        channels = sorted(_text(c) for c in client.pubsub_channels("zsynth:events:*"))
        client.close()
    total = sum(tally.values())
    print(
        f"soak: {total} requests in {args.minutes:.1f} min ({args.clients} clients, 2 workers); "
        f"measured window {wall:.0f}s after {args.warmup:.0f}s warm-up"
    )
    print("outcomes:", dict(sorted(tally.items())))
    print(f"{'process':>10} {'rss start':>10} {'rss end':>9} {'growth':>7} {'fds start':>9} {'fds end':>7}")
    for name in start:
        (rss0, fd0), (rss1, fd1) = start[name], end[name]
        print(f"{name:>10} {rss0:>9.1f}M {rss1:>8.1f}M {100 * (rss1 - rss0) / rss0:>6.1f}% {fd0:>9} {fd1:>7}")
    left = [k for k in keys if not k.startswith(("zsynth:heartbeat:", "zsynth:workers"))]
    print(f"redis keys left (besides live heartbeats and the worker set): {left or 'none'}")
    print(f"pub/sub event channels left: {channels or 'none'}")
