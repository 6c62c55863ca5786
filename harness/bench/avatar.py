"""Benchmark the avatar server: CPU per live 512x512@25fps session, sessions a box holds, interrupt latency.

Runs on this box: a redis-server, one Piper worker and the avatar server (each its own process), plus loopback
WebRTC viewers in this process. Server CPU is read from /proc for the avatar server process alone (its encoder
threads included); the viewers decode video on the same cores, so the ramp's session count is a lower bound.

    .venv/bin/python -m harness.bench avatar [--max-sessions 8] [--window 8] [--interrupts 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from fractions import Fraction
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from harness.avatar import Viewer, patch_loopback_ice
from harness.base import free_port
from harness.measure import proc_stats
from harness.stores import redis_server
from harness.workers import WorkerProcess

ROOT = Path(__file__).resolve().parents[2]

TEXT = " ".join(["The quick brown fox jumps over the lazy dog, and then it runs far away into the woods."] * 4)
SERVER = (
    "import aioice.ice; aioice.ice.get_host_addresses = lambda use_ipv4=True, use_ipv6=True: ['127.0.0.1'];"
    "from zsynth.core.config import Settings; from zsynth.avatar.app import run_avatar; run_avatar(Settings.from_env())"
)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads)."""
    return proc_stats(pid)[0]


def micro_bench(frames: int = 250) -> tuple[float, float]:
    """(render ms, render + VP8 encode ms) per 512x512 frame, in this process."""
    from aiortc.codecs.vpx import Vp8Encoder
    from av import VideoFrame

    from zsynth.avatar.renderers import FrameCue, builtin_avatars
    from zsynth.avatar.renderers.cpu import CpuFaceStream

    stream = builtin_avatars()["ada"].open_stream(1)
    assert isinstance(stream, CpuFaceStream)  # render_sync (the frame without the VideoFrame wrapper) is the CPU face's
    silent = np.zeros(1920, dtype=np.int16)
    cues = [FrameCue(i, i / 25, True, "CDEFB"[i % 5], (i % 7) / 7, silent) for i in range(frames)]
    for cue in cues:  # warm the mouth and eye patch caches
        stream.render_sync(cue)
    start = time.process_time()
    for cue in cues:
        stream.render_sync(cue)
    render_ms = (time.process_time() - start) * 1000 / frames
    encoder = Vp8Encoder()
    start = time.process_time()
    for i, cue in enumerate(cues):
        frame = VideoFrame.from_ndarray(stream.render_sync(cue), format="yuv420p")
        frame.pts, frame.time_base = i * 3600, Fraction(1, 90000)
        encoder.encode(frame)
    return render_ms, (time.process_time() - start) * 1000 / frames


class Session:
    """One viewer with its control socket, speaking again whenever it stops."""

    def __init__(self, http: aiohttp.ClientSession, base: str) -> None:
        self.http, self.base, self.viewer = http, base, Viewer()
        self.events: list[tuple[float, dict[str, Any]]] = []
        self.talk = True
        self.session_id = ""

    async def open(self) -> None:
        async with self.http.post(f"{self.base}/connect", json=await self.viewer.offer()) as resp:
            answer = await resp.json()
            assert resp.status == 200, answer
        self.session_id = answer["session_id"]
        await self.viewer.accept(answer)
        self.ws = await self.http.ws_connect(f"{self.base}{answer['control_url']}")
        self.reader = asyncio.create_task(self._read())
        await self.viewer.wait_connected()
        await self.ws.send_json({"type": "speak", "text": TEXT})

    async def _read(self) -> None:
        async for msg in self.ws:
            event = msg.json()
            self.events.append((time.monotonic(), event))
            if event["type"] == "avatar.stop_talking" and self.talk:
                await self.ws.send_json({"type": "speak", "text": TEXT})

    async def wait_for(self, kind: str, after: float, timeout: float = 60) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t, event in self.events:
                if t >= after and event["type"] == kind:
                    return t
            await asyncio.sleep(0.01)
        raise TimeoutError(kind)

    async def close(self) -> None:
        await self.ws.close()
        self.reader.cancel()
        await self.viewer.close()


async def server_stats(http: aiohttp.ClientSession, base: str) -> dict[str, tuple[int, int]]:
    async with http.get(f"{base}/v1/sessions") as resp:
        data = (await resp.json())["data"]
    return {s["session_id"]: (s["audio_frames_sent"], s["video_frames_sent"]) for s in data}


async def measure(http: aiohttp.ClientSession, base: str, pid: int, window: float) -> tuple[float, float, float]:
    """(server CPU % of one core, slowest session's video fps, slowest audio frames/s) over ``window`` seconds."""
    before, cpu0, t0 = await server_stats(http, base), cpu_seconds(pid), time.monotonic()
    await asyncio.sleep(window)
    after, cpu1, t1 = await server_stats(http, base), cpu_seconds(pid), time.monotonic()
    elapsed = t1 - t0
    fps = [(after[k][1] - before[k][1]) / elapsed for k in before if k in after]
    aps = [(after[k][0] - before[k][0]) / elapsed for k in before if k in after]
    return 100 * (cpu1 - cpu0) / elapsed, min(fps), min(aps)


async def interrupt_latency(session: Session, trials: int) -> list[float]:
    """Seconds from sending interrupt to the first silent audio frame the viewer receives, per trial."""
    results = []
    for _ in range(trials):
        session.talk = False
        mark = time.monotonic()
        await session.ws.send_json({"type": "speak", "text": TEXT})
        await session.wait_for("avatar.start_talking", mark)
        await asyncio.sleep(1.5)
        sent = time.monotonic()
        await session.ws.send_json({"type": "interrupt"})
        await asyncio.sleep(1.0)
        frames = [(t, pcm) for t, pcm in session.viewer.audio if t >= sent]
        silent = next(t for t, pcm in frames if np.abs(pcm).max() < 300)
        results.append(silent - sent)
    session.talk = True
    await session.ws.send_json({"type": "speak", "text": TEXT})
    return results


async def run(args: argparse.Namespace, base: str, pid: int) -> None:
    patch_loopback_ice()
    render_ms, encode_ms = micro_bench()
    print(f"render only:            {render_ms:.3f} ms/frame ({render_ms * 25 / 10:.2f} % of a core at 25 fps)")
    print(f"render + VP8 encode:    {encode_ms:.3f} ms/frame ({encode_ms * 25 / 10:.2f} % of a core at 25 fps)")
    async with aiohttp.ClientSession() as http:
        sessions = [Session(http, base)]
        await sessions[0].open()
        await sessions[0].wait_for("avatar.start_talking", 0)
        t0 = time.monotonic()
        cpu, fps, aps = await measure(http, base, pid, args.window)
        lag, corr = sessions[0].viewer.lip_sync(t0, time.monotonic())
        print(f"lip sync at the viewer: sound {lag:+.0f} ms after the picture (mouth/loudness correlation {corr:.2f})")
        print(
            f"1 live talking session: server CPU {cpu:.1f} % of one core, {fps:.1f} video fps, {aps:.1f} audio frames/s"
        )
        latencies = await interrupt_latency(sessions[0], args.interrupts)
        ms = sorted(x * 1000 for x in latencies)
        print(
            f"interrupt -> silence at the viewer: median {statistics.median(ms):.0f} ms, max {ms[-1]:.0f} ms "
            f"over {len(ms)} trials (target 200 ms)"
        )
        held = 1
        for n in range(2, args.max_sessions + 1):
            session = Session(http, base)
            try:
                await session.open()
            except AssertionError as err:
                print(f"{n} sessions: refused by the server ({err})")
                break
            sessions.append(session)
            await asyncio.sleep(2.0)
            cpu, fps, aps = await measure(http, base, pid, args.window)
            full = fps >= 24.5 and aps >= 49.0
            print(
                f"{n} live talking sessions: server CPU {cpu:.1f} % of one core, slowest {fps:.1f} video fps, "
                f"{aps:.1f} audio frames/s{'' if full else '  <- below full frame rate'}"
            )
            if not full:
                break
            held = n
        per_session = cpu / len(sessions)
        print(f"server CPU per talking session: {per_session:.1f} % of one core (at {len(sessions)} sessions)")
        load = os.getloadavg()[0]
        print(f"sessions held at full frame rate on this {os.cpu_count()}-core box (viewers included): {held}")
        print(f"(1-minute load average at the end: {load:.1f}; other processes on the box lower these figures)")
        print(f"projected for a 2-core box at 80 % load, server only: {int(2 * 80 // per_session)}")
        for session in sessions:
            await session.close()


def healthy(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=1) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--max-sessions", type=int, default=8)
    parser.add_argument("--window", type=float, default=8.0, help="seconds per measurement")
    parser.add_argument("--interrupts", type=int, default=5)


def bench(args: argparse.Namespace) -> None:
    data_dir = Path(os.environ.get("TMPDIR", "/tmp")) / "zsynth-bench-avatar"
    with redis_server() as redis_url:
        worker = WorkerProcess(redis_url, "bench-0", data_dir).wait_ready()
        port = free_port()
        env = dict(
            os.environ,
            ZSYNTH_REDIS_URL=redis_url,
            ZSYNTH_AVATAR_PORT=str(port),
            ZSYNTH_LOG_LEVEL="WARNING",
            ZSYNTH_AVATAR_MAX_SESSIONS=str(args.max_sessions),
            ZSYNTH_API_KEYS="",
            ZSYNTH_API_KEY="",
        )
        server = subprocess.Popen([sys.executable, "-c", SERVER], env=env, cwd=ROOT)
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while not healthy(base):
                assert time.monotonic() < deadline and server.poll() is None, "avatar server did not start"
                time.sleep(0.2)
            asyncio.run(run(args, base, server.pid))
        finally:
            server.terminate()
            server.wait(15)
            worker.stop()
