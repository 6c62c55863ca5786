"""The wire codes live in one place: every error code a client can get is a member of ``zsynth.core.codes.ApiCode``
(a job's own codes of ``zsynth.core.protocol.ErrorCode``), and every error that carries a code is a ``CodedError``.

These read the product's source (``zsynth/`` and ``workers/``): a code written as a string anywhere else, a second
class that re-implements ``(code, message)``, or a member nothing uses fails here, with where it is.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from zsynth.core.codes import ApiCode, CodedError, ErrorType
from zsynth.core.protocol import ErrorCode

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("zsynth", "workers")
# The modules that name the codes: the API's, and the jobs' (the queue's wire form).
HOMES = {Path("zsynth/core/codes.py"), Path("zsynth/core/protocol.py")}
SNAKE = re.compile(r"^[a-z]+(?:_[a-z0-9]+)*$")


def _sources() -> Iterator[tuple[Path, ast.Module]]:
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT), ast.parse(path.read_text(encoding="utf-8"))


def _docstrings(tree: ast.Module) -> set[int]:
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _wire_values() -> dict[str, str]:
    """Each code's value and the member that names it. A job code that is one plain word (``error``, ``timeout``,
    ``cancelled``) is too common a string to police, and is left out."""
    values = {member.value: f"ErrorCode.{member.name}" for member in ErrorCode if "_" in member.value}
    values.update({member.value: f"ErrorType.{member.name}" for member in ErrorType})
    values.update({member.value: f"ApiCode.{member.name}" for member in ApiCode})
    return values


def test_no_code_is_written_as_a_string_outside_its_module() -> None:
    values = _wire_values()
    found = []
    for path, tree in _sources():
        if path in HOMES:
            continue
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):  # a message's words, not a code
                skip.update(id(part) for part in ast.walk(node))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                if node.value in values:
                    found.append(f"{path}:{node.lineno}: {node.value!r} (use {values[node.value]})")
    assert not found, "codes written as strings:\n" + "\n".join(found)


def test_every_code_carrying_error_is_a_coded_error() -> None:
    """A class whose ``__init__`` sets a code (``self.code``, ``self.status`` or ``self.error``) and ``self.message``
    re-implements what CodedError is for."""
    found = []
    for path, tree in _sources():
        for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
            if path == Path("zsynth/core/codes.py") and cls.name == "CodedError":
                continue
            for init in (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"):
                assigned = {
                    target.attr
                    for node in ast.walk(init)
                    for target in (node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)])
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                    if target.value.id == "self"
                }
                if "message" in assigned and assigned & {"code", "status", "error"}:
                    found.append(f"{path}:{init.lineno}: {cls.name} sets its own code and message")
    assert not found, "\n".join(found)


def test_the_coded_errors_share_one_base() -> None:
    from workers.voice_sync import VoiceUnavailable
    from zsynth.core.text.bounds import OutputTooLong
    from zsynth.core.text.prepare import TextOptionError
    from zsynth.core.voices.clips import ClipError
    from zsynth.kit.envelope import Refusal
    from zsynth.services.auth import AuthError
    from zsynth.services.dispatch import JobFailed
    from zsynth.speech.ws.connection import WsError
    from zsynth.speech.wyoming.events import FrameError
    from zsynth.speech.wyoming.session import Refused

    classes = [Refusal, JobFailed, AuthError, Refused, FrameError, OutputTooLong, TextOptionError, ClipError, WsError]
    for cls in [*classes, VoiceUnavailable]:
        assert issubclass(cls, CodedError), cls
    err = TextOptionError(ApiCode.INVALID_PARAMETERS, "bad", "text")
    assert (err.code, err.message, str(err), err.http_status) == ("invalid_parameters", "bad", "bad", 422)


def test_every_member_is_a_snake_case_wire_value_that_the_product_uses() -> None:
    assert all(SNAKE.match(member.value) for member in [*ApiCode, *ErrorType])
    text = "\n".join(
        path.read_text(encoding="utf-8")
        for package in PRODUCT
        for path in (ROOT / package).rglob("*.py")
        if path.relative_to(ROOT) != Path("zsynth/core/codes.py")
    )
    unused = [f"ApiCode.{m.name}" for m in ApiCode if f"ApiCode.{m.name}" not in text]
    unused += [f"ErrorType.{m.name}" for m in ErrorType if f"ErrorType.{m.name}" not in text]
    assert not unused, f"members nothing uses: {unused}"


def test_a_code_is_its_wire_string() -> None:
    """The enums are strings: JSON, logs and comparisons see the value, never the member's name."""
    import json

    assert json.dumps({"error": ApiCode.INVALID_JSON}) == '{"error": "invalid_json"}'
    assert f"{ApiCode.VOICE_NOT_FOUND}" == "voice_not_found"
    api: str = ApiCode.VOICE_NOT_FOUND
    job: str = ErrorCode.VOICE_NOT_FOUND
    assert api == job == "voice_not_found"  # a job's code and the client's compare equal
    lookup: dict[str, int] = {ApiCode.SYSTEM_BUSY: 1}
    assert lookup["system_busy"] == 1
