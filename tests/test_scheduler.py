"""The worker's scheduler, alone: the earliest deadline first, the admission test and the measured rate."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from workers.scheduler import Demand, SlotRate, feasible, load, pick
from zsynth.core.engines import PROFILES

pytestmark = pytest.mark.unit


@dataclass
class _Stream:
    deadline: float
    runnable: bool = True
    owner: str = ""
    finishing: bool = False


def test_the_runnable_stream_with_the_earliest_deadline_goes_first() -> None:
    later, early, parked = _Stream(5.0), _Stream(1.0), _Stream(0.5, runnable=False)
    assert pick([later, early, parked], now=0.0, urgent_s=1.0) is early
    assert pick([parked], now=0.0, urgent_s=1.0) is None
    assert pick([], now=0.0, urgent_s=1.0) is None
    # Late streams of one owner (every agent of an open server) stay in EDF order.
    late, later_late = _Stream(8.0), _Stream(9.0)
    assert pick([later_late, late], now=10.0, urgent_s=1.0) is late


def test_one_key_s_many_streams_due_together_do_not_keep_another_key_s_turn_waiting() -> None:
    flood = [_Stream(8.0 + i / 10, owner="A") for i in range(4)]  # late: more than the engine feeds
    turn = _Stream(10.6, owner="B")
    ahead = _Stream(14.0, owner="C")
    assert pick([*flood, turn, ahead], now=10.0, urgent_s=1.0) is turn
    assert pick([_Stream(10.2, owner="A"), _Stream(10.3, owner="A"), turn], now=10.0, urgent_s=1.0) is turn
    # Once that turn is out of the way, key A's streams go in EDF order; a stream far ahead waits for them.
    assert pick([*flood, ahead], now=10.0, urgent_s=1.0) is flood[0]
    # A stream whose text is all sent only needs ending: it goes first.
    done = _Stream(15.0, owner="A", finishing=True)
    assert pick([*flood, turn, done], now=10.0, urgent_s=1.0) is done
    # Nothing due soon: plain EDF, whoever owns it.
    soonest = _Stream(12.0, owner="A")
    assert pick([_Stream(13.0, owner="A"), soonest, ahead], now=10.0, urgent_s=1.0) is soonest


def test_the_rate_is_measured_from_the_steps() -> None:
    rate = SlotRate()
    assert rate.rtf is None
    rate.observe(0.02, 0.5)
    assert rate.rtf == pytest.approx(0.04)
    for _ in range(200):
        rate.observe(0.036, 0.5)
    assert rate.rtf == pytest.approx(0.072, rel=0.01)
    assert rate.chunk_audio_s == pytest.approx(0.5)
    rate.observe(0.01, 0.0)  # a step that made no audio (a parked chunk's credit, the encoder's tail) changes nothing
    assert rate.rtf == pytest.approx(0.072, rel=0.01)


def test_a_worker_is_admitted_streams_until_their_chunks_no_longer_fit_between_their_deadlines() -> None:
    """At an RTF of 0.04, 0.5 s chunks cost 20 ms: 25 streams playing at once fill the slot exactly, so 24 due
    together still fit with one more (the newcomer) and a few more do not."""
    rate = SlotRate(rtf=0.04, chunk_audio_s=0.5)
    now = 100.0
    playing = [Demand(now + 0.15 + 0.02 * i, 0.5) for i in range(24)]
    newcomer = Demand(now + 0.25, 0.5)
    assert feasible(playing, now, rate, newcomer)
    assert not feasible([*playing, *[Demand(now + 0.1, 0.5) for _ in range(10)]], now, rate, newcomer)
    # A stream far ahead of its listener owes nothing within the horizon.
    ahead = [Demand(now + 30.0, 0.5) for _ in range(100)]
    assert feasible(ahead, now, rate)
    assert load(ahead, now, rate) == 0.0
    assert 0.9 < load(playing, now, rate) < 1.3
    # Before anything was measured, nothing is refused.
    assert feasible([*playing, *playing], now, SlotRate(), newcomer)


def test_a_late_stream_does_not_shut_the_worker_while_a_newcomer_fits_after_it() -> None:
    rate = SlotRate(rtf=0.04, chunk_audio_s=0.5)
    now = 10.0
    # Two streams ran dry a second ago (a hiccup): their next chunks are due now, and a newcomer fits after them.
    late = [Demand(now - 1.0, 0.5), Demand(now - 1.0, 0.5), Demand(now - 1.0, 0.5)]
    assert feasible(late, now, rate, Demand(now + 0.25, 0.5))
    # A slot at an RTF of 1.1 cannot keep one stream fed, and takes no second one.
    slow = SlotRate(rtf=1.1, chunk_audio_s=0.5)
    assert not feasible([Demand(now + 0.2, 0.5)], now, slow, Demand(now + 0.25, 0.5))


def test_every_engine_states_its_grain_and_stream_bound() -> None:
    assert {name: p.grain for name, p in PROFILES.items()} == {
        "piper": "sentence",
        "turbo": "chunk",
        "simulated": "chunk",
    }
    assert all(p.max_streams >= 1 for p in PROFILES.values())
