"""Realtime agent voices per GPU: the accounting of the capacity run (underruns, first audio, the figure).

A realtime agent socket speaks turns of sentences; each turn's audio plays back continuously from its first chunk.
A chunk *underruns* when it arrives after the playback reached the point where it starts (the listener hears a gap).
Per number of concurrent sockets N, the run records every stream's underruns and every turn's first audio (from the
turn's first text to its first audio chunk). The capacity figure is the largest N whose streams had no underrun and
whose first-audio p95 is at most :data:`FIRST_AUDIO_P95_S`.

The run (``python scripts/gpu_capacity.py``) starts Redis, one worker and one front, then for each N in
``--levels`` runs N agent sockets at once (:func:`agent`): stream-input with ``auto_mode``, each turn's sentences sent
one ahead of the playback, the next turn after the playback ends. ``--engine simulated --rtf R`` runs it on the
simulated engine (load tests only), whose worker holds ``R * chunk`` seconds per chunk; ``--engine turbo`` on the
GPU engine with the checkpoint in ``ZSYNTH_TURBO_CHECKPOINT``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

FIRST_AUDIO_P95_S: Final = 0.300


@dataclasses.dataclass(frozen=True, slots=True)
class Chunk:
    """One audio chunk of a turn: when it arrived (seconds, any clock) and how long it plays."""

    arrived: float
    seconds: float


@dataclasses.dataclass(frozen=True, slots=True)
class Turn:
    """One turn of a stream: when its first text was sent, and its audio chunks in order."""

    sent: float
    chunks: Sequence[Chunk]


@dataclasses.dataclass(frozen=True, slots=True)
class TurnPlayback:
    """What a listener got from one turn."""

    first_audio_s: float  # first chunk's arrival minus the turn's first text
    underruns: int  # chunks that arrived after the playback reached them
    starved_s: float  # silence heard inside the turn, summed


def play(turn: Turn) -> TurnPlayback:
    """Play a turn's chunks back to back from the first arrival; a late chunk restarts the playback when it lands."""
    if not turn.chunks:
        return TurnPlayback(first_audio_s=float("inf"), underruns=0, starved_s=0.0)
    playhead = turn.chunks[0].arrived  # where the playback will be when it needs the next chunk
    underruns = 0
    starved = 0.0
    for chunk in turn.chunks:
        if chunk.arrived > playhead:
            if chunk is not turn.chunks[0]:
                underruns += 1
                starved += chunk.arrived - playhead
            playhead = chunk.arrived
        playhead += chunk.seconds
    return TurnPlayback(first_audio_s=turn.chunks[0].arrived - turn.sent, underruns=underruns, starved_s=starved)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0-1) by nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


@dataclasses.dataclass(frozen=True, slots=True)
class LevelResult:
    """One level of concurrency: N streams, their underruns and first-audio figures."""

    streams: int
    underruns: tuple[int, ...]  # per stream
    first_audio_p50_s: float
    first_audio_p95_s: float

    @property
    def passes(self) -> bool:
        return sum(self.underruns) == 0 and self.first_audio_p95_s <= FIRST_AUDIO_P95_S


def level(streams: Sequence[Sequence[Turn]]) -> LevelResult:
    """Account one level: every stream's turns played back."""
    firsts: list[float] = []
    underruns: list[int] = []
    for turns in streams:
        played = [play(turn) for turn in turns]
        underruns.append(sum(p.underruns for p in played))
        firsts.extend(p.first_audio_s for p in played)
    return LevelResult(
        streams=len(streams),
        underruns=tuple(underruns),
        first_audio_p50_s=percentile(firsts, 0.5),
        first_audio_p95_s=percentile(firsts, 0.95),
    )


def capacity(levels: Iterable[LevelResult]) -> int:
    """The largest N that passes with every smaller level run also passing (0 when the first fails)."""
    best = 0
    for result in sorted(levels, key=lambda r: r.streams):
        if not result.passes:
            break
        best = result.streams
    return best


def expected_streams(
    rtf: float, chunk_audio_s: float, sentence_audio_s: float, first_audio_p95_s: float = FIRST_AUDIO_P95_S
) -> int:
    """What one worker serving one job at a time allows at a given RTF: the throughput bound (N streams need
    N * rtf of the worker per second of audio) and the first-audio bound (a turn's first sentence may queue behind
    one sentence job of each of the other N - 1 streams, each ``rtf * sentence_audio_s`` long, before its own first
    chunk, ``rtf * chunk_audio_s``)."""
    if rtf <= 0:
        raise ValueError("rtf must be positive")
    chunk_s = rtf * chunk_audio_s
    job_s = rtf * sentence_audio_s
    if chunk_s > first_audio_p95_s:
        return 0
    by_throughput = int(1 / rtf + 1e-9)
    by_latency = 1 + int((first_audio_p95_s - chunk_s) / job_s + 1e-9)
    return min(by_throughput, by_latency)


def simulated_sentence_s(chunk_audio_s: float, words_per_second: float = 2.5) -> float:
    """The longest of :data:`SENTENCES` as the simulated engine speaks it (whole chunks)."""
    words = max(len(text.split()) for text in SENTENCES)
    return math.ceil(words / words_per_second / chunk_audio_s) * chunk_audio_s


def summary_lines(levels: Mapping[int, LevelResult]) -> list[str]:
    """One line per level and the figure, as the run prints them."""
    lines = [
        f"N={n:3d}  underruns {sum(r.underruns):4d} (streams with any: {sum(1 for u in r.underruns if u)})  "
        f"first audio p50 {1000 * r.first_audio_p50_s:6.0f} ms  p95 {1000 * r.first_audio_p95_s:6.0f} ms  "
        f"{'pass' if r.passes else 'FAIL'}"
        for n, r in sorted(levels.items())
    ]
    lines.append(f"capacity: {capacity(levels.values())} realtime voices (zero underruns, first audio p95 <= 300 ms)")
    return lines


# ----- the live run: N agent sockets through a real front, Redis and worker ---------------------------------------

SENTENCES: Final = (
    "Thanks for calling, I can help you with that order today.",
    "Your parcel left our warehouse this morning and is on its way.",
    "It should arrive on Friday before noon at the latest.",
    "Is there anything else I can do for you right now?",
)
PAUSE_S: Final = 0.4  # the user's turn between two of the agent's


def _visible(text: str) -> int:
    return sum(1 for ch in text if not ch.isspace())


async def agent(base: str, session: Any, turns: int, sentences: int, sample_rate: int) -> list[Turn]:
    """One realtime agent socket (stream-input, auto_mode): each turn's next sentence is sent when the previous
    one's audio starts playing (text one sentence ahead of the playback), the next turn after the playback ends."""
    import base64
    import json
    import time

    url = f"{base}/v1/text-to-speech/agent/stream-input?output_format=pcm_{sample_rate}&auto_mode=true"
    url += "&inactivity_timeout=180"
    recorded: list[Turn] = []
    async with session.ws_connect(url, max_msg_size=0) as ws:
        await ws.send_json({"text": " "})
        for turn_no in range(turns):
            texts = [SENTENCES[(turn_no + i) % len(SENTENCES)] for i in range(sentences)]
            bounds = [sum(_visible(t) for t in texts[: i + 1]) for i in range(len(texts))]
            sent_at = time.perf_counter()
            await ws.send_json({"text": texts[0] + " ", "flush": True})
            next_text = 1
            seen = 0
            chunks: list[Chunk] = []
            while seen < bounds[-1]:
                frame = json.loads((await ws.receive(timeout=120)).data)
                if not frame.get("audio"):
                    continue
                now = time.perf_counter()
                pcm = base64.b64decode(frame["audio"])
                chunks.append(Chunk(now, len(pcm) / 2 / sample_rate))
                alignment = frame.get("alignment") or {}
                seen += _visible("".join(alignment.get("chars") or []))
                started = bounds[next_text - 2] if next_text >= 2 else 0  # the current sentence's first characters
                if next_text < len(texts) and seen > started:
                    await ws.send_json({"text": texts[next_text] + " ", "flush": True})
                    next_text += 1
            recorded.append(Turn(sent=sent_at, chunks=chunks))
            playback = play(Turn(sent_at, chunks))
            ends = chunks[0].arrived + sum(c.seconds for c in chunks) + playback.starved_s
            await _sleep_until(ends + PAUSE_S)
        await ws.send_json({"text": ""})
    return recorded


async def _sleep_until(deadline: float) -> None:
    import asyncio
    import time

    await asyncio.sleep(max(0.0, deadline - time.perf_counter()))


async def run_level(base: str, streams: int, turns: int, sentences: int, sample_rate: int) -> LevelResult:
    """N agents at once, their starts spread over a second (agents do not all start speaking together)."""
    import asyncio

    import aiohttp

    async def staggered(index: int, session: Any) -> list[Turn]:
        await asyncio.sleep(index / max(1, streams))
        return await agent(base, session, turns, sentences, sample_rate)

    async with aiohttp.ClientSession() as session:
        results = await asyncio.gather(*(staggered(i, session) for i in range(streams)))
    return level(results)


@contextlib.contextmanager
def stack(engine: str, rtf: float, chunk_audio_s: float, data_dir: str) -> Iterator[str]:
    """Redis, one worker and one front, on loopback; yields the front's base URL."""
    import os
    import subprocess
    import sys
    import time
    import urllib.request

    from scripts.bench_realtime import free_port, redis_server

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with redis_server() as redis_url:
        port = free_port()
        env = dict(os.environ, ZSYNTH_REDIS_URL=redis_url, ZSYNTH_DATA_DIR=data_dir, ZSYNTH_LOG_LEVEL="WARNING")
        worker_env = dict(env, ZSYNTH_ENGINE=engine, ZSYNTH_WORKER_ID="capacity-0")
        if engine == "simulated":
            worker_env.update(
                ZSYNTH_LOAD_TEST_ONLY="1",
                ZSYNTH_SIM_CHUNK_HOLD=str(rtf * chunk_audio_s),
                ZSYNTH_SIM_CHUNK_AUDIO=str(chunk_audio_s),
            )
        procs = [
            subprocess.Popen([sys.executable, "-m", "zsynth", "worker"], env=worker_env, cwd=root),
            subprocess.Popen([sys.executable, "-m", "zsynth", "serve"], env=dict(env, ZSYNTH_PORT=str(port)), cwd=root),
        ]
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 600
            while True:  # the front answers health once a worker has announced itself
                with contextlib.suppress(OSError):
                    with urllib.request.urlopen(f"{base}/readyz", timeout=2) as reply:
                        if reply.status == 200:
                            break
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    raise RuntimeError("the front or the worker did not start")
                time.sleep(0.5)
            yield base
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(30)


def run(
    engine: str,
    levels: Sequence[int],
    turns: int,
    sentences: int,
    rtf: float = 0.1,
    chunk_audio_s: float = 0.5,
    deadline: float | None = None,
) -> dict[str, Any]:
    """The whole run: one stack, each level in turn until one fails or ``deadline`` (time.monotonic) passes."""
    import asyncio
    import tempfile
    import time

    results: dict[int, LevelResult] = {}
    with tempfile.TemporaryDirectory() as data, stack(engine, rtf, chunk_audio_s, data) as base:
        asyncio.run(run_level(base, 1, 1, 1, 24000))  # warms the path; not counted
        for n in levels:
            if deadline is not None and time.monotonic() > deadline:
                break
            results[n] = asyncio.run(run_level(base, n, turns, sentences, 24000))
            print(summary_lines({n: results[n]})[0], flush=True)
            if not results[n].passes:
                break
    report: dict[str, Any] = {
        "engine": engine,
        "capacity": capacity(results.values()),
        "levels": {n: dataclasses.asdict(r) for n, r in results.items()},
        "turns": turns,
        "sentences": sentences,
    }
    if engine == "simulated":
        report["rtf"] = rtf
        report["allowed"] = expected_streams(rtf, chunk_audio_s, simulated_sentence_s(chunk_audio_s))
    return report


def main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import json
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("simulated", "turbo"), default="simulated")
    parser.add_argument("--rtf", type=float, default=0.1, help="the simulated engine's real-time factor")
    parser.add_argument("--chunk-audio-s", type=float, default=0.5)
    parser.add_argument("--levels", default="1,2,4,8,12,16,20,24,28,32")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=3)
    parser.add_argument("--reduced", action="store_true", help="levels 1-4, 2 turns of 2 sentences (a CPU test)")
    parser.add_argument("--out", help="write the levels and the figure here as JSON")
    args = parser.parse_args(argv)
    levels = [int(n) for n in args.levels.split(",")]
    if args.reduced:
        levels, args.turns, args.sentences = [n for n in levels if n <= 4] or [1, 2, 3, 4], 2, 2
    report = run(args.engine, levels, args.turns, args.sentences, args.rtf, args.chunk_audio_s)
    print(f"capacity: {report['capacity']} realtime voices (zero underruns, first audio p95 <= 300 ms)")
    if "allowed" in report:
        print(f"an RTF of {args.rtf} allows {report['allowed']} (one worker, one sentence job at a time)")
    print(f"capacity_figure={report['capacity']}")
    if args.out:
        with open(args.out, "w") as out:
            json.dump(report, out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
