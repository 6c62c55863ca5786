"""What the HTTP synthesis routes share (ElevenLabs' convert, stream and with-timestamps; OpenAI's speech route).

Their request models and query models, the synthesis request they become, the audio headers, and the rendering
of the synthesis service's failures (:mod:`zsynth.services.synthesis`): before the status line in the route's error
envelope, after it by cutting the transfer short. Not a route module: it declares no routes.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Final

import pydantic
from aiohttp import web
from aiohttp.client_exceptions import ClientConnectionResetError
from pydantic import BaseModel, ConfigDict, Field

from zsynth.core.audio import (
    ALLOWED_OUTPUT_FORMATS,
    DEFAULT_OUTPUT_FORMAT,
    OutputFormat,
    OutputFormatError,
    parse_output_format,
)
from zsynth.core.codes import ApiCode
from zsynth.core.protocol import Event, Job
from zsynth.core.text.prepare import TextOptions
from zsynth.core.voice_settings import InvalidParameter, check_seed
from zsynth.kit.answer_headers import (
    CHARACTER_COST_HEADER,
    HISTORY_ITEM_ID_HEADER,
    MODEL_ID_HEADER,
    REQUEST_ID_HEADER,
    TRACE_ID_HEADER,
    VOICE_ID_HEADER,
)
from zsynth.kit.endpoints import Access, refusal
from zsynth.kit.errors import ApiError
from zsynth.services.auth import CREDENTIAL, workspace_of
from zsynth.services.keys import REQUEST_ID, SETTINGS, TRACE_ID
from zsynth.services.synthesis import Failure, Speech, SynthesisFailed, SynthesisRequest, SynthesisService, queue_owner
from zsynth.speech.schemas.apidoc import AUDIO_HEADERS
from zsynth.speech.schemas.bodies import (
    LanguageCode,
    Locators,
    Normalization,
    checked_model_id,
    checked_voice_settings,
    model_id_field,
    require,
    spoken_text,
    spoken_text_field,
    text_options,
)

logger = logging.getLogger(__name__)

#: The most a seed may be (ElevenLabs' range).
MAX_SEED: Final = 4294967295
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(slots=True)
class TtsRequest:
    """A validated synthesis request."""

    voice_id: str
    text: str
    fmt: OutputFormat
    model_id: str | None
    voice_settings: dict[str, Any]
    seed: int | None
    options: TextOptions = field(default_factory=TextOptions)


# ----- request models ----------------------------------------------------------------------------------------------


class VoiceSettingsInput(BaseModel):
    """Per-request voice settings; out-of-range values are clamped by the engine.

    Unknown fields are dropped, as ElevenLabs ignores them (not refused: clients send newer fields), so they never
    reach the job on Redis (:func:`zsynth.core.voice_settings.check_voice_settings`).
    """

    model_config = ConfigDict(extra="ignore")

    stability: float | None = None
    similarity_boost: float | None = None
    style: float | None = None
    use_speaker_boost: bool | None = None
    speed: float | None = None


def _voice_settings(value: object) -> object:
    return checked_voice_settings(value) if value is not None else None


class TextToSpeechRequest(BaseModel):
    """The body of every ElevenLabs synthesis route (convert, stream and both with-timestamps)."""

    model_config = ConfigDict(json_schema_extra=require("text"))

    text: Annotated[
        str,
        spoken_text(
            "text", "This request's text has {length} characters and exceeds the character limit of {limit} characters."
        ),
    ] = spoken_text_field()
    model_id: str | None = model_id_field("Accepted and echoed; the engine is fixed.")
    language_code: LanguageCode
    voice_settings: Annotated[VoiceSettingsInput | None, pydantic.BeforeValidator(_voice_settings)] = None
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
        try:
            return check_seed(value)
        except InvalidParameter as err:
            raise refusal(err.code, err.message) from None

    def voice_settings_dict(self) -> dict[str, Any]:
        """The voice settings as the worker takes them (the known fields sent, nulls as sent)."""
        return {} if self.voice_settings is None else self.voice_settings.model_dump(exclude_unset=True)


class FormatQuery(BaseModel):
    route: ClassVar[str]
    output_format: str

    @pydantic.field_validator("output_format", mode="before")
    @classmethod
    def _check(cls, value: object) -> object:
        try:
            if value == "":  # `?output_format=` names no format (the document's enum has no empty value): refused
                raise OutputFormatError("", cls.route)
            parse_output_format(value if isinstance(value, str) else None, route=cls.route)
        except OutputFormatError as err:
            raise refusal(ApiCode.INVALID_OUTPUT_FORMAT, str(err), 400) from None
        return value

    def parsed(self) -> OutputFormat:
        """The output format."""
        return parse_output_format(self.output_format, route=self.route)


def _format_field(route: str) -> Any:
    return Field(
        default=DEFAULT_OUTPUT_FORMAT,
        description="Codec, sample rate and bitrate of the audio.",
        json_schema_extra={"enum": list(ALLOWED_OUTPUT_FORMATS[route])},
    )


class ConvertQuery(FormatQuery):
    """The query of the whole-body synthesis routes (wav too)."""

    route: ClassVar[str] = "convert"
    output_format: str = _format_field("convert")


class StreamQuery(FormatQuery):
    """The query of the streaming synthesis routes."""

    route: ClassVar[str] = "stream"
    output_format: str = _format_field("stream")


#: Each synthesis route's query model.
QUERIES: Final[dict[str, type[FormatQuery]]] = {"convert": ConvertQuery, "stream": StreamQuery}
_BAD_BODY: Final = "The request body must be a JSON object with a 'text' field."


def media_types(route: str) -> list[str]:
    """The audio media types a route may answer with, one per codec of its output formats."""
    return sorted({parse_output_format(name, route=route).media_type for name in ALLOWED_OUTPUT_FORMATS[route]})


def synthesis_doc(route: str, operation_id: str, summary: str, ok: dict[str, Any] | None = None) -> dict[str, Any]:
    """The declaration of an ElevenLabs synthesis route: access, models and OpenAPI fields (``ok``: its 200;
    by default the audio bytes)."""
    audio = ok or {
        "description": "The audio, in the media type of output_format (mp3 unless asked otherwise).",
        "headers": AUDIO_HEADERS,
        "content": {media: {"schema": {}} for media in media_types(route)},
    }
    return {
        "access": Access.TOKEN,
        "body": TextToSpeechRequest,
        "bad_json": _BAD_BODY,
        "query": QUERIES[route],
        "operationId": operation_id,
        "tags": ["text-to-speech"],
        "summary": summary,
        "path_params": {"voice_id": "A built-in or cloned voice; unknown ids are spoken by the swap-out voice."},
        "responses": {200: audio},
        "errors": (400, 404, 413, 422, 429, 500),
    }


def tts_request(request: web.Request, body: TextToSpeechRequest, query: FormatQuery) -> TtsRequest:
    """The request of an ElevenLabs synthesis route, from the path and its declared body and query (parsed, with the
    ElevenLabs envelope on bad input, before the handler runs: :func:`zsynth.kit.endpoints.bind`)."""
    return TtsRequest(
        request.match_info["voice_id"],
        body.text,
        query.parsed(),
        body.model_id,
        body.voice_settings_dict(),
        body.seed,
        text_options(body.apply_text_normalization, body.pronunciation_dictionary_locators),
    )


def failure_error(failure: Failure) -> ApiError:
    """A classified failure in the HTTP routes' envelope."""
    return ApiError(
        failure.http_status, failure.code, failure.message, param=failure.param, headers=failure.headers or None
    )


def audio_headers(request: web.Request, tts: TtsRequest, job: Job) -> dict[str, str]:
    """Headers ElevenLabs clients read on a TTS answer."""
    headers = {
        "Content-Type": tts.fmt.media_type,
        REQUEST_ID_HEADER: request[REQUEST_ID],
        TRACE_ID_HEADER: request[TRACE_ID],
        CHARACTER_COST_HEADER: str(len(tts.text)),
        HISTORY_ITEM_ID_HEADER: job.job_id,
        VOICE_ID_HEADER: job.voice_id,
    }
    if tts.model_id:
        # aiohttp refuses to write a header holding a control character (header injection).
        headers[MODEL_ID_HEADER] = _CONTROL_CHARS.sub("", tts.model_id)
    return headers


async def speak(request: web.Request, tts: TtsRequest, *, alignment: bool = False) -> Speech:
    """Queue this request's job through the synthesis service; a failure is answered with the route's envelope.

    ``alignment`` asks the worker for character timing with every chunk (the with-timestamps routes). The service
    fetches a cloned voice this box lacks, gives an unknown voice id the swap-out voice, and keeps what the text
    became in ``Speech.spoken`` (break tags, dictionaries, normalization: :mod:`zsynth.core.text.prepare`).
    """
    asked = SynthesisRequest(
        text=tts.text,
        voice_id=tts.voice_id,
        output_format=tts.fmt.name,
        request_id=request[REQUEST_ID],
        workspace=workspace_of(request.get(CREDENTIAL)),
        voice_settings=tts.voice_settings,
        seed=tts.seed,
        options=tts.options,
        alignment=alignment,
    )
    try:
        return await SynthesisService.of(request.app).speak(asked, owner=queue_owner(request.get(CREDENTIAL)))
    except SynthesisFailed as err:
        raise failure_error(err.failure) from err


async def first_chunk(chunks: AsyncIterator[Event]) -> Event | None:
    """The job's first chunk (None if it made no audio), awaited before any byte is sent: a failure up to here is
    answered with the envelope (503 and Retry-After for transient ones)."""
    try:
        return await anext(chunks, None)
    except SynthesisFailed as err:
        raise failure_error(err.failure) from err


async def every_chunk(speech: Speech) -> list[Event]:
    """Every chunk of the job, awaited before any byte is sent (the whole-body routes): a failure is answered with
    the envelope."""
    try:
        return [event async for event in speech.chunks()]
    except SynthesisFailed as err:
        raise failure_error(err.failure) from err


class ClientTooSlow(Exception):
    """A client did not take a piece of its streamed answer within the write deadline."""


class AudioStream(web.StreamResponse):
    """A streamed synthesis answer whose every write has a deadline (``ZSYNTH_WRITE_TIMEOUT``).

    ``write`` waits while the client's socket buffers are full; a client that reads nothing for the deadline is
    cut (:func:`finish_stream`) and its job cancelled, so it frees its worker. With the job's flow control
    (:mod:`zsynth.services.flow`) this bounds what a client that does not read can hold on the front.
    """

    def __init__(self, request: web.Request, headers: dict[str, str]) -> None:
        super().__init__(headers=headers)
        self.write_timeout_s = request.app[SETTINGS].flow.write_timeout_s

    async def write(self, data: bytes | bytearray | memoryview) -> None:
        """Write ``data``; ClientTooSlow when the client does not take it within the deadline."""
        try:
            async with asyncio.timeout(self.write_timeout_s):
                await super().write(data)
        except TimeoutError as err:
            raise ClientTooSlow from err

    async def write_eof(self, data: bytes = b"") -> None:
        """End the body; ClientTooSlow when the client does not take its end within the deadline."""
        try:
            async with asyncio.timeout(self.write_timeout_s):
                await super().write_eof(data)
        except TimeoutError as err:
            raise ClientTooSlow from err


async def finish_stream(
    request: web.Request, response: web.StreamResponse, speech: Speech, writing: Awaitable[None]
) -> web.StreamResponse:
    """Await ``writing`` (the chunks of a prepared response), then end the response the way the outcome calls for.

    A client that went away just ends it (the job is cancelled when the speech closes). A job that fails after the
    status line was sent cuts the connection without the final chunk, which every HTTP client reports as an
    incomplete transfer.
    """
    try:
        await writing
        await response.write_eof()
    except (ConnectionResetError, ClientConnectionResetError):
        logger.info("job %s: client went away mid-stream", speech.job.job_id)
        return response
    except ClientTooSlow:
        deadline = request.app[SETTINGS].flow.write_timeout_s
        logger.warning("job %s: the client took no audio for %g s; cut", speech.job.job_id, deadline)
        if request.transport is not None:
            request.transport.abort()
        return response
    except SynthesisFailed as err:
        failure = err.failure
        logger.warning(
            "job %s failed mid-stream: %s (%s: %s)", speech.job.job_id, failure.kind, failure.reason, failure.message
        )
        if request.transport is not None:
            request.transport.abort()
    return response


#: Turns a job's chunk events into the bytes of a streamed answer (raw audio, JSON lines, server-sent events).
Render = Callable[[AsyncIterator[Event]], AsyncIterator[bytes]]


async def stream_speech(
    request: web.Request, speech: Speech, headers: Mapping[str, str], render: Render
) -> web.StreamResponse:
    """Answer with ``speech`` streamed as ``render`` writes it: the one sequence every HTTP streaming route follows.

    The first chunk is awaited before the status line (a failure up to then is answered with the route's envelope);
    then each piece ``render`` yields is written within the write deadline (:class:`AudioStream`), and
    :func:`finish_stream` ends the answer, or cuts it on a failure or a client that stopped reading.
    """
    chunks = speech.chunks()
    first = await first_chunk(chunks)
    response = AudioStream(request, dict(headers))
    await response.prepare(request)

    async def events() -> AsyncIterator[Event]:
        if first is not None:
            yield first
            async for event in chunks:
                yield event

    async def write_all() -> None:
        async for data in render(events()):
            if data:
                await response.write(data)

    return await finish_stream(request, response, speech, write_all())
