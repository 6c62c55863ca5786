"""Which stream the worker's one slot computes next, and whether the worker takes another (docs/scheduling.md).

Each stream a worker holds has a deadline: the moment its listener's playback would run dry (before its first chunk,
when it was queued plus the first-audio budget). The slot always computes the next chunk of the runnable stream whose
deadline comes first (:func:`pick`): earliest deadline first, one chunk (the engine's grain) at a time, and among
the streams due soon, the key that holds the fewest streams first (fair shares between owners).

A worker takes a new stream only while the deadlines of the streams it holds, and the new one's, stay feasible at the
slot's measured real-time factor (:func:`feasible`): the processor-demand test of EDF over a short horizon. Each
stream that is being computed owes one chunk per chunk of audio its listener plays; a stream parked on flow-control
credit owes nothing until its credit comes.

Nothing here touches Redis or the engine: the worker (``workers/worker.py``) feeds it figures.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol, TypeVar

# How far ahead the admission test looks (seconds), at least: a few chunks of every stream held.
HORIZON_S: Final = 2.0
HORIZON_CHUNKS: Final = 3
# What the slot may run late on a deadline in the test (seconds) besides one chunk's cost: the grain cannot be cut.
SLACK_S: Final = 0.005
# The weight of the newest measurement in the slot's moving averages.
EMA_WEIGHT: Final = 0.1
# What a chunk carries before any was measured (seconds of audio).
DEFAULT_CHUNK_AUDIO_S: Final = 0.5


class Scheduled(Protocol):
    """What the scheduler reads of a stream."""

    @property
    def deadline(self) -> float:
        """When (monotonic seconds) the stream's next chunk is due."""
        ...

    @property
    def runnable(self) -> bool:
        """Whether its next chunk may be computed now (not parked on credit)."""
        ...

    @property
    def owner(self) -> str:
        """Whose turn it takes: the key it counts against (Job.owner)."""
        ...

    @property
    def finishing(self) -> bool:
        """Whether its text is all spoken and sent, so its next step only ends it."""
        ...


@dataclass(frozen=True, slots=True)
class Demand:
    """What one stream owes the slot: its next chunk by ``deadline``, then one every ``period_s`` after."""

    deadline: float
    period_s: float


class SlotRate:
    """The slot's measured cost: seconds of computing per second of audio, and the audio one chunk carries."""

    def __init__(self, rtf: float | None = None, chunk_audio_s: float = DEFAULT_CHUNK_AUDIO_S) -> None:
        self.rtf = rtf  # None until the first chunk was measured
        self.chunk_audio_s = chunk_audio_s

    def observe(self, compute_s: float, audio_s: float) -> None:
        """One step computed ``audio_s`` of audio in ``compute_s`` of the slot's time."""
        if audio_s <= 0:
            return
        ratio = compute_s / audio_s
        self.rtf = ratio if self.rtf is None else self.rtf + EMA_WEIGHT * (ratio - self.rtf)
        self.chunk_audio_s += EMA_WEIGHT * (audio_s - self.chunk_audio_s)


S = TypeVar("S", bound=Scheduled)


def pick(streams: Sequence[S], now: float, urgent_s: float) -> S | None:
    """The runnable stream to compute next (None when none may run): earliest deadline first, fair between owners.

    A stream whose text is all spoken and sent goes first: its next step only ends it.

    The streams due within ``urgent_s`` (the late ones included) go first, by their owner's share: the stream of the
    owner that holds the fewest streams on this worker, then the earliest deadline. The others (further ahead of
    their listeners) go after them, earliest deadline first. So one key's many streams, due or late together (a
    burst, or more listeners than the engine feeds), never keep another key's one turn waiting behind all of them,
    and the streams of one owner (every agent of an open server) are plain EDF. This is the queue's own order (keys
    in turns) kept inside a worker.
    """
    runnable = [stream for stream in streams if stream.runnable]
    if not runnable:
        return None
    for stream in runnable:
        if stream.finishing:  # a moment's work that ends a stream (and answers its client) goes first
            return stream
    urgent = [stream for stream in runnable if stream.deadline <= now + urgent_s]
    if not urgent:
        return min(runnable, key=lambda stream: stream.deadline)
    held = Counter(stream.owner for stream in streams)
    return min(urgent, key=lambda stream: (held[stream.owner], stream.deadline))


def _events(demands: Sequence[Demand], now: float, until: float) -> list[tuple[float, float]]:
    """Every chunk the demands owe by ``until``: (deadline, audio seconds). A late stream's playback restarts when its
    next chunk lands, so its next chunk is due now and the ones after it a period apart from then."""
    events: list[tuple[float, float]] = []
    for demand in demands:
        period = max(demand.period_s, 1e-3)
        due = max(demand.deadline, now)
        while due <= until:
            events.append((due, period))
            due += period
    events.sort()
    return events


def horizon_s(rate: SlotRate) -> float:
    """How far ahead the admission test looks."""
    return max(HORIZON_S, HORIZON_CHUNKS * rate.chunk_audio_s)


def lateness(demands: Sequence[Demand], now: float, rate: SlotRate) -> float:
    """The latest any chunk owed over the horizon would come, computed in deadline order from now at the measured
    rate (seconds past its deadline; negative: every chunk is early by at least that much)."""
    assert rate.rtf is not None
    worst = -horizon_s(rate)
    owed = 0.0
    for due, audio_s in _events(demands, now, now + horizon_s(rate)):
        owed += rate.rtf * audio_s
        worst = max(worst, now + owed - due)
    return worst


def feasible(demands: Sequence[Demand], now: float, rate: SlotRate, newcomer: Demand | None = None) -> bool:
    """Whether EDF meets every deadline the demands (and the newcomer) owe over the horizon, at the measured rate.

    Processor demand: in deadline order, the work owed by each deadline (chunks of ``period_s`` audio, each costing
    ``rtf * period_s`` of the slot) must be done by then, give or take one chunk (a chunk under way is not cut). When
    a stream is already late (a hiccup), a newcomer is still taken if it makes no chunk later than the latest one.
    """
    if rate.rtf is None:
        return True
    everyone = [*demands, newcomer] if newcomer is not None else list(demands)
    late = lateness(everyone, now, rate)
    if late <= rate.rtf * rate.chunk_audio_s + SLACK_S:
        return True
    return newcomer is not None and late <= lateness(demands, now, rate) + SLACK_S


def load(demands: Sequence[Demand], now: float, rate: SlotRate) -> float:
    """The share of the horizon the slot owes the demands (1.0: fully booked)."""
    if rate.rtf is None:
        return 0.0
    span = horizon_s(rate)
    return sum(rate.rtf * audio_s for _, audio_s in _events(demands, now, now + span)) / span
