#!/usr/bin/env python3
"""What TLS and the OpenAI route add to the first byte of speech, on loopback.

Starts a redis-server, one Piper worker and two fronts on free loopback ports: one plain, one with TLS (a
throwaway CA made here, trusted by this client only). Then, interleaved so drift hits every case alike, it sends
the same short text and times the first audio byte (request sent -> first body bytes read):

* ElevenLabs ``/stream`` over http and over https, each with a new connection per request (the handshake counts,
  as for a one-shot client) and on a kept-alive connection;
* OpenAI ``/v1/audio/speech`` against ElevenLabs ``/stream`` on the plain front, in pcm (24 kHz) and mp3;
* OpenAI's aac (encoded in the front from the worker's pcm_24000) against the same ElevenLabs pcm_24000;
* ``GET /healthz`` on a new connection over http and https: the handshake alone, without the engine's jitter.

Bounded: ``--requests`` per case (default 20), a 60 s timeout each. Usage::

    .venv/bin/python -m harness.bench front-doors [--requests 20] [--engine piper|simulated]
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from harness.fronts import front_process
from harness.stores import redis_server
from harness.tls_certs import CertAuthority
from harness.workers import WorkerProcess

ROOT = Path(__file__).resolve().parents[2]

TEXT = "The first sentence is short. The second one is a little longer."
TIMEOUT = aiohttp.ClientTimeout(total=60)


async def first_byte(session: aiohttp.ClientSession, url: str, body: dict[str, Any] | None) -> float:
    """Seconds from sending the request to the first body bytes (a GET when no body); the rest is read after."""
    start = time.perf_counter()
    async with session.request("GET" if body is None else "POST", url, json=body) as resp:
        assert resp.status == 200, await resp.text()
        chunk = await resp.content.readany()
        elapsed = time.perf_counter() - start
        assert chunk
        await resp.read()
    return elapsed


def line(label: str, samples: list[float], base: list[float] | None = None) -> str:
    p50 = statistics.median(samples) * 1e3
    p90 = statistics.quantiles(samples, n=10)[8] * 1e3
    added = f"   adds {p50 - statistics.median(base) * 1e3:+7.2f} ms p50" if base else ""
    return f"  {label:<44} p50 {p50:7.2f} ms   p90 {p90:7.2f} ms{added}"


async def run(plain: str, tls: str, context: ssl.SSLContext, requests: int, engine: str) -> None:
    el = {"text": TEXT}
    keep_plain = aiohttp.ClientSession(timeout=TIMEOUT)
    keep_tls = aiohttp.ClientSession(timeout=TIMEOUT, connector=aiohttp.TCPConnector(ssl=context))

    def fresh_plain() -> aiohttp.ClientSession:
        return aiohttp.ClientSession(timeout=TIMEOUT, connector=aiohttp.TCPConnector(force_close=True))

    def fresh_tls() -> aiohttp.ClientSession:
        return aiohttp.ClientSession(timeout=TIMEOUT, connector=aiohttp.TCPConnector(ssl=context, force_close=True))

    stream = "/v1/text-to-speech/joe/stream"
    speech = "/v1/audio/speech"
    cases: dict[str, tuple[Callable[[], aiohttp.ClientSession] | aiohttp.ClientSession, str, dict[str, Any] | None]]
    cases = {
        "GET /healthz http, new connection": (fresh_plain, plain + "/healthz", None),
        "GET /healthz https, new connection": (fresh_tls, tls + "/healthz", None),
        "http, new connection": (fresh_plain, plain + stream + "?output_format=mp3_44100_128", el),
        "https, new connection": (fresh_tls, tls + stream + "?output_format=mp3_44100_128", el),
        "http, kept alive": (keep_plain, plain + stream + "?output_format=mp3_44100_128", el),
        "https, kept alive": (keep_tls, tls + stream + "?output_format=mp3_44100_128", el),
        "ElevenLabs /stream pcm_24000": (keep_plain, plain + stream + "?output_format=pcm_24000", el),
        "OpenAI /v1/audio/speech pcm": (
            keep_plain,
            plain + speech,
            {"model": "tts-1", "voice": "joe", "input": TEXT, "response_format": "pcm"},
        ),
        "OpenAI /v1/audio/speech aac": (
            keep_plain,
            plain + speech,
            {"model": "tts-1", "voice": "joe", "input": TEXT, "response_format": "aac"},
        ),
        "ElevenLabs /stream mp3_44100_128": (keep_plain, plain + stream + "?output_format=mp3_44100_128", el),
        "OpenAI /v1/audio/speech mp3": (keep_plain, plain + speech, {"model": "tts-1", "voice": "joe", "input": TEXT}),
    }
    samples: dict[str, list[float]] = {name: [] for name in cases}
    try:
        for round_ in range(requests + 2):  # two warm-up rounds are dropped
            for name, (session, url, body) in cases.items():
                if callable(session):
                    async with session() as one_shot:
                        value = await first_byte(one_shot, url, body)
                else:
                    value = await first_byte(session, url, body)
                if round_ >= 2:
                    samples[name].append(value)
    finally:
        await keep_plain.close()
        await keep_tls.close()
    print(f"first byte on loopback, one {engine} worker, {requests} requests per case, interleaved")
    print("TLS alone (no synthesis):")
    print(line("GET /healthz http, new connection", samples["GET /healthz http, new connection"]))
    print(
        line(
            "GET /healthz https, new connection",
            samples["GET /healthz https, new connection"],
            samples["GET /healthz http, new connection"],
        )
    )
    print("TLS on speech (ElevenLabs /stream, mp3_44100_128):")
    print(line("http, new connection", samples["http, new connection"]))
    print(line("https, new connection", samples["https, new connection"], samples["http, new connection"]))
    print(line("http, kept alive", samples["http, kept alive"]))
    print(line("https, kept alive", samples["https, kept alive"], samples["http, kept alive"]))
    print("OpenAI route against the ElevenLabs route (plain http, kept alive):")
    for el_name, oa_name in (
        ("ElevenLabs /stream pcm_24000", "OpenAI /v1/audio/speech pcm"),
        ("ElevenLabs /stream mp3_44100_128", "OpenAI /v1/audio/speech mp3"),
    ):
        print(line(el_name, samples[el_name]))
        print(line(oa_name, samples[oa_name], samples[el_name]))
        if oa_name.endswith("pcm"):
            # aac is encoded in the front from the same pcm_24000 the worker makes for the pcm cases.
            print(line("OpenAI /v1/audio/speech aac", samples["OpenAI /v1/audio/speech aac"], samples[el_name]))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--requests", type=int, default=20, help="requests per case (default 20)")
    parser.add_argument(
        "--engine",
        choices=("piper", "simulated"),
        default="piper",
        help="piper (real speech) or simulated (fixed chunk timing, so front costs stand out)",
    )


def bench(args: argparse.Namespace) -> None:
    engine_env = {"ZSYNTH_ENGINE": args.engine, "ZSYNTH_LOAD_TEST_ONLY": str(args.engine == "simulated").lower()}
    with redis_server() as redis_url, tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        ca = CertAuthority.create(data)
        ca.issue(data / "server.pem", data / "server.key")
        context = ssl.create_default_context(cafile=str(ca.cert_file))
        tls_env = {"ZSYNTH_TLS_CERT_FILE": str(data / "server.pem"), "ZSYNTH_TLS_KEY_FILE": str(data / "server.key")}
        worker = WorkerProcess(redis_url, "bench-0", data, **engine_env)
        try:
            worker.wait_ready()
            with (
                front_process(redis_url, data, ZSYNTH_LOG_LEVEL="WARNING") as (_, plain),
                front_process(redis_url, data, ZSYNTH_LOG_LEVEL="WARNING", **tls_env) as (_, tls_base),
            ):
                tls = tls_base.replace("http://", "https://")
                asyncio.run(run(plain, tls, context, args.requests, args.engine))
        finally:
            worker.stop()
