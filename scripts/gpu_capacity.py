"""Realtime agent voices per GPU: the accounting of the capacity run (underruns, first audio, the figure).

A realtime agent socket speaks turns of sentences; each turn's audio plays back continuously from its first chunk.
A chunk *underruns* when it arrives after the playback reached the point where it starts (the listener hears a gap).
Per number of concurrent sockets N, the run records every stream's underruns and every turn's first audio (from the
turn's first text to its first audio chunk). The capacity figure is the largest N whose streams had no underrun and
whose first-audio p95 is at most :data:`FIRST_AUDIO_P95_S`.

This module holds the accounting, which a unit test checks on hand-made schedules (tests/test_turbo_capacity.py).
NOT DONE (issue 42, item 5): the live driver that runs N stream-input sockets through a real front, Redis and worker.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

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


def expected_streams(rtf: float, chunk_audio_s: float, first_audio_p95_s: float = FIRST_AUDIO_P95_S) -> int:
    """What one worker serving jobs one at a time allows at a given RTF: the throughput bound (N streams need
    N * rtf of the worker per second of audio) and the wait for the first chunk (a turn may queue behind the other
    N - 1 streams' chunks, each ``rtf * chunk_audio_s`` long, before its own)."""
    if rtf <= 0:
        raise ValueError("rtf must be positive")
    chunk_s = rtf * chunk_audio_s
    by_throughput = int(1 / rtf + 1e-9)
    by_latency = int(first_audio_p95_s / chunk_s + 1e-9)  # N * chunk_s <= the p95 bound
    return max(0, min(by_throughput, by_latency))


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
