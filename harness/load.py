#!/usr/bin/env python3
"""Load generator for a running zsynth stack on loopback.

Drives N concurrent clients, bounded by a request count and a wall-clock limit, and reports throughput, time to
first audio (p50/p95/p99), errors by kind, and the CPU and memory of the processes named with ``--pid``. Only
loopback targets are accepted. Modes (one request is one segment of speech):

* ``http``: a streamed ``POST /v1/text-to-speech/{voice}/stream`` per request;
* ``ws``: a voice agent: each client keeps one ``multi-stream-input`` socket open and speaks each turn in a new
  context (text with a flush, then ``close_context``; the turn ends at that context's ``isFinal``);
* ``ws-connect``: a fresh ``stream-input`` socket per turn (connect, text with a flush, EOS, close 1000), which adds a
  WebSocket handshake and authentication to every segment;
* ``avatar``: token creation on the avatar server (signalling needs a WebRTC peer; see the ``avatar``
  benchmark).

    .venv/bin/python -m harness.bench loadgen --base http://127.0.0.1:8000 --clients 8 --requests 200 --duration 60 \\
        --pid front=1234 --pid redis=1200
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import aiohttp

from harness.measure import pct, proc_stats

LOOPBACK = ("127.0.0.1", "localhost", "::1")
DEFAULT_TEXT = "A short segment of realtime speech, about ten words long."


@dataclass
class Results:
    """What the clients saw."""

    ttfa: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    audio_bytes: int = 0
    done: int = 0
    job_ids: list[str] = field(default_factory=list)


async def http_once(
    session: aiohttp.ClientSession, args: argparse.Namespace, results: Results, client: ClientState
) -> None:
    """One streamed synthesis request."""
    start = time.perf_counter()
    url = f"{args.base}/v1/text-to-speech/{args.voice}/stream?output_format={args.format}"
    async with session.post(url, json={"text": args.text}, headers=args.headers) as resp:
        if resp.status != 200:
            results.errors[f"http_{resp.status}"] += 1
            await resp.read()
            return
        first = True
        async for piece in resp.content.iter_any():
            if first:
                results.ttfa.append(time.perf_counter() - start)
                first = False
            results.audio_bytes += len(piece)
        results.job_ids.append(resp.headers.get("history-item-id", ""))
        results.done += 1


def audio_frame(data: str) -> tuple[int, dict[str, Any]]:
    """(decoded audio bytes, the other fields) of a server frame, without decoding its base64.

    The load generator must not spend the CPU it measures: the audio's size follows from the base64 length, and only
    the small rest of the frame is parsed. Frames in another shape fall back to a full parse.
    """
    if data.startswith(AUDIO_PREFIX):
        end = data.index('"', len(AUDIO_PREFIX))
        encoded = data[len(AUDIO_PREFIX) : end]
        rest = json.loads("{" + data[end + 2 :]) if data[end + 1] == "," else {}
        return len(encoded) * 3 // 4 - encoded.count("=", -2), rest
    fields = json.loads(data)
    audio = fields.pop("audio", None)
    return (len(base64.b64decode(audio)) if audio else 0), fields


AUDIO_PREFIX = '{"audio":"'


async def ws_connect_once(
    session: aiohttp.ClientSession, args: argparse.Namespace, results: Results, client: ClientState
) -> None:
    """One turn on its own stream-input socket: connect, BOS, the text with a flush, EOS; read until closed."""
    scheme_base = args.base.replace("http://", "ws://", 1)
    url = f"{scheme_base}/v1/text-to-speech/{args.voice}/stream-input?output_format={args.format}&auto_mode=true"
    async with session.ws_connect(url, headers=args.headers) as ws:
        await ws.send_json({"text": " "})
        start = time.perf_counter()
        await ws.send_json({"text": args.text + " ", "flush": True})
        await ws.send_json({"text": ""})
        first = True
        async for message in ws:
            if message.type != aiohttp.WSMsgType.TEXT:
                break
            size, fields = audio_frame(message.data)
            if size:
                if first:
                    results.ttfa.append(time.perf_counter() - start)
                    first = False
                results.audio_bytes += size
            if "error" in fields:
                results.errors[str(fields["error"])] += 1
                return
        if ws.close_code == 1000:
            results.done += 1
        else:
            results.errors[f"close_{ws.close_code}"] += 1


class TurnFailed(Exception):
    """A turn ended with an error the server reported (already counted in the results)."""


@dataclass
class ClientState:
    """What one simulated client keeps between its requests: its open agent socket, if any."""

    agent: AgentSocket | None = None

    async def close(self) -> None:
        """Close the agent socket."""
        if self.agent is not None:
            await self.agent.ws.close()
            self.agent = None


class AgentSocket:
    """A voice agent's one multi-stream-input socket, kept open across turns; each turn is a new context."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.turns = 0

    async def turn(self, args: argparse.Namespace, results: Results) -> None:
        """Speak one segment in a fresh context and close it; done at that context's isFinal."""
        self.turns += 1
        context = f"turn-{self.turns}"
        start = time.perf_counter()
        await self.ws.send_str(json.dumps({"text": args.text + " ", "context_id": context, "flush": True}))
        await self.ws.send_str(json.dumps({"context_id": context, "close_context": True}))
        first = True
        while True:
            message = await self.ws.receive()
            if message.type != aiohttp.WSMsgType.TEXT:
                results.errors[f"close_{self.ws.close_code}"] += 1
                raise TurnFailed("the socket closed mid-turn")
            size, fields = audio_frame(message.data)
            if "error" in fields:
                results.errors[str(fields["error"])] += 1
                raise TurnFailed(str(fields["error"]))
            if fields.get("contextId") != context:
                continue
            if size:
                if first:
                    results.ttfa.append(time.perf_counter() - start)
                    first = False
                results.audio_bytes += size
            if fields.get("isFinal"):
                results.done += 1
                return


async def ws_once(
    session: aiohttp.ClientSession, args: argparse.Namespace, results: Results, client: ClientState
) -> None:
    """One turn on this client's long-lived multi-stream-input socket (opened on first use, again after a failure)."""
    agent = client.agent
    if agent is None or agent.ws.closed:
        scheme_base = args.base.replace("http://", "ws://", 1)
        url = f"{scheme_base}/v1/text-to-speech/{args.voice}/multi-stream-input?output_format={args.format}"
        ws = await session.ws_connect(url, headers=args.headers)
        await ws.send_str(json.dumps({"text": " "}))  # the socket's first message: settings, no text to speak
        agent = client.agent = AgentSocket(ws)
    try:
        await agent.turn(args, results)
    except BaseException:
        await client.close()
        raise


async def avatar_once(
    session: aiohttp.ClientSession, args: argparse.Namespace, results: Results, client: ClientState
) -> None:
    """Avatar load: create a token and list sessions (signalling needs a WebRTC peer; see bench_avatar)."""
    start = time.perf_counter()
    async with session.post(f"{args.base}/v1/streaming.create_token", json={}, headers=args.headers) as resp:
        await resp.read()
        if resp.status not in (200, 501):
            results.errors[f"http_{resp.status}"] += 1
            return
    results.ttfa.append(time.perf_counter() - start)
    results.done += 1


MODES = {"http": http_once, "ws": ws_once, "ws-connect": ws_connect_once, "avatar": avatar_once}


async def run_load(args: argparse.Namespace) -> tuple[Results, float]:
    """Run the clients until the request budget or the time limit is spent."""
    results = Results()
    remaining = args.requests
    deadline = time.monotonic() + args.duration
    once = MODES[args.mode]

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal remaining
        state = ClientState()
        try:
            while remaining > 0 and time.monotonic() < deadline:
                remaining -= 1
                try:
                    await asyncio.wait_for(once(session, args, results, state), args.timeout)
                except TimeoutError:
                    results.errors["timeout"] += 1
                except aiohttp.ClientError as err:
                    results.errors[type(err).__name__] += 1
                except TurnFailed:
                    pass  # counted where it happened
        finally:
            await state.close()

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        start = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(args.clients)))
        return results, time.perf_counter() - start


def bytes_per_second(fmt: str) -> float:
    """Audio bytes per second of an uncompressed format (pcm/ulaw/alaw); 0 when compressed."""
    family, rate = fmt.split("_")[:2]
    if family == "pcm":
        return int(rate) * 2
    if family in ("ulaw", "alaw"):
        return int(rate)
    return 0.0


def report(
    args: argparse.Namespace, results: Results, wall: float, procs: dict[str, tuple[int, float, int]]
) -> dict[str, Any]:
    """Summarise and print; return the summary (also printed as JSON with --json)."""
    per_second = bytes_per_second(args.format)
    audio_s = results.audio_bytes / per_second if per_second else None
    summary: dict[str, Any] = {
        "mode": args.mode,
        "clients": args.clients,
        "completed": results.done,
        "wall_s": round(wall, 3),
        "requests_per_s": round(results.done / wall, 2) if wall else 0,
        "audio_s": round(audio_s, 2) if audio_s is not None else None,
        "audio_s_per_wall_s": round(audio_s / wall, 2) if audio_s is not None and wall else None,
        "ttfa_ms": {q: round(pct(results.ttfa, q) * 1000, 1) for q in (50, 95, 99)},
        "errors": dict(results.errors),
        "processes": {},
    }
    for name, (pid, cpu_before, _) in procs.items():
        cpu_after, rss = proc_stats(pid)
        entry = {"cpu_s": round(cpu_after - cpu_before, 3), "cpu_pct": round(100 * (cpu_after - cpu_before) / wall, 1)}
        entry["rss_mib"] = round(rss / 2**20, 1)
        if audio_s:
            entry["cpu_ms_per_audio_s"] = round(1000 * (cpu_after - cpu_before) / audio_s, 2)
        summary["processes"][name] = entry
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"mode {args.mode}: {results.done} completed in {wall:.1f}s with {args.clients} clients "
            f"({summary['requests_per_s']} req/s)"
        )
        if audio_s is not None:
            print(f"  audio delivered: {audio_s:.1f}s ({summary['audio_s_per_wall_s']} audio-s per wall-s)")
        t = summary["ttfa_ms"]
        print(f"  time to first audio: p50 {t[50]} ms  p95 {t[95]} ms  p99 {t[99]} ms")
        print(f"  errors: {dict(results.errors) or 'none'}")
        for name, entry in summary["processes"].items():
            print(f"  {name}: {entry}")
    return summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Command-line options."""
    parser.add_argument("--base", default="http://127.0.0.1:8000")
    parser.add_argument("--mode", choices=sorted(MODES), default="http")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=100, help="total requests (the bound on count)")
    parser.add_argument("--duration", type=float, default=60.0, help="wall-clock limit in seconds")
    parser.add_argument("--timeout", type=float, default=60.0, help="limit per request")
    parser.add_argument("--text", default=DEFAULT_TEXT)
    parser.add_argument("--voice", default="loadgen")
    parser.add_argument("--format", default="pcm_24000")
    parser.add_argument("--key", default=os.environ.get("ZSYNTH_LOADGEN_KEY"), help="API key (default: env)")
    parser.add_argument("--pid", action="append", default=[], help="NAME=PID of a process to measure")
    parser.add_argument("--json", action="store_true", help="print one JSON summary line")


def _settle(args: argparse.Namespace, error: Callable[[str], object]) -> argparse.Namespace:
    """Refuse a base that is not on loopback, and add the request headers."""
    host = urlparse(args.base).hostname
    if host not in LOOPBACK:
        error(f"--base must be a loopback address, not {host!r}")
    args.headers = {"xi-api-key": args.key} if args.key else {}
    return args


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options of a load run, from ``argv`` (a benchmark that drives a load of its own builds them so)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return _settle(parser.parse_args(argv), parser.error)


def bench(args: argparse.Namespace) -> dict[str, Any]:
    """Run the load and report its summary; a run in which no request completed fails."""
    _settle(args, args.parser.error)
    procs: dict[str, tuple[int, float, int]] = {}
    for item in args.pid:
        name, _, pid = item.partition("=")
        cpu, rss = proc_stats(int(pid))
        procs[name] = (int(pid), cpu, rss)
    results, wall = asyncio.run(run_load(args))
    summary = report(args, results, wall, procs)
    if not summary["completed"]:
        raise SystemExit("loadgen: no request completed")
    return summary
