"""Where a short request's first byte goes: from the client's send to its first audio byte, stage by stage.

    .venv/bin/python -m harness.bench first-byte [--requests 40] [--text "Turning on the kitchen lights."]
        [--transport http|wyoming|both]

It starts a private redis-server, one Piper worker and one front, all exporting their traces over OTLP/HTTP to a
receiver in this process (``ZSYNTH_OTLP_ENDPOINT``; the ``otel`` extra), and sends one streamed request at a time
(raw PCM at the voice's rate, so no encoder runs), each with a ``traceparent`` of its own. The client notes when it
sent the request and when the first audio byte arrived, and the spans of the same trace say where the time between
went. One machine, one clock (Unix time in every process), so the stages add up to the client's figure:

| stage | from | to | what runs there |
|---|---|---|---|
| into the front | client send | the front's request span starts | TCP, HTTP parsing, middleware |
| front before the push | request span starts | ``queued`` starts | auth, validation, text preparation |
| the push | ``queued`` starts | ``queued`` ends | the bounded-push script on Redis (one round trip) |
| queue to claim | ``queued`` ends | the worker's ``claimed`` starts | BLMOVE's wake-up, the claim's writes |
| claim to engine | ``claimed`` starts | the first ``sentence`` starts | executor hop, worker's text stage |
| engine, first piece | first ``sentence`` starts | it ends | Piper speaking the first piece |
| out to the client | first ``sentence`` ends | the client's first byte | publish, pub/sub hop, the front's write, TCP |

Over Wyoming (``--transport wyoming``; the front's listener on a free port) each request is a ``synthesize`` event
on a new connection, as Home Assistant opens one per answer, timed to its first ``audio-chunk``. A Wyoming event
has no ``traceparent``: its ``queued`` span starts a trace of its own, found as the one that began between the
send and the first audio (the requests go one at a time). The listener makes no request span, so the first two
stages are one there: "into the front" runs from the send to the push. ``--transport both`` alternates the two,
request by request, so that both tables share the box's moments.

The worker's spans are the engine thread's, so tracing adds the exporter's work to both processes; the figures are
a breakdown, and the side-by-side with Piper's own server stays ``vs-piper``'s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from wyoming.audio import AudioChunk
from wyoming.client import AsyncTcpClient
from wyoming.tts import Synthesize

from harness.base import free_port, wait_for
from harness.bench.wyoming import answers
from harness.fronts import front_process
from harness.measure import pct
from harness.otlp import Receiver
from harness.stores import RedisServer
from harness.workers import WorkerProcess
from zsynth.core.config import usable_cores

SHORT_COMMAND = "Turning on the kitchen lights."
VOICE = "any-voice"
STAGES = (
    "into the front",
    "front before the push",
    "the push",
    "queue to claim",
    "claim to engine",
    "engine, first piece",
    "out to the client",
)
TRANSPORTS = ("http", "wyoming")
Sent = tuple[str | None, int, int, int]  # a request's trace id (None over Wyoming), sent and first byte (ns), bytes


def by_name(receiver: Receiver, trace_id: str) -> dict[str, list[dict[str, Any]]]:
    """The spans of one trace, by name, each list in start order."""
    named: dict[str, list[dict[str, Any]]] = {}
    for span in sorted((s for s in receiver.spans if s["trace_id"] == trace_id), key=lambda s: s["start"]):
        named.setdefault(span["name"], []).append(span)
    return named


def wyoming_trace(receiver: Receiver, sent_ns: int, first_ns: int) -> str | None:
    """The trace of the Wyoming request sent at ``sent_ns``: the one whose ``queued`` span began before its audio."""
    found = [s["trace_id"] for s in receiver.spans if s["name"] == "queued" and sent_ns <= s["start"] <= first_ns]
    return found[0] if len(found) == 1 else None


def stages(spans: dict[str, list[dict[str, Any]]], sent_ns: int, first_ns: int) -> dict[str, float] | None:
    """The seven stages of one request in milliseconds, or None when a span is missing.

    A Wyoming request has no request span: its "into the front" runs to the push, and "front before the push" is 0.
    """
    queued = spans.get("queued", [None])[0]
    request = next((v[0] for k, v in spans.items() if k.startswith("POST ")), queued)
    claimed = spans.get("claimed", [None])[0]
    sentence = spans.get("sentence", [None])[0]
    if request is None or queued is None or claimed is None or sentence is None:
        return None
    marks = [
        sent_ns,
        request["start"],
        queued["start"],
        queued["end"],
        claimed["start"],
        sentence["start"],
        sentence["end"],
        first_ns,
    ]
    return {name: (marks[i + 1] - marks[i]) / 1e6 for i, name in enumerate(STAGES)}


def one_request(client: httpx.Client, base: str, text: str, rate: int) -> tuple[str, int, int, int]:
    """Stream one request; return its trace id, when it was sent and got its first byte (Unix ns), and its bytes."""
    trace_id = secrets.token_hex(16)
    headers = {"traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"}
    url = f"{base}/v1/text-to-speech/{VOICE}/stream?output_format=pcm_{rate}"
    sent = time.time_ns()
    first = 0
    size = 0
    with client.stream("POST", url, json={"text": text}, headers=headers, timeout=60) as resp:
        resp.raise_for_status()
        for chunk in resp.iter_raw():
            if chunk and not first:
                first = time.time_ns()
            size += len(chunk)
    return trace_id, sent, first, size


async def _one_wyoming(port: int, text: str) -> tuple[int, int, int]:
    sent = time.time_ns()
    first = 0
    size = 0
    async with AsyncTcpClient("127.0.0.1", port, connect_timeout=10.0, read_timeout=60.0) as client:
        await client.write_event(Synthesize(text).event())
        while (event := await client.read_event()) is not None and event.type != "audio-stop":
            if AudioChunk.is_type(event.type):
                first = first or time.time_ns()
                size += len(AudioChunk.from_event(event).audio)
    return sent, first, size


def one_wyoming(port: int, text: str) -> tuple[int, int, int]:
    """One ``synthesize`` on a new connection; when it was sent and its first audio came (Unix ns), and its bytes."""
    return asyncio.run(_one_wyoming(port, text))


def report(rows: list[dict[str, float]], totals: list[float]) -> str:
    """The table of stages: p50, p95 and the share of the p50 total."""
    lines = ["| stage | p50 ms | p95 ms | mean ms |", "|---|---|---|---|"]
    for name in STAGES:
        values = [row[name] for row in rows]
        lines.append(f"| {name} | {pct(values, 50):.1f} | {pct(values, 95):.1f} | {sum(values) / len(values):.1f} |")
    lines.append(
        f"| **client's first byte** | **{pct(totals, 50):.1f}** | {pct(totals, 95):.1f} | "
        f"{sum(totals) / len(totals):.1f} |"
    )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--warm", type=int, default=5, help="requests before the measured ones")
    parser.add_argument("--text", default=SHORT_COMMAND)
    parser.add_argument("--rate", type=int, default=22050, help="pcm rate asked for (the joe voice's own: 22050)")
    parser.add_argument(
        "--threads",
        type=int,
        default=usable_cores(),
        help="the worker's engine threads (default: every core, as a "
        "lone job of zsynth dev's default gets them, and as Piper's own server runs)",
    )
    parser.add_argument("--gap", type=float, default=0.0, help="seconds after each request (a voice assistant's pace)")
    parser.add_argument("--workers", type=int, default=1, help="Piper workers (zsynth dev's default on 2 cores: 2)")
    parser.add_argument(
        "--transport",
        choices=(*TRANSPORTS, "both"),
        default="http",
        help="a streamed HTTP request, a Wyoming synthesize, or both alternately",
    )
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")


def transport_figures(
    sink: Receiver, transport: str, runs: list[Sent], args: argparse.Namespace, load: float
) -> dict[str, Any]:
    """Print one transport's table of stages; its figures."""
    rows: list[dict[str, float]] = []
    totals: list[float] = []
    for trace_id, sent_ns, first_ns, size in runs:
        assert size > 0, f"a {transport} request got no audio"
        trace = trace_id or wyoming_trace(sink, sent_ns, first_ns)
        row = stages(by_name(sink, trace), sent_ns, first_ns) if trace else None
        if row is not None:
            rows.append(row)
            totals.append((first_ns - sent_ns) / 1e6)
    what = f"pcm_{args.rate} stream over HTTP" if transport == "http" else "a Wyoming synthesize, new connection"
    print(
        f"first byte of {args.text!r}, {what}, {len(rows)} requests one at a time, {args.workers} worker(s) "
        f"with {args.threads} engine thread(s), load {load:.2f}"
    )
    print(report(rows, totals))
    return {
        "requests": len(rows),
        "stages_ms": {n: {"p50": pct([r[n] for r in rows], 50), "p95": pct([r[n] for r in rows], 95)} for n in STAGES},
        "first_byte_ms": {"p50": pct(totals, 50), "p95": pct(totals, 95)},
    }


def send_all(
    args: argparse.Namespace, transports: tuple[str, ...], client: httpx.Client, base: str, wyoming_port: int
) -> dict[str, list[Sent]]:
    """The warm-up, then ``--requests`` requests of each transport, alternating, one at a time."""
    sent: dict[str, list[Sent]] = {t: [] for t in transports}

    def one(transport: str) -> Sent:
        if transport == "http":
            return one_request(client, base, args.text, args.rate)
        return (None, *one_wyoming(wyoming_port, args.text))

    if "wyoming" in transports:
        wait_for(lambda: asyncio.run(answers(wyoming_port)), 30, "the Wyoming listener")
    for _ in range(args.warm):
        for transport in transports:
            one(transport)
    for _ in range(args.requests):
        for transport in transports:
            sent[transport].append(one(transport))
            # The spans of a Wyoming request are found by time: keep them apart (and --gap between requests).
            time.sleep(max(0.05, args.gap))
    return sent


def bench(args: argparse.Namespace) -> dict[str, Any]:
    """Time ``--requests`` short requests per transport, one at a time, and break each down by its spans."""
    transports = TRANSPORTS if args.transport == "both" else (args.transport,)
    sent: dict[str, list[Sent]] = {}
    env = {"ZSYNTH_LOG_LEVEL": "WARNING", "OTEL_BSP_SCHEDULE_DELAY": "200", "ZSYNTH_ENGINE_THREADS": str(args.threads)}
    wyoming_port = free_port()
    front_env = dict(env, ZSYNTH_WYOMING_URI=f"tcp://127.0.0.1:{wyoming_port}") if "wyoming" in transports else env
    with Receiver().running() as sink, tempfile.TemporaryDirectory() as data:
        env["ZSYNTH_OTLP_ENDPOINT"] = front_env["ZSYNTH_OTLP_ENDPOINT"] = sink.url
        server = RedisServer().start()
        # Workers of one box share its cores as zsynth dev's do: the same data dir holds their busy marks.
        workers = [WorkerProcess(server.url, f"first-byte-{n}", Path(data), **env) for n in range(args.workers)]
        try:
            for worker in workers:
                worker.wait_ready(180)
            with front_process(server.url, Path(data), **front_env) as (_, base), httpx.Client() as client:
                sent = send_all(args, transports, client, base, wyoming_port)
                traced = [t for runs in sent.values() for t, *_ in runs if t is not None]
                wait_for(lambda: all("sentence" in by_name(sink, t) for t in traced), 30, "the spans of every request")
                time.sleep(1.0)  # the Wyoming requests' spans, found below by time, have been exported by now
        finally:
            for worker in workers:
                worker.stop()
            server.stop()
    load = os.getloadavg()[0]
    figures: dict[str, Any] = {"text": args.text, "engine_threads": args.threads, "load_average": load}
    for transport, runs in sent.items():
        figures[transport] = transport_figures(sink, transport, runs, args, load)
    if args.transport == "http":  # the figures' old shape, which docs/bench-first-byte.json keeps
        figures.update(figures.pop("http"))
    if args.out is not None:
        args.out.write_text(json.dumps(figures, indent=1) + "\n")
    return figures
