"""Text to speech over HTTP: ``POST /v1/text-to-speech/{voice_id}`` (whole body) and ``.../stream`` (chunked)."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.client_exceptions import ClientConnectionResetError

from ..audio import OutputFormat, OutputFormatError, parse_output_format
from ..auth import CREDENTIAL
from ..dictionaries.store import DICTIONARIES, StorageUnavailable
from ..dispatch import DISPATCHER, JobFailed, JobStream
from ..endpoints import Access, Endpoints
from ..errors import ApiError
from ..jsonbody import BadJson, read_json
from ..keys import REQUEST_ID, SETTINGS
from ..protocol import Job
from ..spoken import Spoken
from ..textprep import TextOptionError, TextOptions, parse_options, prepare
from ..voices.catalog import VOICES

logger = logging.getLogger(__name__)

routes = Endpoints()

# Job failures that mean "try again later" rather than "this request is wrong".
_UNAVAILABLE = {
    "timeout",
    "worker_restarted",
    "worker_stopping",
    "worker_died",
    "shutting_down",
    "lost_events",
    "deadline_exceeded",
    "redis_unavailable",
}
_VOICE_FAILURES = {"voice_not_found": 404, "voice_storage_unavailable": 503}

_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
# voice_settings fields that must be numbers when present.
_NUMERIC_SETTINGS = ("stability", "similarity_boost", "style", "speed")


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
    # What the engine speaks, once submitted (None until then).
    spoken: Spoken | None = None


def text_options(body: dict[str, Any]) -> TextOptions:
    """The body's ``apply_text_normalization`` and ``pronunciation_dictionary_locators``, or ApiError."""
    try:
        return parse_options(body)
    except TextOptionError as err:
        raise ApiError(err.status, err.code, err.message, param=err.param) from err


async def parse_tts_request(request: web.Request, route: str) -> TtsRequest:
    """Validate path, query and JSON body; raise ApiError with the ElevenLabs envelope on bad input."""
    voice_id = request.match_info["voice_id"]
    try:
        fmt = parse_output_format(request.query.get("output_format"), route=route)
    except OutputFormatError as err:
        raise ApiError(400, "invalid_output_format", str(err), param="output_format") from err
    try:
        # Fix (hostile input): request.json() let deep nesting, 5000-digit numbers and bogus charsets through as 500s.
        body = await read_json(request)
    except BadJson as err:
        raise ApiError(400, "invalid_json", "The request body must be a JSON object with a 'text' field.") from err
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", "The request body must be a JSON object with a 'text' field.")
    text = body.get("text")
    if not isinstance(text, str) or not text.strip():
        raise ApiError(
            422, "invalid_parameters", "Field 'text' is required and must be a non-empty string.", param="text"
        )
    limit = request.app[SETTINGS].max_text_chars
    if len(text) > limit:
        raise ApiError(
            400,
            "max_character_limit_exceeded",
            f"This request's text has {len(text)} characters and exceeds the character limit of {limit} characters.",
            param="text",
        )
    model_id = body.get("model_id")
    if model_id is not None and not isinstance(model_id, str):
        raise ApiError(422, "invalid_parameters", "Field 'model_id' must be a string.", param="model_id")
    voice_settings = check_voice_settings(body.get("voice_settings"))
    seed = body.get("seed")
    if isinstance(seed, float) and seed.is_integer():
        # Fix (fuzzing): 42.0 is an integer in JSON Schema (and to JavaScript clients); accept it as 42.
        seed = int(seed)
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= 4294967295):
        raise ApiError(422, "invalid_parameters", "Field 'seed' must be an integer 0..4294967295.", param="seed")
    return TtsRequest(voice_id, text, fmt, model_id, voice_settings, seed, text_options(body))


def check_voice_settings(raw: object) -> dict[str, Any]:
    """The request's voice settings; known fields must have their documented types (null means "default").

    Fix (fuzzing): these went to the worker unchecked, so {"speed": {}} was accepted and a 400-digit integer
    made the engine's float() raise OverflowError mid-job (a 500).
    """
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ApiError(422, "invalid_parameters", "Field 'voice_settings' must be an object.", param="voice_settings")
    for name in _NUMERIC_SETTINGS:
        value = raw.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not _finite(value):
            raise ApiError(
                422, "invalid_parameters", f"voice_settings.{name} must be a number.", param=f"voice_settings.{name}"
            )
    boost = raw.get("use_speaker_boost")
    if boost is not None and not isinstance(boost, bool):
        raise ApiError(
            422,
            "invalid_parameters",
            "voice_settings.use_speaker_boost must be true or false.",
            param="voice_settings.use_speaker_boost",
        )
    return raw


def _finite(value: float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def job_failure(err: JobFailed) -> ApiError:
    """Map a failed job to the error a client sees; 503 + Retry-After for transient ones."""
    if err.code == "queue_full":
        return ApiError(429, "system_busy", err.message, headers={"Retry-After": "1"})
    if err.code in _UNAVAILABLE:
        return ApiError(503, "system_busy", err.message, headers={"Retry-After": "1"})
    if err.code in _VOICE_FAILURES:  # the worker could not load the voice (it never speaks another one)
        status = _VOICE_FAILURES[err.code]
        return ApiError(status, err.code, err.message, headers={"Retry-After": "5"} if status == 503 else None)
    return ApiError(500, err.code, err.message)


def audio_headers(request: web.Request, tts: TtsRequest, job: Job) -> dict[str, str]:
    """Headers ElevenLabs clients read on a TTS answer."""
    headers = {
        "Content-Type": tts.fmt.media_type,
        "request-id": request[REQUEST_ID],
        "character-cost": str(len(tts.text)),
        "history-item-id": job.job_id,
        "x-voice-id": job.voice_id,
    }
    if tts.model_id:
        # Fix (fuzzing): a model_id with a control character (e.g. a newline) made aiohttp refuse to write the
        # headers ("header injection"), which dropped the connection on convert and answered 500 on stream.
        headers["x-model-id"] = _CONTROL_CHARS.sub("", tts.model_id)
    return headers


async def submit(request: web.Request, tts: TtsRequest, *, alignment: bool = False) -> JobStream:
    """Queue the job for this request, with an unknown voice id swapped for the swap-out voice.

    ``alignment`` asks the worker for character timing with every chunk (the with-timestamps routes). The text is
    prepared first (break tags, dictionaries, normalization: :mod:`zsynth.textprep`); ``tts.spoken`` keeps the result.
    """
    settings = request.app[SETTINGS]
    try:
        tts.spoken = await prepare(tts.text, tts.options, settings.engine, request.app.get(DICTIONARIES))
    except TextOptionError as err:
        raise ApiError(err.status, err.code, err.message, param=err.param) from err
    except StorageUnavailable as err:
        raise ApiError(
            503,
            "dictionary_storage_unavailable",
            f"Pronunciation dictionaries cannot be read ({err}).",
            headers={"Retry-After": "1"},
        ) from err
    job = Job(
        text=tts.spoken.text if tts.spoken.changed else tts.text,
        voice_id=request.app[VOICES].resolve(tts.voice_id),
        output_format=tts.fmt.name,
        voice_settings=tts.voice_settings,
        request_id=request[REQUEST_ID],
        alignment=alignment,
        seed=tts.seed,
    )
    logger.info(
        "request %s: job %s voice %s (asked %s) format %s model %s (%d chars)",
        job.request_id,
        job.job_id,
        job.voice_id,
        tts.voice_id,
        tts.fmt.name,
        tts.model_id or "-",
        len(tts.text),
        extra={"request_id": job.request_id, "job_id": job.job_id},
    )
    try:
        credential = request.get(CREDENTIAL)
        owner = credential.fingerprint if credential is not None and credential.kind != "open" else None
        stream: JobStream = await request.app[DISPATCHER].submit(job, owner=owner)
    except JobFailed as err:
        raise job_failure(err) from err
    return stream


@routes.post("/v1/text-to-speech/{voice_id}", access=Access.TOKEN)
async def convert(request: web.Request) -> web.Response:
    """Whole-body synthesis: the answer is sent once the audio is complete."""
    tts = await parse_tts_request(request, "convert")
    parts: list[bytes] = []
    async with await submit(request, tts) as stream:
        try:
            async for event in stream.chunks():
                parts.append(event.audio)
        except JobFailed as err:
            raise job_failure(err) from err
        return web.Response(body=b"".join(parts), headers=audio_headers(request, tts, stream.job))


@routes.post("/v1/text-to-speech/{voice_id}/stream", access=Access.TOKEN)
async def stream(request: web.Request) -> web.StreamResponse:
    """Chunked synthesis: each chunk is written as soon as the worker publishes it.

    Errors before the first byte are answered with the JSON envelope (503 for transient ones). After that the
    status is already sent, so a failure ends the response without the final chunk, which clients detect as an
    incomplete transfer.
    """
    tts = await parse_tts_request(request, "stream")
    async with await submit(request, tts) as job_stream:
        chunks = job_stream.chunks()
        try:
            first = await anext(chunks)
        except StopAsyncIteration:
            first = None
        except JobFailed as err:
            raise job_failure(err) from err
        response = web.StreamResponse(headers=audio_headers(request, tts, job_stream.job))
        await response.prepare(request)

        async def write_all() -> None:
            if first is not None:
                await response.write(first.audio)
                async for event in chunks:
                    await response.write(event.audio)

        return await finish_stream(request, response, job_stream, write_all())


async def finish_stream(
    request: web.Request, response: web.StreamResponse, job_stream: JobStream, writing: Awaitable[None]
) -> web.StreamResponse:
    """Await ``writing`` (the chunks of a prepared response), then end the response the way the outcome calls for.

    A client that went away just ends it (the job is cancelled when the stream closes). A job that fails after the
    status line was sent cuts the connection without the final chunk, which every HTTP client reports as an
    incomplete transfer.
    """
    try:
        await writing
    except (ConnectionResetError, ClientConnectionResetError):
        logger.info("job %s: client went away mid-stream", job_stream.job.job_id)
        return response
    except JobFailed as err:
        logger.warning("job %s failed mid-stream: %s (%s)", job_stream.job.job_id, err.code, err.message)
        if request.transport is not None:
            request.transport.abort()
        return response
    await response.write_eof()
    return response
