#!/usr/bin/env python3
"""Flow-control figures (issue 36) on loopback: what clients that do not read cost a front, and who else notices.

Starts a redis-server, two Piper workers and one front (``zsynth serve``, keys ``key-a`` and ``key-b``) on free
loopback ports, then runs, one after the other:

* **F2 probe**: ``--streams`` (10) ``/stream`` requests of 10 KiB of ``<break time="3s"/>`` at ``pcm_48000`` that are
  never read: their statuses, and the front's RSS growth (peak over the case, and after it);
* **pauses within the bound**: the same number of unread streams of 60 s of pauses (the bound) plus a sentence;
* **ordinary text**: 4 unread streams of 2,500 characters of ordinary text at ``pcm_48000``;
* **a neighbour** (F3): key B streams a long text as mp3 while key A sends 3 concurrent pause-heavy
  ``with-timestamps`` at ``pcm_48000``: whether B's stream arrived whole, Redis's pub/sub disconnections
  (``client_output_buffer_limit_disconnections``), and the worst ``/healthz`` answer time;
* **a dead front**: a second front is SIGKILLed mid-stream; how long its worker goes on with the job.

Unread requests use sockets with a 4 KiB receive buffer that are never read; the front cuts them at its write
deadline (``ZSYNTH_WRITE_TIMEOUT``, 10 s). Bounded: every case ends within ``--case-seconds`` (default 30) plus the
deadlines. Usage::

    .venv/bin/python -m harness.bench flow [--reduced]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import signal
import socket
import tempfile
import time
from pathlib import Path

import aiohttp
import redis

from harness.audio import decode_audio
from harness.base import LONG_TEXT
from harness.fronts import front_process
from harness.measure import poll_health, proc_stats
from harness.stores import redis_server
from harness.workers import WorkerProcess

ROOT = Path(__file__).resolve().parents[2]

TIMEOUT = aiohttp.ClientTimeout(total=180)
KEYS = "key-a,key-b"
F2_TEXT = '<break time="3s"/>' * (10 * 1024 // len('<break time="3s"/>'))
BOUND_TEXT = "Wait for it. " + '<break time="3s"/> ' * 20 + "Here it is."
ORDINARY = (LONG_TEXT + " And a few more words to round it off.")[:2500]


def rss_mb(pid: int) -> float:
    """The process's resident set, MB."""
    return proc_stats(pid)[1] / 1e6


async def unread(port: int, path: str, body: dict[str, str], key: str) -> socket.socket:
    """Send a POST on a socket with a 4 KiB receive buffer, and never read it."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nxi-api-key: {key}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    ).encode()
    await loop.sock_sendall(sock, head + data)
    return sock


async def status_of(sock: socket.socket) -> str:
    """The status line's code, if the front sent one yet (the socket is read only for this, 64 bytes)."""
    try:
        head = sock.recv(64, socket.MSG_PEEK)
    except (BlockingIOError, OSError):
        return "none"
    return head.split(b" ", 2)[1].decode() if head.startswith(b"HTTP/") else "none"


async def unread_case(pid: int, port: int, text: str, streams: int, seconds: float) -> dict[str, object]:
    """``streams`` unread /stream requests of ``text`` at pcm_48000: statuses and the front's RSS growth."""
    before = rss_mb(pid)
    path = "/v1/text-to-speech/v/stream?output_format=pcm_48000"
    socks = [await unread(port, path, {"text": text}, "key-a") for _ in range(streams)]
    peak = before
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        peak = max(peak, rss_mb(pid))
        await asyncio.sleep(0.2)
    statuses = collections.Counter([await status_of(sock) for sock in socks])
    for sock in socks:
        sock.close()
    await asyncio.sleep(2)
    return {
        "statuses": dict(statuses),
        "rss_before_mb": round(before, 1),
        "growth_peak_mb": round(peak - before, 1),
        "growth_after_mb": round(rss_mb(pid) - before, 1),
    }


async def neighbour_case(base: str, client: redis.Redis) -> dict[str, object]:
    """Key B's mp3 stream while key A sends 3 pause-heavy with-timestamps at pcm_48000."""
    before = int(client.info("stats").get("client_output_buffer_limit_disconnections", 0))
    stop = asyncio.Event()
    health = asyncio.create_task(poll_health(base, stop, every_s=0.01))
    heavy = base + "/v1/text-to-speech/v/with-timestamps?output_format=pcm_48000"
    text_b = " ".join(LONG_TEXT.split(". ")[:6]) + "."

    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:

        async def a_heavy() -> int:
            async with session.post(heavy, json={"text": BOUND_TEXT}, headers={"xi-api-key": "key-a"}) as resp:
                await resp.read()
                return resp.status

        async def b_stream() -> tuple[int, float, str]:
            url = base + "/v1/text-to-speech/v/stream?output_format=mp3_44100_128"
            try:
                async with session.post(url, json={"text": text_b}, headers={"xi-api-key": "key-b"}) as resp:
                    data = await resp.read()
                    samples, rate = decode_audio(data, "mp3_44100_128")
                    return resp.status, len(samples) / rate, "whole"
            except aiohttp.ClientPayloadError as err:
                return 200, 0.0, f"cut: {err}"

        heavy_results, (b_status, b_seconds, b_state) = await asyncio.gather(
            asyncio.gather(*(a_heavy() for _ in range(3))), b_stream()
        )
    stop.set()
    worst = await health
    after = int(client.info("stats").get("client_output_buffer_limit_disconnections", 0))
    heavy_statuses = collections.Counter(heavy_results)
    return {
        "a_with_timestamps": dict(heavy_statuses),
        "b_stream": f"{b_status} {b_state}, {b_seconds:.1f} s of audio",
        "pubsub_disconnections": after - before,
        "worst_healthz_ms": round(worst * 1e3, 1),
    }


async def dead_front_case(redis_url: str, data: Path) -> dict[str, object]:
    """SIGKILL a front mid-stream; how long its job runs on."""
    client = redis.Redis.from_url(redis_url)
    with front_process(redis_url, data, ZSYNTH_LOG_LEVEL="WARNING", ZSYNTH_API_KEYS=KEYS) as (front, base):
        async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
            url = base + "/v1/text-to-speech/v/stream?output_format=pcm_48000"
            resp = await session.post(url, json={"text": LONG_TEXT * 3}, headers={"xi-api-key": "key-a"})
            job_id = resp.headers["history-item-id"]
            await resp.content.read(1000)
            front.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            front.wait(10)
    record: dict[bytes, bytes] = {}
    while time.monotonic() - killed < 120:
        record = client.hgetall(f"zsynth:job:{job_id}")  # type: ignore[assignment]
        if b"state" in record:
            break
        await asyncio.sleep(0.1)
    client.close()
    return {
        "job_ran_on_s": round(time.monotonic() - killed, 1),
        "ended": f"{record.get(b'state', b'?').decode()} {record.get(b'code', b'').decode()}".strip(),
    }


async def run(args: argparse.Namespace, redis_url: str, data: Path) -> dict[str, object]:
    client = redis.Redis.from_url(redis_url)
    figures: dict[str, object] = {}
    env = {"ZSYNTH_LOG_LEVEL": "WARNING", "ZSYNTH_API_KEYS": KEYS}
    with front_process(redis_url, data, **env) as (front, base):
        port = int(base.rsplit(":", 1)[1])
        streams = 3 if args.reduced else 10
        figures["f2_probe"] = await unread_case(front.pid, port, F2_TEXT, streams, args.case_seconds)
        figures["pauses_within_bound"] = await unread_case(front.pid, port, BOUND_TEXT, streams, args.case_seconds)
        figures["ordinary_text"] = await unread_case(front.pid, port, ORDINARY, 4, args.case_seconds)
        figures["neighbour"] = await neighbour_case(base, client)
    figures["dead_front"] = await dead_front_case(redis_url, data)
    client.close()
    return figures


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--reduced", action="store_true", help="3 streams in the pause cases, short cases")
    parser.add_argument("--case-seconds", type=float, default=30.0, help="how long each unread case runs")


def bench(args: argparse.Namespace) -> None:
    if args.reduced:
        args.case_seconds = min(args.case_seconds, 8.0)
    with redis_server() as redis_url, tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        workers = [WorkerProcess(redis_url, f"flow-{n}", data, ZSYNTH_ENGINE_THREADS="1") for n in range(2)]
        try:
            for worker in workers:
                worker.wait_ready()
            figures = asyncio.run(run(args, redis_url, data))
        finally:
            for worker in workers:
                worker.stop()
    print("flow control on loopback: 2 Piper workers, one front (issue 36)")
    for case, values in figures.items():
        print(f"  {case:<22} " + ", ".join(f"{k}={v}" for k, v in values.items()))  # type: ignore[attr-defined]
    print(json.dumps(figures))
