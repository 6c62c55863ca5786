"""Text to dialogue over HTTP: ``POST /v1/text-to-dialogue``, ``/stream``, ``/with-timestamps`` and
``/stream/with-timestamps`` (one JSON object per line).

Each of the body's ``inputs`` is spoken in its own voice, in order, and the answer is one piece of audio. Every voice is
checked before anything is queued (a cloned voice this box lacks is fetched first; an id that is neither a built-in
nor a clone id is spoken by the swap-out voice, as on TTS). The inputs go through the synthesis service one after the
other, each as one job, so a dialogue holds at most one job on the queue at a time: between two inputs other requests
may go first, as a batch job yields between sentences. The workers make raw PCM at the answer's rate and the front
encodes the whole dialogue with one encoder, so the answer is one stream (one MP3 stream, one Ogg Opus file, one WAV
header). ``voice_segments`` give each input's times and its character range in ``alignment``, which covers the
inputs' texts joined in order, without separators.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Final

import numpy as np
import pydantic
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo

from zsynth.core.alignment import Timeline, join_chunks
from zsynth.core.audio import Encoder, OutputFormat, parse_output_format
from zsynth.core.codes import ApiCode
from zsynth.core.protocol import Event
from zsynth.core.voice_settings import InvalidParameter, check_seed
from zsynth.kit.endpoints import Access, Endpoints, refusal
from zsynth.services.auth import CREDENTIAL, workspace_of
from zsynth.services.keys import REQUEST_ID
from zsynth.services.synthesis import Speech, SynthesisFailed, SynthesisRequest, SynthesisService, queue_owner
from zsynth.speech.schemas.apidoc import AUDIO_HEADERS, json_body
from zsynth.speech.schemas.bodies import (
    LanguageCode,
    Locators,
    Normalization,
    checked_model_id,
    checked_voice_settings,
    model_id_field,
    require,
    text_limit,
    text_options,
)
from zsynth.speech.synthesis_http import (
    MAX_SEED,
    AudioStream,
    ConvertQuery,
    FormatQuery,
    StreamQuery,
    TtsRequest,
    audio_headers,
    failure_error,
    finish_stream,
    media_types,
)

routes = Endpoints()

#: At most this many distinct voices in one dialogue (ElevenLabs' limit).
MAX_VOICES: Final = 10
#: At most this many inputs: each is a job of its own, so a dialogue of thousands of one-word turns is refused.
MAX_INPUTS: Final = 100
MAX_VOICE_ID_CHARS: Final = 128
JSON_TYPE: Final = {"Content-Type": "application/json"}
_BAD_BODY: Final = "The request body must be a JSON object with 'inputs': a list of {'text', 'voice_id'}."


class DialogueInput(BaseModel):
    """One turn: a text and the voice that speaks it."""

    model_config = ConfigDict(extra="ignore")

    text: str = Field(pattern=r"\S", description="Not blank.")
    voice_id: str = Field(pattern=r"\S", max_length=MAX_VOICE_ID_CHARS)

    @pydantic.field_validator("text", "voice_id", mode="before")
    @classmethod
    def _string(cls, value: object, info: ValidationInfo) -> object:
        if not isinstance(value, str) or not value.strip():
            raise refusal(ApiCode.INVALID_PARAMETERS, f"Every input needs a non-empty string '{info.field_name}'.")
        if info.field_name == "voice_id" and len(value) > MAX_VOICE_ID_CHARS:
            raise refusal(ApiCode.INVALID_PARAMETERS, f"A voice_id has at most {MAX_VOICE_ID_CHARS} characters.")
        return value


class DialogueSettings(BaseModel):
    """The dialogue's voice settings: ``stability`` (checked as on TTS), the same for every voice."""

    model_config = ConfigDict(extra="ignore")

    stability: float | None = None


def _inputs(value: object) -> object:
    if not isinstance(value, list) or not value:
        raise refusal(
            ApiCode.INVALID_PARAMETERS, "Field 'inputs' is required: a list of at least one {text, voice_id}."
        )
    if len(value) > MAX_INPUTS:
        raise refusal(
            ApiCode.TOO_MANY_INPUTS,
            f"A dialogue has at most {MAX_INPUTS} inputs (got {len(value)}).",
            400,
            param="inputs",
        )
    return value


def _settings(value: object) -> object:
    return checked_voice_settings(value) if value is not None else None


class DialogueRequest(BaseModel):
    """The body of every text-to-dialogue route."""

    model_config = ConfigDict(json_schema_extra=require("inputs"))

    inputs: Annotated[list[DialogueInput], pydantic.BeforeValidator(_inputs)] = Field(
        default=None,
        validate_default=True,
        description=f"1-{MAX_INPUTS} turns, at most {MAX_VOICES} voices.",
        json_schema_extra={"minItems": 1, "maxItems": MAX_INPUTS},
    )
    model_id: str | None = model_id_field("Accepted and echoed; the engine is fixed.")
    language_code: LanguageCode
    settings: Annotated[DialogueSettings | None, pydantic.BeforeValidator(_settings)] = None
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED)
    apply_text_normalization: Normalization
    pronunciation_dictionary_locators: Locators

    @pydantic.field_validator("model_id", mode="before")
    @classmethod
    def _model_id(cls, value: object) -> object:
        return checked_model_id("model_id", value)

    @pydantic.field_validator("seed", mode="before")
    @classmethod
    def _seed(cls, value: object) -> object:
        # As on text-to-speech: a boolean is not a seed (JSON's true is no integer), nor is "42".
        try:
            return check_seed(value)
        except InvalidParameter as err:
            raise refusal(err.code, err.message) from None

    @pydantic.model_validator(mode="after")
    def _bounds(self, info: ValidationInfo) -> DialogueRequest:
        voices = {item.voice_id for item in self.inputs}
        if len(voices) > MAX_VOICES:
            raise refusal(
                ApiCode.TOO_MANY_VOICES,
                f"A dialogue may use at most {MAX_VOICES} different voices (got {len(voices)}).",
                400,
                param="inputs",
            )
        total, limit = sum(len(item.text) for item in self.inputs), text_limit(info)
        if total > limit:
            raise refusal(
                ApiCode.MAX_CHARACTER_LIMIT_EXCEEDED,
                f"This dialogue's text has {total} characters and exceeds the character limit of {limit} characters.",
                400,
                param="inputs",
            )
        return self


@dataclass(slots=True)
class Segment:
    """One input as spoken: its voice, times and character range in the joined alignment."""

    voice_id: str
    index: int
    start_s: float
    end_s: float = 0.0
    char_start: int = 0
    char_end: int = 0

    def body(self) -> dict[str, Any]:
        """ElevenLabs' ``VoiceSegment``."""
        return {
            "voice_id": self.voice_id,
            "start_time_seconds": round(self.start_s, 3),
            "end_time_seconds": round(self.end_s, 3),
            "character_start_index": self.char_start,
            "character_end_index": self.char_end,
            "dialogue_input_index": self.index,
        }


@dataclass(slots=True)
class Piece:
    """Encoded audio ready to send, the characters it carries (absolute seconds), and the segments it ends."""

    audio: bytes
    chars: list[str] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    ended: list[Segment] = field(default_factory=list)


class Dialogue:
    """One dialogue request: its inputs spoken one after the other, as pieces of one encoded stream."""

    def __init__(self, request: web.Request, body: DialogueRequest, fmt: OutputFormat, *, alignment: bool) -> None:
        self.request = request
        self.body = body
        self.fmt = fmt
        self.alignment = alignment
        # The workers make raw PCM at the answer's rate; the front encodes the whole dialogue as one stream.
        self.pcm = parse_output_format(f"pcm_{fmt.sample_rate}", route="convert")
        self.encoder = Encoder(fmt, fmt.sample_rate) if fmt.codec != "pcm" else None
        self.service = SynthesisService.of(request.app)
        self.options = text_options(body.apply_text_normalization, body.pronunciation_dictionary_locators)
        self.settings = {} if body.settings is None else body.settings.model_dump(exclude_unset=True)
        self.segments: list[Segment] = []
        self.chars = 0
        self.seconds = 0.0

    def tts(self, index: int) -> TtsRequest:
        """The first input's synthesis request (for the headers: format, model, text length)."""
        text = "".join(item.text for item in self.body.inputs)
        return TtsRequest(self.body.inputs[index].voice_id, text, self.fmt, self.body.model_id, self.settings, None)

    async def check_voices(self) -> None:
        """Every voice of the dialogue, checked before anything is queued: a clone this box lacks is fetched, one the
        library does not have gets 404, an unreachable library 503 (the envelope, before any byte)."""
        workspace = workspace_of(self.request.get(CREDENTIAL))
        for voice_id in dict.fromkeys(item.voice_id for item in self.body.inputs):
            try:
                await self.service.check_voice(voice_id, workspace)
            except SynthesisFailed as err:
                raise failure_error(err.failure) from err

    async def speak(self, index: int) -> Speech:
        """Queue input ``index`` (SynthesisFailed when refused)."""
        item = self.body.inputs[index]
        asked = SynthesisRequest(
            text=item.text,
            voice_id=item.voice_id,
            output_format=self.pcm.name,
            request_id=self.request[REQUEST_ID],
            workspace=workspace_of(self.request.get(CREDENTIAL)),
            voice_settings=self.settings,
            seed=self.body.seed,
            options=self.options,
            alignment=self.alignment,
        )
        return await self.service.speak(asked, owner=queue_owner(self.request.get(CREDENTIAL)))

    async def _encode(self, pcm: bytes | None) -> bytes:
        if self.encoder is None:
            return pcm or b""
        if pcm is None:
            return await asyncio.to_thread(self.encoder.finish)
        samples = np.frombuffer(pcm, dtype="<i2")
        if self.fmt.codec in ("mp3", "opus"):  # milliseconds of CPU per chunk: off the event loop
            return await asyncio.to_thread(self.encoder.encode, samples)
        return self.encoder.encode(samples)

    async def pieces(self, first: Speech) -> AsyncGenerator[Piece, None]:
        """Every input's audio in order, encoded, with its characters; ``first`` is input 0's speech, already
        queued. SynthesisFailed when a later input fails."""
        speech: Speech | None = first
        for index in range(len(self.body.inputs)):
            if speech is None:
                speech = await self.speak(index)
            async with speech:
                async for piece in self._one(index, speech):
                    yield piece
            speech = None
        tail = await self._encode(None)
        if tail:
            yield Piece(tail)

    async def _one(self, index: int, speech: Speech) -> AsyncIterator[Piece]:
        segment = Segment(self.body.inputs[index].voice_id, index, self.seconds, char_start=self.chars)
        timeline = Timeline()
        last: Piece | None = None
        async for event in speech.chunks():
            piece = self._piece(event, timeline, segment.start_s)
            piece.audio = await self._encode(event.audio)
            if last is not None:
                yield last
            last = piece
        segment.end_s, segment.char_end = self.seconds, self.chars
        self.segments.append(segment)
        last = last or Piece(b"")
        last.ended.append(segment)
        yield last

    def _piece(self, event: Event, timeline: Timeline, job_start_s: float) -> Piece:
        """A chunk's characters on the dialogue's clock (the job's times start where its input starts)."""
        self.seconds += len(event.audio) / 2 / self.pcm.sample_rate
        placed = timeline.place(event.meta) if self.alignment else None
        if placed is None:
            return Piece(b"")
        offset, aligned = placed
        chars, starts, ends = join_chunks([(offset, aligned)])
        self.chars += len(chars)
        return Piece(b"", chars, [round(job_start_s + s, 3) for s in starts], [round(job_start_s + e, 3) for e in ends])


def _alignment(chars: list[str], starts: list[float], ends: list[float]) -> dict[str, Any] | None:
    if not chars:
        return None
    return {"characters": chars, "character_start_times_seconds": starts, "character_end_times_seconds": ends}


def _doc(route: str, operation_id: str, summary: str, ok: dict[str, Any] | None = None) -> dict[str, Any]:
    audio = ok or {
        "description": "The dialogue's audio, in the media type of output_format (mp3 unless asked otherwise).",
        "headers": AUDIO_HEADERS,
        "content": {media: {"schema": {}} for media in media_types(route)},
    }
    return {
        "access": Access.TOKEN,
        "body": DialogueRequest,
        "bad_json": _BAD_BODY,
        "query": ConvertQuery if route == "convert" else StreamQuery,
        "operationId": operation_id,
        "tags": ["text-to-dialogue"],
        "summary": summary,
        "responses": {200: audio},
        "errors": (400, 404, 413, 422, 429, 500),
    }


async def _start(
    request: web.Request, body: DialogueRequest, query: FormatQuery, *, alignment: bool
) -> tuple[Dialogue, Speech]:
    """Check every voice and the output bounds of all the inputs together, then queue the first input: failures up
    to here answer with the envelope."""
    dialogue = Dialogue(request, body, query.parsed(), alignment=alignment)
    await dialogue.check_voices()
    try:
        # Each input is its own job, checked as it is built; the bounds are the request's, so the inputs' sum too.
        texts = [item.text for item in body.inputs]
        await dialogue.service.admit(texts, dialogue.options, workspace=workspace_of(request.get(CREDENTIAL)))
        return dialogue, await dialogue.speak(0)
    except SynthesisFailed as err:
        raise failure_error(err.failure) from err


async def _first(pieces: AsyncIterator[Piece]) -> Piece | None:
    try:
        return await anext(pieces, None)
    except SynthesisFailed as err:
        raise failure_error(err.failure) from err


async def _whole(request: web.Request, body: DialogueRequest, query: FormatQuery, *, alignment: bool) -> Any:
    dialogue, first = await _start(request, body, query, alignment=alignment)
    try:
        pieces = [piece async for piece in dialogue.pieces(first)]
    except SynthesisFailed as err:
        raise failure_error(err.failure) from err
    finally:
        await first.close()
    return dialogue, first, pieces


class VoiceSegment(BaseModel):
    """An input's share of the dialogue."""

    voice_id: str
    start_time_seconds: float
    end_time_seconds: float
    character_start_index: int
    character_end_index: int = Field(description="Exclusive.")
    dialogue_input_index: int


class DialogueWithTimestamps(BaseModel):
    """The with-timestamps answer (one line of the streaming route has the same shape)."""

    audio_base64: str
    alignment: dict[str, Any] | None
    normalized_alignment: dict[str, Any] | None
    voice_segments: list[VoiceSegment]


@routes.post("/v1/text-to-dialogue", **_doc("convert", "text_to_dialogue", "Speak a dialogue; answer when complete."))
async def convert(request: web.Request, body: DialogueRequest, query: ConvertQuery) -> web.Response:
    """The whole dialogue's audio, once complete."""
    dialogue, first, pieces = await _whole(request, body, query, alignment=False)
    audio = b"".join(piece.audio for piece in pieces)
    return web.Response(body=audio, headers=audio_headers(request, dialogue.tts(0), first.job))


@routes.post(
    "/v1/text-to-dialogue/with-timestamps",
    **_doc(
        "convert",
        "text_to_dialogue_with_timestamps",
        "Speak a dialogue; answer with its audio, alignment and voice segments when complete.",
        json_body("One JSON object.", DialogueWithTimestamps, AUDIO_HEADERS),
    ),
)
async def convert_with_timestamps(request: web.Request, body: DialogueRequest, query: ConvertQuery) -> web.Response:
    """The whole dialogue's audio as base64, the alignment of the joined text and one segment per input."""
    dialogue, first, pieces = await _whole(request, body, query, alignment=True)
    chars = [c for piece in pieces for c in piece.chars]
    starts = [s for piece in pieces for s in piece.starts]
    ends = [e for piece in pieces for e in piece.ends]
    answer = {
        "audio_base64": base64.b64encode(b"".join(piece.audio for piece in pieces)).decode("ascii"),
        "alignment": _alignment(chars, starts, ends),
        "normalized_alignment": None,
        "voice_segments": [segment.body() for segment in dialogue.segments],
    }
    headers = audio_headers(request, dialogue.tts(0), first.job) | JSON_TYPE
    return web.Response(text=json.dumps(answer, separators=(",", ":"), ensure_ascii=False), headers=headers)


async def _stream(request: web.Request, body: DialogueRequest, query: StreamQuery, *, timed: bool) -> Any:
    dialogue, first = await _start(request, body, query, alignment=timed)
    # aclosing: a client gone mid-stream closes the input being spoken now (its job is cancelled), not at collection.
    async with first, contextlib.aclosing(dialogue.pieces(first)) as pieces:
        head = await _first(pieces)
        headers = audio_headers(request, dialogue.tts(0), first.job)
        if timed:
            headers |= JSON_TYPE
        response = AudioStream(request, headers)  # every write within the write deadline
        await response.prepare(request)

        async def send(piece: Piece) -> None:
            if not timed:
                if piece.audio:
                    await response.write(piece.audio)
                return
            line = {
                "audio_base64": base64.b64encode(piece.audio).decode("ascii"),
                "alignment": _alignment(piece.chars, piece.starts, piece.ends),
                "normalized_alignment": None,
                "voice_segments": [segment.body() for segment in piece.ended],
            }
            await response.write((json.dumps(line, separators=(",", ":"), ensure_ascii=False) + "\n").encode())

        async def write_all() -> None:
            if head is not None:
                await send(head)
                async for piece in pieces:
                    await send(piece)

        return await finish_stream(request, response, first, write_all())


@routes.post(
    "/v1/text-to-dialogue/stream",
    **_doc("stream", "text_to_dialogue_stream", "Speak a dialogue; stream its audio as it is made."),
)
async def stream(request: web.Request, body: DialogueRequest, query: StreamQuery) -> web.StreamResponse:
    """The dialogue's audio, chunked, each piece as soon as it is made."""
    response: web.StreamResponse = await _stream(request, body, query, timed=False)
    return response


@routes.post(
    "/v1/text-to-dialogue/stream/with-timestamps",
    **_doc(
        "stream",
        "text_to_dialogue_stream_with_timestamps",
        "Speak a dialogue; stream its audio, alignment and voice segments as they are made.",
        json_body(
            "Newline-delimited JSON (application/json, as ElevenLabs sends it): one object per piece of audio; an "
            "input's voice segment comes on its last line. Times are from the start of the dialogue.",
            DialogueWithTimestamps,
            AUDIO_HEADERS,
        ),
    ),
)
async def stream_with_timestamps(request: web.Request, body: DialogueRequest, query: StreamQuery) -> web.StreamResponse:
    """One JSON object per line, per piece of audio, as the inputs are spoken."""
    response: web.StreamResponse = await _stream(request, body, query, timed=True)
    return response
