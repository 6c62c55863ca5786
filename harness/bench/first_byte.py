"""Where a short request's first byte goes: from the client's send to its first audio byte, stage by stage.

    .venv/bin/python -m harness.bench first-byte [--requests 40] [--text "Turning on the kitchen lights."]

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

The worker's spans are the engine thread's, so tracing adds the exporter's work to both processes; the figures are
a breakdown, and the side-by-side with Piper's own server stays ``vs-piper``'s.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from harness.base import wait_for
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


def by_name(receiver: Receiver, trace_id: str) -> dict[str, list[dict[str, Any]]]:
    """The spans of one trace, by name, each list in start order."""
    named: dict[str, list[dict[str, Any]]] = {}
    for span in sorted((s for s in receiver.spans if s["trace_id"] == trace_id), key=lambda s: s["start"]):
        named.setdefault(span["name"], []).append(span)
    return named


def stages(spans: dict[str, list[dict[str, Any]]], sent_ns: int, first_ns: int) -> dict[str, float] | None:
    """The seven stages of one request in milliseconds, or None when a span is missing."""
    request = next((v[0] for k, v in spans.items() if k.startswith("POST ")), None)
    queued = spans.get("queued", [None])[0]
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
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")


def bench(args: argparse.Namespace) -> dict[str, Any]:

    rows: list[dict[str, float]] = []
    totals: list[float] = []
    env = {"ZSYNTH_LOG_LEVEL": "WARNING", "OTEL_BSP_SCHEDULE_DELAY": "200", "ZSYNTH_ENGINE_THREADS": str(args.threads)}
    with Receiver().running() as sink, tempfile.TemporaryDirectory() as data:
        env["ZSYNTH_OTLP_ENDPOINT"] = sink.url
        server = RedisServer().start()
        worker = WorkerProcess(server.url, "first-byte", Path(data), **env)
        try:
            worker.wait_ready(180)
            with front_process(server.url, Path(data), **env) as (_, base), httpx.Client() as client:
                for _ in range(args.warm):
                    one_request(client, base, args.text, args.rate)
                sent = [one_request(client, base, args.text, args.rate) for _ in range(args.requests)]
                wait_for(
                    lambda: all("sentence" in by_name(sink, t) for t, *_ in sent), 30, "the spans of every request"
                )
        finally:
            worker.stop()
            server.stop()
    for trace_id, sent_ns, first_ns, size in sent:
        assert size > 0, "a request got no audio"
        row = stages(by_name(sink, trace_id), sent_ns, first_ns)
        if row is not None:
            rows.append(row)
            totals.append((first_ns - sent_ns) / 1e6)
    load = os.getloadavg()[0]
    print(
        f"first byte of {args.text!r}, pcm_{args.rate}, {len(rows)} requests one at a time, one worker with "
        f"{args.threads} engine thread(s), load {load:.2f}"
    )
    print(report(rows, totals))
    figures = {
        "text": args.text,
        "requests": len(rows),
        "engine_threads": args.threads,
        "load_average": load,
        "stages_ms": {n: {"p50": pct([r[n] for r in rows], 50), "p95": pct([r[n] for r in rows], 95)} for n in STAGES},
        "first_byte_ms": {"p50": pct(totals, 50), "p95": pct(totals, 95)},
    }
    if args.out is not None:
        args.out.write_text(json.dumps(figures, indent=1) + "\n")
    return figures
