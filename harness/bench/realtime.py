"""Benchmark of the realtime socket, on loopback only (run it through ``.venv/bin/python -m harness.bench realtime``).

1. Engine baseline: Piper's own time to its first chunk for a one-sentence reply, in this process, before anything
   else runs (p50/p95 over --reps).
2. Socket latency: one stream-input socket against a real front, Redis and one worker; the time from sending a
   flush to receiving the first audio frame, for the same sentence (p50/p95). The difference is what the front,
   Redis, the queue and the socket add.
3. Load: one front process holds --idle idle sockets plus --speaking sockets that speak at the same time. A task
   inside the front measures event-loop stalls (how late a 10 ms sleep wakes up); the front's RSS is read from
   /proc before and after the idle sockets open.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import aiohttp

# Run from a checkout: import this tree's zsynth and workers, not an installed copy.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SENTENCE = "Sure, I can help you with that right away."
SPEAKING_TEXT = ["Thanks for waiting. ", "Your order has shipped, ", "and it should arrive on Friday. "]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


def engine_baseline(reps: int) -> list[float]:
    """Seconds from calling the engine to its first chunk, for SENTENCE."""
    from workers.engines import VoiceSpec
    from workers.engines.piper import PiperEngine

    engine = PiperEngine(threads=1)
    engine.warm_up()
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        next(iter(engine.synthesize(SENTENCE, VoiceSpec("bench"), {}, lambda: False)))
        times.append(time.perf_counter() - started)
    return times


def front_main(redis_url: str, port: int) -> None:
    """The front process: the real app, plus a stall monitor and a stats route that exist only in this benchmark."""
    import resource

    import uvloop
    from aiohttp import web

    from zsynth.core.config import Settings
    from zsynth.speech.app import create_app

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    stalls: list[tuple[float, float]] = []
    gc_pauses: list[float] = []
    gc_started = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        # CPU time of the collection itself (wall time would include the OS preempting it on a busy box).
        if phase == "start":
            gc_started[0] = time.thread_time()
        else:
            gc_pauses.append(time.thread_time() - gc_started[0])

    gc.callbacks.append(on_gc)

    async def monitor(app: web.Application) -> Any:
        async def run() -> None:
            loop = asyncio.get_running_loop()
            while True:
                started, cpu = loop.time(), time.thread_time()
                await asyncio.sleep(0.01)
                stall = loop.time() - started - 0.01
                # CPU the loop's thread used meanwhile: a stall without it is the OS not scheduling the process
                # (a busy shared box), not work blocking the loop.
                stalls.append((stall, time.thread_time() - cpu))

        task = asyncio.create_task(run())
        yield
        task.cancel()

    async def stats(request: web.Request) -> web.Response:
        if request.query.get("reset"):
            stalls.clear()
            gc_pauses.clear()
        ordered = sorted(stall for stall, _ in stalls) or [0.0]
        busy = sorted(min(stall, cpu) for stall, cpu in stalls) or [0.0]
        return web.json_response(
            {
                "samples": len(stalls),
                "max_ms": ordered[-1] * 1000,
                "p99_ms": ordered[int(0.99 * (len(ordered) - 1))] * 1000,
                "busy_max_ms": busy[-1] * 1000,
                "gc_max_ms": max(gc_pauses, default=0.0) * 1000,
                "gc_runs": len(gc_pauses),
                "rss_mib": rss_mib(os.getpid()),
            }
        )

    settings = Settings().with_(redis_url=redis_url, http_port=port, telemetry_log_level="WARNING")
    app = create_app(settings)
    app.cleanup_ctx.append(monitor)
    app.router.add_get("/_bench/stats", stats)
    asyncio.set_event_loop(uvloop.new_event_loop())
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None, handler_cancellation=True)


async def wait_http(base: str, session: aiohttp.ClientSession) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(aiohttp.ClientError):
            async with session.get(f"{base}/_bench/stats") as resp:
                if resp.status == 200:
                    return
        await asyncio.sleep(0.1)
    raise RuntimeError("front did not start")


async def socket_latency(base: str, session: aiohttp.ClientSession, reps: int) -> list[float]:
    """Flush -> first audio frame on one socket, ``reps`` times, waiting for each segment to end."""
    url = f"{base}/v1/text-to-speech/bench/stream-input?output_format=pcm_22050&inactivity_timeout=180"
    times = []
    async with session.ws_connect(url, max_msg_size=0) as ws:
        await ws.send_json({"text": " "})
        for _ in range(reps + 1):
            started = time.perf_counter()
            await ws.send_json({"text": SENTENCE + " ", "flush": True})
            first = None
            while True:
                frame = json.loads((await ws.receive(timeout=60)).data)
                if frame.get("audio") and first is None:
                    first = time.perf_counter() - started
                if frame.get("alignment") and frame["alignment"]["chars"][-1] == ".":
                    break
            times.append(first or float("nan"))
        await ws.send_json({"text": ""})
    return times[1:]  # the first one warms the path


def _text(value: bytes | str) -> str:
    """A Redis reply as text (the client is typed to return either)."""
    return value.decode() if isinstance(value, bytes) else value


async def worker_times(redis_url: str) -> list[float]:
    """Seconds each latency segment spent in the worker (claim to done: the engine plus encoding and publishing)."""
    from redis.asyncio import Redis

    from zsynth.core import protocol

    redis = Redis.from_url(redis_url)
    times = []
    try:
        async for key in redis.scan_iter(protocol.job_key("*")):
            record = {_text(k): _text(v) for k, v in (await redis.hgetall(key)).items()}
            if record.get("state") == "done" and record.get("chars") == str(len(SENTENCE)):
                times.append(float(record["finished_at"]) - float(record["started_at"]))
    finally:
        await redis.aclose()
    return times


async def speaker(base: str, session: aiohttp.ClientSession) -> tuple[float, float]:
    """One speaking socket: its time to first audio and to isFinal."""
    url = f"{base}/v1/text-to-speech/bench/stream-input?output_format=mp3_44100_128"
    started = time.perf_counter()
    first = None
    async with session.ws_connect(url, max_msg_size=0) as ws:
        await ws.send_json({"text": " ", "generation_config": {"chunk_length_schedule": [50]}})
        for piece in SPEAKING_TEXT:
            await ws.send_json({"text": piece, "try_trigger_generation": True})
        await ws.send_json({"text": ""})
        async for msg in ws:
            frame = json.loads(msg.data)
            if frame.get("audio") and first is None:
                first = time.perf_counter() - started
            if frame.get("isFinal"):
                break
    return first or float("nan"), time.perf_counter() - started


async def load(base: str, session: aiohttp.ClientSession, idle: int, speaking: int, pid: int) -> dict[str, Any]:
    # Control: the same measurement on the front doing nothing, to tell the box's own scheduling noise apart.
    async with session.get(f"{base}/_bench/stats?reset=1") as resp:
        before = (await resp.json())["rss_mib"]
    await asyncio.sleep(5.0)
    async with session.get(f"{base}/_bench/stats") as resp:
        control = await resp.json()
    url = f"{base}/v1/text-to-speech/bench/stream-input?inactivity_timeout=180"
    sockets = []
    opened = time.perf_counter()
    for _ in range(idle):
        ws = await session.ws_connect(url)
        await ws.send_json({"text": " "})
        sockets.append(ws)
    opened = time.perf_counter() - opened
    await asyncio.sleep(1.0)
    idle_rss = rss_mib(pid)
    async with session.get(f"{base}/_bench/stats?reset=1"):
        pass
    results = await asyncio.gather(*(speaker(base, session) for _ in range(speaking)))
    async with session.get(f"{base}/_bench/stats") as resp:
        stall = await resp.json()
    alive = sum(1 for ws in sockets if not ws.closed)
    for ws in sockets:
        await ws.close()
    return {
        "before": before,
        "idle_rss": idle_rss,
        "opened_s": opened,
        "stall": stall,
        "control": control,
        "alive": alive,
        "first": [r[0] for r in results],
        "total": [r[1] for r in results],
    }


async def run_client(port: int, pid: int, redis_url: str, args: argparse.Namespace) -> None:
    base = f"http://127.0.0.1:{port}"
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        await wait_http(base, session)
        latency = await socket_latency(base, session, args.reps)
        print(
            f"socket flush -> first audio frame: p50 {pct(latency, 0.5) * 1000:.0f} ms, "
            f"p95 {pct(latency, 0.95) * 1000:.0f} ms (n={len(latency)})"
        )
        in_worker = await worker_times(redis_url)
        print(
            f"same segments inside the worker (claim -> done, one sentence = one chunk): "
            f"p50 {pct(in_worker, 0.5) * 1000:.0f} ms, p95 {pct(in_worker, 0.95) * 1000:.0f} ms (n={len(in_worker)}); "
            f"front + Redis + socket add p50 {(pct(latency, 0.5) - pct(in_worker, 0.5)) * 1000:.0f} ms"
        )
        result = await load(base, session, args.idle, args.speaking, pid)
    per_socket_kib = (result["idle_rss"] - result["before"]) * 1024 / max(1, args.idle)
    print(
        f"front RSS: {result['before']:.1f} MiB before, {result['idle_rss']:.1f} MiB with {args.idle} idle sockets "
        f"(~{per_socket_kib:.0f} KiB per socket); {args.idle} opened in {result['opened_s']:.1f} s"
    )
    stall = result["stall"]
    print(
        f"event-loop stalls while {args.speaking} sockets spoke next to {args.idle} idle ones: "
        f"max {stall['max_ms']:.1f} ms, p99 {stall['p99_ms']:.1f} ms over {stall['samples']} samples "
        f"(target < 50 ms: {'met' if stall['max_ms'] < 50 else 'NOT met'}); longest stall spent computing on the "
        f"loop's thread: {stall['busy_max_ms']:.1f} ms; longest GC (CPU) {stall['gc_max_ms']:.1f} ms "
        f"({stall['gc_runs']} collections); front RSS {stall['rss_mib']:.1f} MiB"
    )
    control = result["control"]
    print(
        f"control, the same front idle for 5 s: max stall {control['max_ms']:.1f} ms, p99 {control['p99_ms']:.1f} ms "
        f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)"
    )
    first, total = result["first"], result["total"]
    print(
        f"speaking sockets ({args.workers} worker(s)): first audio p50 {pct(first, 0.5):.2f} s, "
        f"p95 {pct(first, 0.95):.2f} s; done p50 {pct(total, 0.5):.2f} s, p95 {pct(total, 0.95):.2f} s; "
        f"idle sockets still open: {result['alive']}/{args.idle}"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--reps", type=int, default=20, help="latency samples (default 20)")
    parser.add_argument("--idle", type=int, default=500, help="idle sockets (default 500)")
    parser.add_argument("--speaking", type=int, default=20, help="speaking sockets (default 20)")
    parser.add_argument("--workers", type=int, default=1, help="Piper workers (default 1)")


def bench(args: argparse.Namespace) -> None:

    baseline = engine_baseline(args.reps)
    print(
        f"engine first chunk ({SENTENCE!r}): p50 {pct(baseline, 0.5) * 1000:.0f} ms, "
        f"p95 {pct(baseline, 0.95) * 1000:.0f} ms (n={len(baseline)})"
    )
    with redis_server() as redis_url, tempfile.TemporaryDirectory() as data_dir:
        env = dict(os.environ, ZSYNTH_REDIS_URL=redis_url, ZSYNTH_DATA_DIR=data_dir, ZSYNTH_LOG_LEVEL="WARNING")
        workers = [
            subprocess.Popen(
                [sys.executable, "-m", "zsynth", "worker"], env=dict(env, ZSYNTH_WORKER_ID=f"bench-{n}"), cwd=ROOT
            )
            for n in range(args.workers)
        ]
        port = free_port()
        front = multiprocessing.get_context("spawn").Process(target=front_main, args=(redis_url, port))
        front.start()
        try:
            time.sleep(1.0)
            assert front.pid is not None
            asyncio.run(run_client(port, front.pid, redis_url, args))
        finally:
            front.terminate()
            front.join(5)
            if front.is_alive():  # the spawned front sometimes misses the SIGTERM; do not wait on it
                front.kill()
                front.join(5)
            for worker in workers:
                worker.terminate()
            for worker in workers:
                worker.wait(15)
