"""Speech with character timing over HTTP: ``.../with-timestamps`` (one JSON) and ``.../stream/with-timestamps``.

The alignment comes from the same source as the realtime socket's (:mod:`zsynth.core.alignment`, computed by the
worker per chunk). Over HTTP the times are in seconds from the start of the whole audio, on every line of the
streaming route too. ``alignment`` is always on the caller's characters. When the text was rewritten before it was
spoken (normalization, a dictionary's alias, a break tag: :mod:`zsynth.core.text.prepare`), ``normalized_alignment``
carries the characters that were spoken and each of the caller's characters that was replaced gets a share of the span
its replacement was spoken in; otherwise both are the same.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any, Final

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from zsynth.core.alignment import CharAlignment, Timeline, join_chunks
from zsynth.core.protocol import Event
from zsynth.core.text.marks import CLOSE, OPEN
from zsynth.core.text.spoken import AlignmentMapper, Spoken
from zsynth.kit.endpoints import Endpoints
from zsynth.speech.schemas.apidoc import AUDIO_HEADERS, json_body
from zsynth.speech.synthesis_http import (
    ConvertQuery,
    StreamQuery,
    TextToSpeechRequest,
    audio_headers,
    every_chunk,
    speak,
    stream_speech,
    synthesis_doc,
    tts_request,
)

logger = logging.getLogger(__name__)

routes = Endpoints()


def _alignment_body(chars: list[str], starts: list[float], ends: list[float]) -> dict[str, Any] | None:
    if not chars:
        return None
    return {"characters": chars, "character_start_times_seconds": starts, "character_end_times_seconds": ends}


Aligned = tuple[list[str], list[float], list[float]]


class _Alignments:
    """Both alignments of the characters as they come: the caller's and the spoken ones."""

    def __init__(self, spoken: Spoken | None) -> None:
        self.mapper = AlignmentMapper(spoken) if spoken is not None and spoken.changed else None
        self._in_marker = False  # a marker (pause, phonemes) may run across chunks

    def _spoken_text(self, char: str) -> bool:
        """Whether a spoken character is text (not part of a marker)."""
        if char == OPEN:
            self._in_marker = True
        elif char == CLOSE:
            self._in_marker = False
            return False
        return not self._in_marker

    def bodies(self, aligned: Aligned, *, final: bool) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """(alignment, normalized_alignment) for the next characters."""
        if self.mapper is None:
            body = _alignment_body(*aligned)
            return body, body
        chars, starts, ends = aligned
        original = self.mapper.feed(chars, starts, ends, final=final)
        keep = [i for i, char in enumerate(chars) if self._spoken_text(char)]
        normalized = ([chars[i] for i in keep], [starts[i] for i in keep], [ends[i] for i in keep])
        return _alignment_body(*_rounded(original)), _alignment_body(*normalized)


def _rounded(aligned: Aligned) -> Aligned:
    chars, starts, ends = aligned
    return chars, [round(v, 3) for v in starts], [round(v, 3) for v in ends]


class CharacterAlignment(BaseModel):
    """One entry per character of the text, times in seconds from the start of the whole audio."""

    model_config = ConfigDict(extra="forbid")

    characters: list[str]
    character_start_times_seconds: list[Annotated[float, Field(ge=0)]]
    character_end_times_seconds: list[Annotated[float, Field(ge=0)]]


class AudioWithTimestamps(BaseModel):
    """Audio and its character timing; the alignments are null when there is none (e.g. a chunk of trailing audio).
    ``alignment`` is on the request's characters; ``normalized_alignment`` on the characters spoken, which differ
    when the text was rewritten (normalization, a dictionary's alias, a break tag)."""

    model_config = ConfigDict(extra="forbid")

    audio_base64: str = Field(
        description="The audio in output_format, base64-encoded.", json_schema_extra={"contentEncoding": "base64"}
    )
    alignment: CharacterAlignment | None
    normalized_alignment: CharacterAlignment | None


# The with-timestamps routes answer JSON whatever the audio format inside it.
JSON_TYPE: Final = {"Content-Type": "application/json"}


def _json(payload: dict[str, Any]) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


@routes.post(
    "/v1/text-to-speech/{voice_id}/with-timestamps",
    **synthesis_doc(
        "convert",
        "text_to_speech_with_timestamps",
        "Synthesize; answer with the whole audio and its character timing when complete.",
        json_body(
            "One JSON object: the whole audio as base64 and the alignment of the whole text.",
            AudioWithTimestamps,
            AUDIO_HEADERS,
        ),
    ),
)
async def convert_with_timestamps(request: web.Request, body: TextToSpeechRequest, query: ConvertQuery) -> web.Response:
    """The whole audio as base64 plus the alignment of the whole text, once synthesis is complete."""
    tts = tts_request(request, body, query)
    async with await speak(request, tts, alignment=True) as speech:
        events = await every_chunk(speech)
        # Base64 and JSON of minutes of audio take a while: off the event loop, which serves every other stream.
        answer = await asyncio.to_thread(_whole_answer, events, speech.spoken)
        return web.Response(text=answer, headers=audio_headers(request, tts, speech.job) | JSON_TYPE)


def _whole_answer(events: list[Event], spoken: Spoken) -> str:
    """The with-timestamps answer's JSON: all the audio as base64 and the alignment of the whole text."""
    parts: list[tuple[float, CharAlignment]] = []
    timeline = Timeline()
    for event in events:
        part = timeline.place(event.meta)
        if part is not None:
            parts.append(part)
    chars, starts, ends = join_chunks(parts)
    if ends:
        # An encoder's final flush can carry a few ms after the last character starts: it is that character's.
        ends[-1] = max(ends[-1], round(timeline.placed_s, 3))
    aligned, normalized = _Alignments(spoken).bodies((chars, starts, ends), final=True)
    answer = {
        "audio_base64": base64.b64encode(b"".join(event.audio for event in events)).decode("ascii"),
        "alignment": aligned,
        "normalized_alignment": normalized,
    }
    return _json(answer)


@routes.post(
    "/v1/text-to-speech/{voice_id}/stream/with-timestamps",
    **synthesis_doc(
        "stream",
        "text_to_speech_stream_with_timestamps",
        "Synthesize; stream each chunk's audio and character timing as soon as it is ready.",
        json_body(
            "Newline-delimited JSON, sent as application/json (as ElevenLabs does): one AudioWithTimestamps object "
            "per line, per audio chunk. Times are from the start of the whole audio on every line. A job that fails "
            "mid-stream aborts the connection, so the body has no proper end.",
            AudioWithTimestamps,
            AUDIO_HEADERS,
        ),
    ),
)
async def stream_with_timestamps(
    request: web.Request, body: TextToSpeechRequest, query: StreamQuery
) -> web.StreamResponse:
    """One JSON object per line, per chunk, as the worker makes them."""
    tts = tts_request(request, body, query)
    async with await speak(request, tts, alignment=True) as speech:
        headers = audio_headers(request, tts, speech.job) | JSON_TYPE
        return await stream_speech(request, speech, headers, functools.partial(_json_lines, speech.spoken))


async def _json_lines(spoken: Spoken, events: AsyncIterator[Event]) -> AsyncIterator[bytes]:
    """One JSON object per chunk and line: its audio as base64 and its characters' timing from the audio's start."""
    timeline = Timeline()
    alignments = _Alignments(spoken)
    event = await anext(events, None)
    while event is not None:
        following = await anext(events, None)  # the last chunk's alignment is final (the mapper's rest goes there)
        part = timeline.place(event.meta)
        aligned: dict[str, Any] | None = None
        normalized: dict[str, Any] | None = None
        if part is not None or (following is None and alignments.mapper is not None):
            joined = join_chunks([part]) if part is not None else ([], [], [])
            aligned, normalized = alignments.bodies(joined, final=following is None)
        line = {
            "audio_base64": base64.b64encode(event.audio).decode("ascii"),
            "alignment": aligned,
            "normalized_alignment": normalized,
        }
        yield (_json(line) + "\n").encode()
        event = following
