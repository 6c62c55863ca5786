"""The Wyoming listener's edge: JSON nested past its depth bound, one log line per framing error, and the cap on the
connections of all clients together.

Loopback has a whole /8, so 127.0.0.2, 127.0.0.3, … are distinct client addresses: a client socket is bound to one
of them before it connects.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from typing import Any

import pytest

from harness.base import free_port
from harness.wyoming_client import error_then_close, raw_connection, read_wire_event, until, wyoming_listener
from zsynth.core.config import Settings, SettingsError
from zsynth.speech.wyoming.events import MAX_JSON_DEPTH, FrameError, nests_deeper_than, read_event

# ----- the depth bound, on the reader alone ------------------------------------------------------------------------


def _nested(depth: int) -> Any:
    """A JSON value of arrays ``depth`` deep (0: a number)."""
    value: Any = 7
    for _ in range(depth):
        value = [value]
    return value


async def _read(raw: bytes) -> Any:
    """What :func:`read_event` makes of ``raw`` and then the end of the stream."""
    reader = asyncio.StreamReader(limit=64 * 1024)
    reader.feed_data(raw)
    reader.feed_eof()
    return await read_event(reader)


@pytest.mark.unit
async def test_nesting_up_to_the_bound_is_read_and_one_level_more_is_refused():
    # The header line is an object (1) and holds 'data' (2), whose 'deep' adds the rest.
    fits = json.dumps({"type": "ping", "data": {"deep": _nested(MAX_JSON_DEPTH - 2)}}).encode() + b"\n"
    event = await _read(fits)
    assert event is not None and event.data["deep"] == _nested(MAX_JSON_DEPTH - 2)
    too_deep = json.dumps({"type": "ping", "data": {"deep": _nested(MAX_JSON_DEPTH - 1)}}).encode() + b"\n"
    with pytest.raises(FrameError) as refused:
        await _read(too_deep)
    assert refused.value.code == "invalid_json" and str(MAX_JSON_DEPTH) in refused.value.message
    # The same in a data block: the block is an object of its own (1).
    block = json.dumps({"deep": _nested(MAX_JSON_DEPTH)}).encode()
    with pytest.raises(FrameError, match="nest"):
        await _read(b'{"type": "ping", "data_length": %d}\n' % len(block) + block)


@pytest.mark.unit
@pytest.mark.parametrize(
    "text",
    [
        "[" * 5000,  # brackets inside a string are text
        "{[" * 3000 + '"',
        '\\"' + "[" * 200,  # an escaped quote does not end the string
        "\\" * 7 + "[" * 200 + '"' + "{" * 100,
        "ends in a backslash \\",
        "😀 [[[[ ü \u2028 " * 50,
    ],
)
async def test_brackets_quotes_and_backslashes_inside_strings_do_not_count(text):
    frame = json.dumps({"type": "synthesize", "data": {"text": text}}).encode() + b"\n"
    block = json.dumps({"text": text, "voice": {"name": text}}, ensure_ascii=False).encode()
    for raw in (frame, b'{"type": "synthesize", "data_length": %d}\n' % len(block) + block):
        event = await _read(raw)
        assert event is not None and event.data["text"] == text


@pytest.mark.unit
async def test_a_string_ending_in_an_escaped_backslash_hides_no_nesting():
    # '"a\\\\"' ends its string: the arrays after it are real and too deep.
    raw = json.dumps({"type": "ping", "data": {"t": "a\\", "deep": _nested(MAX_JSON_DEPTH)}}).encode() + b"\n"
    with pytest.raises(FrameError, match="nest"):
        await _read(raw)


def _random_value(rng: random.Random, depth: int) -> Any:
    """A JSON value nesting exactly ``depth`` arrays and objects, its strings full of quotes, brackets and escapes."""
    if depth == 0:
        return "".join(rng.choice('"[]{}\\ a\n\u00e9\U0001f600') for _ in range(rng.randrange(8)))
    inner = [_random_value(rng, rng.randrange(min(depth, 3))) for _ in range(rng.randrange(3))]
    inner.insert(rng.randrange(len(inner) + 1), _random_value(rng, depth - 1))
    if rng.random() < 0.5:
        return inner
    return {_random_value(rng, 0) + str(n): value for n, value in enumerate(inner)}


@pytest.mark.unit
def test_the_depth_count_is_exact_on_valid_json():
    rng = random.Random(48)
    for _ in range(300):
        depth = rng.randrange(1, 90)
        raw = json.dumps(_random_value(rng, depth), ensure_ascii=rng.random() < 0.5).encode()
        assert nests_deeper_than(raw, depth - 1) and not nests_deeper_than(raw, depth), raw[:200]


# ----- framing errors on a live listener: an error event, a close and one log line ---------------------------------

DEEP_HEADER = b"[" * 60_000 + b"\n"
DEEP_BLOCK = b'{"type": "synthesize", "data_length": 900000}\n' + b"[" * 900_000


@pytest.mark.stack
@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (DEEP_HEADER, "invalid_json"),
        (DEEP_BLOCK, "invalid_json"),
        (b"[" * 40 + b"{" * 40 + b"\n", "invalid_json"),
        (b"\xff\xfe\n", "invalid_json"),
        (b'{"type": "synthesize", "data_length": 4}\n"ab"', "invalid_json"),
        (b'{"type": "synthesize", "data_length": -1}\n', "invalid_event"),
        (b'{"type": "synthesize", "data_length": 2000000}\n', "event_too_large"),
        (b'{"type": "synthesize", "data": {"text": "' + b"a" * (70 * 1024), "event_too_large"),
    ],
    ids=["deep-header", "deep-data-block", "deep-mixed", "not-utf8", "bad-block", "bad-length", "oversize", "endless"],
)
async def test_each_framing_error_is_an_error_event_a_close_and_one_log_line(
    aiohttp_client, redis_url, data_dir, caplog, frame, code
):
    settings = Settings.from_env(
        {"ZSYNTH_WYOMING_URI": f"tcp://127.0.0.1:{free_port()}"}, redis_url=redis_url, data_dir=data_dir
    )
    listener = await wyoming_listener(aiohttp_client, settings)
    caplog.set_level(logging.INFO)
    caplog.clear()
    reader, writer = await raw_connection(listener.port)
    writer.write(frame)
    data = await error_then_close(reader)
    assert data["code"] == code and data["text"]
    writer.close()
    await until(lambda: listener.open_connections == 0, "the listener let the connection go")
    lines = [r for r in caplog.records if r.name.startswith("zsynth.speech.wyoming")]
    assert len(lines) == 1, [r.getMessage()[:200] for r in lines]
    line = lines[0].getMessage()
    assert code in line and "\n" not in line and len(line) < 300, line
    assert not [r for r in caplog.records if r.exc_info or r.exc_text], "a traceback was logged"


# ----- the cap on every client's connections together --------------------------------------------------------------


async def _served(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The connection is served: a describe is answered with the info."""
    writer.write(b'{"type": "describe"}\n')
    event = await read_wire_event(reader)
    assert event is not None and event[0] == "info", event


@pytest.mark.stack
async def test_connections_from_all_addresses_together_are_capped(aiohttp_client, redis_url, data_dir, caplog):
    settings = Settings.from_env(
        {"ZSYNTH_WYOMING_URI": f"tcp://127.0.0.1:{free_port()}", "ZSYNTH_WYOMING_MAX_CONNECTIONS": "3"},
        redis_url=redis_url,
        data_dir=data_dir,
    )
    listener = await wyoming_listener(aiohttp_client, settings)
    held = [await raw_connection(listener.port, f"127.0.0.{n}") for n in (2, 3, 4)]  # one each: under the address cap
    for reader, writer in held:
        await _served(reader, writer)
    caplog.set_level(logging.INFO)
    caplog.clear()
    for n in (5, 7, 8):
        reader, writer = await raw_connection(listener.port, f"127.0.0.{n}")
        data = await error_then_close(reader)
        assert data["code"] == "too_many_connections" and "3" in data["text"], data
        writer.close()
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 1 and "ZSYNTH_WYOMING_MAX_CONNECTIONS" in refusals[0], refusals  # one line a minute
    # One leaves: once the listener has let it go, the next address is served again.
    held[0][1].close()
    await until(lambda: listener.open_connections == 2, "the listener let the closed connection go")
    again = await raw_connection(listener.port, "127.0.0.6")
    await _served(*again)
    for _, held_writer in [*held[1:], again]:
        held_writer.close()


@pytest.mark.unit
def test_the_cap_setting_is_read_from_the_environment():
    assert Settings.from_env({}).wyoming.max_connections == 64
    assert Settings.from_env({"ZSYNTH_WYOMING_MAX_CONNECTIONS": "5"}).wyoming.max_connections == 5
    for bad in ("0", "-1", "many"):
        with pytest.raises(SettingsError, match="ZSYNTH_WYOMING_MAX_CONNECTIONS"):
            Settings.from_env({"ZSYNTH_WYOMING_MAX_CONNECTIONS": bad})
