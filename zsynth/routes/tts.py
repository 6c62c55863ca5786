"""Text to speech over HTTP: ``POST /v1/text-to-speech/{voice_id}`` (whole body) and ``.../stream`` (chunked)."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.client_exceptions import ClientConnectionResetError

from ..audio import OutputFormat, OutputFormatError, parse_output_format
from ..auth import CREDENTIAL
from ..dispatch import JobFailed, JobStream
from ..errors import ApiError
from ..jsonbody import BadJson, read_json
from ..keys import REQUEST_ID, SETTINGS
from ..protocol import Job
from ..spoken import Spoken
from ..synthesis import Failure, SynthesisFailed, SynthesisRequest, SynthesisService, classify, queue_owner
from ..textprep import TextOptionError, TextOptions, parse_options
from ..voice_settings import InvalidParameter, check_seed
from ..voice_settings import check_voice_settings as check_settings

logger = logging.getLogger(__name__)

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
    # What the engine speaks, once submitted (None until then).
    spoken: Spoken | None = None


def text_options(body: dict[str, Any]) -> TextOptions:
    """The body's ``apply_text_normalization`` and ``pronunciation_dictionary_locators``, or ApiError."""
    try:
        return parse_options(body)
    except TextOptionError as err:
        raise api_error(classify(err)) from err


async def parse_tts_request(request: web.Request, route: str) -> TtsRequest:
    """Validate path, query and JSON body; raise ApiError with the ElevenLabs envelope on bad input."""
    voice_id = request.match_info["voice_id"]
    try:
        fmt = parse_output_format(request.query.get("output_format"), route=route)
    except OutputFormatError as err:
        raise ApiError(400, "invalid_output_format", str(err), param="output_format") from err
    try:
        # Not request.json(): read_json bounds nesting and number sizes and refuses bogus charsets.
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
    try:
        voice_settings = check_settings(body.get("voice_settings"))
        seed = check_seed(body.get("seed"))
    except InvalidParameter as err:
        raise ApiError(422, err.code, err.message, param=err.param) from err
    return TtsRequest(voice_id, text, fmt, model_id, voice_settings, seed, text_options(body))


def check_voice_settings(raw: object) -> dict[str, Any]:
    """The request's voice settings (:func:`zsynth.voice_settings.check_voice_settings`), or a 422 ApiError."""
    try:
        return check_settings(raw)
    except InvalidParameter as err:
        raise ApiError(422, err.code, err.message, param=err.param) from err


def api_error(failure: Failure) -> ApiError:
    """A classified failure in the HTTP routes' envelope."""
    return ApiError(
        failure.http_status, failure.code, failure.message, param=failure.param, headers=failure.headers or None
    )


def job_failure(err: JobFailed) -> ApiError:
    """A failed job as the error a client sees; 503 + Retry-After for transient ones."""
    return api_error(classify(err))


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
        # aiohttp refuses to write a header with a control character in it (header injection).
        headers["x-model-id"] = _CONTROL_CHARS.sub("", tts.model_id)
    return headers


async def submit(request: web.Request, tts: TtsRequest, *, alignment: bool = False) -> JobStream:
    """Queue the job for this request through the synthesis service (:mod:`zsynth.synthesis`).

    ``alignment`` asks the worker for character timing with every chunk (the with-timestamps routes). An unknown
    voice id gets the swap-out voice; ``tts.spoken`` keeps what the text became (break tags, dictionaries,
    normalization: :mod:`zsynth.textprep`).
    """
    service = SynthesisService.of(request.app)
    asked = SynthesisRequest(
        text=tts.text,
        voice_id=tts.voice_id,
        output_format=tts.fmt.name,
        request_id=request[REQUEST_ID],
        voice_settings=tts.voice_settings,
        seed=tts.seed,
        options=tts.options,
        alignment=alignment,
    )
    try:
        prepared = await service.build(asked)
        tts.spoken = prepared.spoken
        job = prepared.job
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
        return await service.submit(job, owner=queue_owner(request.get(CREDENTIAL)))
    except SynthesisFailed as err:
        raise api_error(err.failure) from err


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
        failure = classify(err)
        logger.warning(
            "job %s failed mid-stream: %s (%s: %s)", job_stream.job.job_id, failure.kind, err.code, err.message
        )
        if request.transport is not None:
            request.transport.abort()
        return response
    await response.write_eof()
    return response


def setup(app: web.Application) -> None:
    """Register the TTS routes."""
    app.router.add_post("/v1/text-to-speech/{voice_id}", convert)
    app.router.add_post("/v1/text-to-speech/{voice_id}/stream", stream)
