"""Wyoming's framing, read with bounds and written the way the ``wyoming`` library writes it.

An event is one UTF-8 JSON line (``type``, optional ``data``, ``data_length``, ``payload_length``, ``version``), then
exactly ``data_length`` bytes of a JSON object merged over the line's ``data``, then ``payload_length`` raw bytes.
The reader takes ``data`` inline or as the block (the library always sends the block); the writer always sends the
block, as the library does.

Every size is bounded before anything is read into memory: the header line (:data:`MAX_HEADER_BYTES`, the stream
reader's limit), the data block (:data:`MAX_DATA_BYTES`) and the payload (:data:`MAX_PAYLOAD_BYTES`: a TTS client
sends none). Past a bound, or on a line that is not a JSON object, the byte stream cannot be followed any further:
:class:`FrameError` ends the connection after an ``error`` event.

The JSON is UTF-8 (as the protocol has it) and nests arrays and objects at most :data:`MAX_JSON_DEPTH` deep. Python's
parser recurses once per level, so a line of 60,000 ``[`` would end in a ``RecursionError`` (or, where a library has
raised the interpreter's recursion limit, overflow the C stack): the depth is measured before the parser sees the
bytes (:func:`nests_deeper_than`).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from zsynth.core.codes import ApiCode, CodedError

MAX_HEADER_BYTES: Final = 64 * 1024
MAX_DATA_BYTES: Final = 1024 * 1024
MAX_PAYLOAD_BYTES: Final = 64 * 1024
# The deepest an event's JSON (its header line, its data block) may nest arrays and objects, the outer object counting
# as 1. Home Assistant's events nest at most 5 deep (the info).
MAX_JSON_DEPTH: Final = 64
# The version of the ``wyoming`` library whose events this module speaks (sent in every header, as the library does).
PROTOCOL_VERSION: Final = "1.10.2"


class FrameError(CodedError):
    """The bytes are not an event within the bounds; the connection cannot go on (``code`` goes in the error event)."""


@dataclass(frozen=True, slots=True)
class WireEvent:
    """One event as read: its type, its merged data and its payload."""

    type: str
    data: dict[str, Any] = field(default_factory=dict)
    payload: bytes = b""


# Every byte but the ones that can open or close a string, an array or an object (deleted before the depth count).
_NOT_STRUCTURE: Final = bytes(byte for byte in range(256) if byte not in b'"[]{}')
# What each byte does to the depth: +1 for [ and {, -1 for ] and }, 0 for the rest.
_DEPTH_STEP: Final = np.zeros(256, dtype=np.int32)
_DEPTH_STEP[list(b"[{")] = 1
_DEPTH_STEP[list(b"]}")] = -1


def nests_deeper_than(raw: bytes, bound: int) -> bool:
    """Whether the JSON in ``raw`` (UTF-8) nests arrays and objects more than ``bound`` deep.

    Exact for valid JSON. For invalid JSON the depth it measures is at least as deep as a parser goes before it stops
    at the first error (up to there the bytes are valid JSON, read the same way), so json.loads on bytes it passes
    never goes deeper than ``bound``. Linear and in C (bytes methods, numpy): a 1 MiB block costs about what
    json.loads takes on it, and an event with at most ``bound`` brackets (every event a client sends in practice) only
    a count.
    """
    # In UTF-8 the bytes of " [ ] { } and \ occur only as those characters (a multibyte character's bytes are all
    # >= 0x80). Escaped backslashes go first, paired left to right as JSON reads them; then each backslash left escapes
    # the byte after it, and only an escaped quote matters (an escaped bracket is not JSON). Every quote left opens or
    # closes a string.
    marks = raw.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
    if marks.count(b"[") + marks.count(b"{") <= bound:
        return False  # too few openers to go deeper, in strings or not
    codes = np.frombuffer(marks, dtype=np.uint8)
    steps = _DEPTH_STEP[codes]  # a copy
    if b'"' in marks:  # a bracket after an odd number of quotes is inside a string: it does not count
        steps[(np.cumsum(codes == ord('"'), dtype=np.int32) & 1).astype(bool)] = 0
    return bool(np.cumsum(steps, dtype=np.int32).max() > bound)


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        # Decoded here: json.loads would take UTF-16 and UTF-32 bytes too, whose quotes and brackets the depth count
        # cannot see.
        text = raw.decode()
    except UnicodeDecodeError as err:
        raise FrameError(ApiCode.INVALID_JSON, f"The event's {what} is not UTF-8.") from err
    if nests_deeper_than(raw, MAX_JSON_DEPTH):
        raise FrameError(
            ApiCode.INVALID_JSON, f"The event's {what} nests arrays and objects more than {MAX_JSON_DEPTH} deep."
        )
    try:
        value = json.loads(text)
    except ValueError as err:
        raise FrameError(ApiCode.INVALID_JSON, f"The event's {what} is not valid JSON.") from err
    if not isinstance(value, dict):
        raise FrameError(ApiCode.INVALID_JSON, f"The event's {what} must be a JSON object.")
    return value


def _length(header: dict[str, Any], name: str, bound: int) -> int:
    value = header.get(name)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FrameError(ApiCode.INVALID_EVENT, f"'{name}' must be a whole number of bytes.")
    if value > bound:
        raise FrameError(ApiCode.EVENT_TOO_LARGE, f"'{name}' may be at most {bound} bytes.")
    return value


async def read_event(reader: asyncio.StreamReader) -> WireEvent | None:
    """The next event; None when the client closed or reset the connection (between events or inside one).

    FrameError when the bytes break the framing or a bound. The reader's ``limit`` must be :data:`MAX_HEADER_BYTES`.
    """
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        except asyncio.LimitOverrunError as err:
            raise FrameError(
                ApiCode.EVENT_TOO_LARGE, f"An event's header line may hold at most {MAX_HEADER_BYTES} bytes."
            ) from err
        if line.strip():
            break  # blank lines between events carry nothing
    header = _json_object(line, "header line")
    kind = header.get("type")
    if not isinstance(kind, str) or not kind:
        raise FrameError(ApiCode.INVALID_EVENT, "An event needs a 'type' string.")
    data = header.get("data")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise FrameError(ApiCode.INVALID_EVENT, "An event's 'data' must be a JSON object.")
    data_length = _length(header, "data_length", MAX_DATA_BYTES)
    payload_length = _length(header, "payload_length", MAX_PAYLOAD_BYTES)
    try:
        if data_length:
            data = {**data, **_json_object(await reader.readexactly(data_length), "data block")}
        payload = await reader.readexactly(payload_length) if payload_length else b""
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    return WireEvent(kind, data, payload)


def encode_event(kind: str, data: dict[str, Any] | None = None, payload: bytes = b"") -> bytes:
    """One event's bytes: the header line, the data block (when there is data) and the payload."""
    header: dict[str, Any] = {"type": kind, "version": PROTOCOL_VERSION}
    block = json.dumps(data, ensure_ascii=False).encode() if data else b""
    if block:
        header["data_length"] = len(block)
    if payload:
        header["payload_length"] = len(payload)
    return json.dumps(header).encode() + b"\n" + block + payload


class AudioFrames:
    """The bytes of ``audio-start``, ``audio-chunk`` and ``audio-stop`` for one format (16-bit mono at ``rate``).

    Built once per format: the chunk's data block is the same for every chunk, only its payload length changes.
    """

    def __init__(self, rate: int, samples_per_chunk: int) -> None:
        self.rate = rate
        self.chunk_bytes = 2 * samples_per_chunk
        fmt = {"rate": rate, "width": 2, "channels": 1}
        self.start = encode_event("audio-start", fmt)
        self.stop = encode_event("audio-stop", {"timestamp": None})
        self._block = json.dumps(fmt).encode()
        self._prefix = f'{{"type": "audio-chunk", "version": "{PROTOCOL_VERSION}", "data_length": {len(self._block)}, '

    def chunks(self, audio: bytes) -> bytes:
        """``audio`` (16-bit samples) as ``audio-chunk`` events of at most ``samples_per_chunk`` samples each."""
        parts: list[bytes] = []
        for start in range(0, len(audio), self.chunk_bytes):
            piece = audio[start : start + self.chunk_bytes]
            parts.append(f'{self._prefix}"payload_length": {len(piece)}}}\n'.encode())
            parts.append(self._block)
            parts.append(piece)
        return b"".join(parts)
