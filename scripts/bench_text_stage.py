#!/usr/bin/env python3
"""What hostile text costs: Piper on one long word, the text stage's normalization, and the front's event loop.

Three parts, each bounded (``--parts`` picks some):

* ``words``: Piper speaks one word of 50 to 300 characters, each in a fresh process (time, peak RSS growth), and a
  2,000-character word as the front hands it to a worker (cut at Piper's bound), up to its first chunk. These are
  the figures behind Piper's word bound (zsynth/core/text/sentences.py ENGINE_WORD_CHARS).
* ``normalize``: CPU time of normalization for 10,000 and 20,000 characters of hostile runs: linear work doubles.
* ``front``: a redis-server, one Piper worker and a front on loopback; ``GET /healthz`` every 5 ms on a kept-alive
  connection while ``{"text": "9" * 10000, "apply_text_normalization": "on"}`` is posted to ``/stream``. The
  slowest ping beyond the median is the front's event-loop stall; the status is what the client got.

Usage (from the repository root)::

    .venv/bin/python scripts/bench_text_stage.py [--parts words,normalize,front]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers import WorkerProcess, front_process, redis_server  # noqa: E402

WORD = "1st2nd3rd4th"
FRONT_CASES = [
    ("an ordinary sentence", {"text": "The quick brown fox jumps over the lazy dog."}),
    ("10,000 digits, apply_text_normalization on", {"text": "9" * 10_000, "apply_text_normalization": "on"}),
]
HOSTILE = ["9", "1,", "1.", "$1", "12:", "#1", "1st", ",000", "a.", "1st2nd$3.4%#5 6:7,"]

# Run in a fresh process per case, so each peak RSS is that case's own.
_PIPER_CHILD = r"""
import json, resource, sys, time
from workers.engines.base import VoiceSpec
from workers.engines.piper import PiperEngine
engine = PiperEngine(1)
engine.warm_up()
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
text = sys.argv[1]
if sys.argv[2] == "stage":
    import asyncio
    from zsynth.core.text.prepare import TextOptions, prepare
    spoken = asyncio.run(prepare(text, TextOptions(), "piper", None))
    text = spoken.text
started = time.perf_counter()
first = None
for chunk in engine.synthesize(text, VoiceSpec("joe"), {}, lambda: False):
    first = time.perf_counter() - started
    audio = len(chunk.pcm) / engine.sample_rate
    break
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"s": first, "audio_s": audio, "rss_mb": (peak - base) / 1024}))
"""


def _piper(text: str, mode: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", _PIPER_CHILD, text, mode], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    if out.returncode:
        raise SystemExit(out.stderr[-2000:])
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def words() -> None:
    print("Piper, one word spoken alone (fresh process each):")
    for unit in (WORD, "9"):
        for length in (50, 100, 200, 300):
            text = (unit * (length // len(unit) + 1))[:length]
            r = _piper(text, "raw")
            audio, rss = f"{r['audio_s']:5.1f} s of audio", f"RSS +{r['rss_mb']:.0f} MB"
            print(f"  {unit!r:16} {length:5d} chars  {r['s']:6.2f} s  {audio}  {rss}")
    r = _piper(WORD * 166, "stage")
    print(f"  2,000-character word through the text stage: first chunk {r['s']:.2f} s, RSS +{r['rss_mb']:.0f} MB")


def _cpu_s(text: str) -> float:
    from zsynth.core.text.normalize import normalize_text

    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        try:
            normalize_text(text)
        except Exception:  # the old normalizer raised on long numbers; the time is what counts here
            pass
        best = min(best, time.process_time() - started)
        if best > 1.0:
            break  # slow enough to tell; no need to repeat it
    return best


def normalize() -> None:
    print("Normalization, CPU time (best of 3):")
    for unit in HOSTILE:
        ten, twenty = ((unit * (n // len(unit) + 1))[:n] for n in (10_000, 20_000))
        a = _cpu_s(ten)
        b = _cpu_s(twenty) if a < 5 else float("nan")
        print(f"  {unit!r:22} 10k chars {a * 1000:8.1f} ms   20k chars {b * 1000:8.1f} ms   x{b / a:.2f}")


async def _stall(base: str, body: dict[str, str]) -> tuple[int, float, float]:
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as pings, aiohttp.ClientSession(timeout=timeout) as posts:
        latencies: list[float] = []
        done = asyncio.Event()

        async def ping() -> None:
            while not done.is_set():
                started = time.perf_counter()
                async with pings.get(base + "/healthz") as resp:
                    await resp.read()
                latencies.append(time.perf_counter() - started)
                await asyncio.sleep(0.005)

        pinger = asyncio.create_task(ping())
        await asyncio.sleep(0.5)  # a baseline of quiet pings
        async with posts.post(base + "/v1/text-to-speech/joe/stream?output_format=pcm_22050", json=body) as resp:
            status = resp.status
            if status == 200 and len(body["text"]) < 200:
                await resp.read()  # a short one is read whole
            elif status == 200:
                await resp.content.readany()  # 10,000 nines would take an hour to say: the first audio will do
        done.set()
        await pinger
    return status, statistics.median(latencies), max(latencies)


def front() -> None:
    with tempfile.TemporaryDirectory() as tmp, redis_server() as redis_url:
        worker = WorkerProcess(redis_url, "bench-text", Path(tmp)).wait_ready()
        try:
            with front_process(redis_url, Path(tmp)) as (_, base):
                # An ordinary sentence first: the stall any request shows on this box, to set the other against.
                results = [(label, asyncio.run(_stall(base, body))) for label, body in FRONT_CASES]
        finally:
            worker.stop()
    print("Front, POST /stream while GET /healthz is timed every 5 ms (stall: slowest ping beyond the median):")
    for label, (status, median, worst) in results:
        stall, ping = (worst - median) * 1000, median * 1000
        print(f"  {label:44} answer {status}  stall {stall:7.1f} ms  (median ping {ping:.1f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="words,normalize,front", help="comma-separated: words, normalize, front")
    parts = parser.parse_args().parts.split(",")
    for name, run in (("words", words), ("normalize", normalize), ("front", front)):
        if name in parts:
            run()


if __name__ == "__main__":
    main()
