"""Pure functions of the front's dispatcher: the terminal state read back from a job's record."""

from __future__ import annotations

import pytest

from zsynth.core import protocol
from zsynth.services.dispatch import _terminal_of

pytestmark = pytest.mark.unit


def record(**fields: str) -> dict[bytes, bytes]:
    """A job hash as a client that decodes nothing reads it."""
    return {k.encode(): v.encode() for k, v in fields.items()}


def test_a_running_job_has_no_terminal():
    assert _terminal_of(record(first_chunk_at="1.0", owner="w1"), 3) is None


def test_a_done_record_that_counts_the_events_received_ends_the_stream_as_done():
    event = _terminal_of(record(state="done", seq="4", samples="16000", sample_rate="16000", owner="w1"), 4)
    assert event is not None and event.kind == "done" and event.seq == 4
    assert event.meta == {"samples": "16000", "sample_rate": "16000"}


def test_a_done_record_with_more_events_than_received_is_lost_events_never_a_short_done():
    event = _terminal_of(record(state="done", seq="9"), 4)
    assert event is not None and event.kind == "error" and event.seq == protocol.ANY_SEQ
    assert event.meta["code"] == protocol.ErrorCode.LOST_EVENTS
    assert "9" in event.meta["message"] and "4" in event.meta["message"]


def test_a_reapers_record_is_accepted_whatever_was_received():
    event = _terminal_of(record(state="error", seq=str(protocol.ANY_SEQ), code="worker_died", message="x"), 2)
    assert event is not None and event.kind == "error" and event.meta["code"] == "worker_died"


def test_a_record_from_a_worker_before_seq_was_recorded_is_still_read():
    event = _terminal_of(record(state="error", code="cancelled", message="gone"), 0)
    assert event is not None and event.kind == "error" and event.seq == 0
