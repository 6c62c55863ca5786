"""Job error codes: one enum (zsynth.core.protocol.ErrorCode) that every writer uses and the classifier handles
whole."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from zsynth.core.protocol import ErrorCode, Event, error_event
from zsynth.services.dispatch import JobFailed
from zsynth.services.synthesis import TRANSIENT_CODES, classify

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
# Every module that writes a job's error code: the workers (events on Redis) and the front's dispatcher.
WRITERS = sorted([*ROOT.glob("workers/**/*.py"), ROOT / "zsynth" / "services" / "dispatch.py"])
# Calls whose argument (position) is a job error code.
CODE_ARGUMENT = {"error_event": 1, "JobFailed": 0, "VoiceUnavailable": 0, "_fail_all": 0}

# The wire form: fronts and workers of different versions share a queue, so these strings never change.
WIRE = {
    "input_too_complex",
    "worker_restarted",
    "worker_died",
    "worker_stopping",
    "deadline_exceeded",
    "cancelled",
    "voice_not_found",
    "voice_storage_unavailable",
    "invalid_output_format",
    "synthesis_failed",
    "queue_full",
    "redis_unavailable",
    "redis_failover",
    "client_too_slow",
    "audio_too_long",
    "timeout",
    "lost_events",
    "shutting_down",
    "error",
}

# What every transport shows for each code: kind, HTTP status, HTTP code, realtime code, Retry-After.
UNAVAILABLE = ("unavailable", 503, "system_busy", "synthesis_unavailable", 1)
EXPECTED: dict[ErrorCode, tuple[str, int, str, str, int | None]] = {
    ErrorCode.QUEUE_FULL: ("busy", 429, "system_busy", "system_busy", 1),
    ErrorCode.TIMEOUT: UNAVAILABLE,
    ErrorCode.WORKER_RESTARTED: UNAVAILABLE,
    ErrorCode.WORKER_STOPPING: UNAVAILABLE,
    ErrorCode.WORKER_DIED: UNAVAILABLE,
    ErrorCode.SHUTTING_DOWN: UNAVAILABLE,
    ErrorCode.LOST_EVENTS: UNAVAILABLE,
    ErrorCode.DEADLINE_EXCEEDED: UNAVAILABLE,
    ErrorCode.REDIS_UNAVAILABLE: UNAVAILABLE,
    ErrorCode.REDIS_FAILOVER: UNAVAILABLE,
    ErrorCode.CLIENT_TOO_SLOW: UNAVAILABLE,
    ErrorCode.AUDIO_TOO_LONG: ("invalid", 400, "audio_too_long", "audio_too_long", None),
    ErrorCode.INPUT_TOO_COMPLEX: ("invalid", 400, "input_too_complex", "input_too_complex", None),
    ErrorCode.VOICE_NOT_FOUND: ("voice_not_found", 404, "voice_not_found", "voice_not_found", None),
    ErrorCode.VOICE_STORAGE_UNAVAILABLE: (
        "voice_storage_unavailable",
        503,
        "voice_storage_unavailable",
        "voice_storage_unavailable",
        5,
    ),
    ErrorCode.SYNTHESIS_FAILED: ("internal", 500, "synthesis_failed", "synthesis_failed", None),
    ErrorCode.INVALID_OUTPUT_FORMAT: ("internal", 500, "invalid_output_format", "invalid_output_format", None),
    ErrorCode.CANCELLED: ("internal", 500, "cancelled", "cancelled", None),
    ErrorCode.ERROR: ("internal", 500, "error", "error", None),
}


def _calls(path: Path) -> list[tuple[str, ast.Call]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in CODE_ARGUMENT:
                found.append((name, node))
    return found


def _code_like_strings(path: Path) -> list[ast.Constant]:
    """The string constants of a module that equal a code, but for log messages ("error" is also an event kind)."""
    tree = ast.parse(path.read_text(), str(path))
    logged = {
        id(node.args[0])
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in {"debug", "info", "warning", "error", "exception"}
        and node.args
    }
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in WIRE - {"error"}
        and id(node) not in logged
    ]


def test_the_wire_values_are_unchanged() -> None:
    assert {code.value for code in ErrorCode} == WIRE


def test_writers_name_codes_by_the_enum_never_by_a_bare_string() -> None:
    """No writer spells a code as a string, and every code argument written out is a member of the enum."""
    literals = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}"
        for path in WRITERS
        for node in _code_like_strings(path)
    ]
    assert literals == []
    named = 0
    for path in WRITERS:
        for name, call in _calls(path):
            if len(call.args) <= CODE_ARGUMENT[name]:
                continue
            arg = call.args[CODE_ARGUMENT[name]]
            where = f"{path.relative_to(ROOT)}:{call.lineno}"
            # A code is a member, or passed on from a typed variable or the wire (err.code, code, str(...)).
            assert not isinstance(arg, ast.Constant | ast.JoinedStr), where
            if isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) and arg.value.id == "ErrorCode":
                assert arg.attr in ErrorCode.__members__, where
                named += 1
    assert named >= 15  # the scan does see the writers


def test_an_error_event_carries_the_plain_wire_string() -> None:
    event = Event.decode(error_event(3, ErrorCode.WORKER_DIED, "gone").encode())
    assert event.meta == {"code": "worker_died", "message": "gone"}
    assert type(event.meta["code"]) is str


@pytest.mark.parametrize("code", list(ErrorCode))
def test_classify_handles_every_code_deliberately(code: ErrorCode) -> None:
    """Each member has its decided answer (a new member fails here until it is decided); read from the wire as a
    plain string, as the dispatcher does."""
    assert set(EXPECTED) == set(ErrorCode)
    failure = classify(JobFailed(code.value, "what happened"))
    assert (failure.kind, failure.http_status, failure.code, failure.realtime_code, failure.retry_after) == EXPECTED[
        code
    ]
    assert failure.message == "what happened"
    assert (code in TRANSIENT_CODES) == (EXPECTED[code] == UNAVAILABLE)


def test_an_unknown_code_from_a_newer_worker_is_internal() -> None:
    failure = classify(JobFailed("some_new_code", "new"))
    assert (failure.kind, failure.http_status, failure.code) == ("internal", 500, "some_new_code")
