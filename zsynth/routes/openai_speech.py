"""OpenAI's speech API, ``POST /v1/audio/speech``: one more front door to the same synthesis path.

The request is checked here, then goes through :func:`tts.submit` (keys, token scope, queue bound, metrics and the
swap-out rule are the ElevenLabs routes' own), and the audio is streamed back as the worker makes it. Errors use
OpenAI's envelope (rendered by the error middleware for every path under ``/v1/audio/``) with the status codes of the
ElevenLabs routes.

* ``voice``: a name from ZSYNTH_OPENAI_VOICES (e.g. ``alloy=joe``), any zsynth voice id (clones included), or
  ``{"id": ...}``; anything else gets the swap-out voice.
* ``speed`` (0.25-4.0) is mapped onto the engine's 0.7-1.2 by :func:`engine_speed`.
* ``instructions`` is accepted and ignored: neither engine takes style prompts.
* ``model`` is any string, echoed in ``x-model-id``.
* ``apply_text_normalization`` and ``pronunciation_dictionary_locators`` (ElevenLabs' fields, an extension here)
  work as on the ElevenLabs routes; break tags too.
* ``stream_format: "sse"`` sends ``speech.audio.delta`` events (base64 audio in ``response_format``), then
  ``speech.audio.done`` with a usage that counts characters as input tokens.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import math
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

from ..audio import parse_output_format
from ..dispatch import JobFailed
from ..endpoints import Access, Endpoints
from ..errors import ApiError
from ..jsonbody import BadJson, read_json
from ..keys import SETTINGS
from ..openai_audio import MAX_SPEED, MIN_SPEED, RESPONSE_FORMATS, STREAM_FORMATS, ResponseFormat
from .tts import TtsRequest, audio_headers, finish_stream, job_failure, submit, text_options

routes = Endpoints()

PATH: Final = "/v1/audio/speech"
# The engines' speed range (workers/engines/piper.py and turbo.py clamp voice_settings.speed to it).
ENGINE_SLOWEST: Final = 0.7
ENGINE_FASTEST: Final = 1.2


@dataclass(slots=True)
class SpeechRequest:
    """A checked OpenAI speech request and the synthesis request it becomes."""

    tts: TtsRequest
    response_format: ResponseFormat
    sse: bool


def engine_speed(speed: float) -> float:
    """Map OpenAI's 0.25-4.0 onto the engine's 0.7-1.2, log-linearly on each side of 1.0.

    1.0 stays 1.0; each doubling adds 0.05 (2 -> 1.1, 4 -> 1.2); each halving takes 0.075 away (0.5 -> 0.85,
    0.25 -> 0.7). The order of speeds is kept, and the ends meet the engine's ends.
    """
    octaves = math.log2(speed) / 2.0  # -1 at 0.25, +1 at 4.0
    span = (ENGINE_FASTEST - 1.0) if octaves >= 0 else (1.0 - ENGINE_SLOWEST)
    return round(1.0 + octaves * span, 4)


def _bad(status: int, code: str, message: str, param: str | None) -> ApiError:
    return ApiError(status, code, message, param=param)


def _string(body: dict[str, Any], name: str, *, required: bool = False) -> str | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        need = "is required and must be a non-empty string" if required else "must be a string"
        raise _bad(422, "invalid_parameters", f"Field '{name}' {need}.", name)
    return value


def _voice(body: dict[str, Any], mapping: dict[str, str]) -> str:
    raw = body.get("voice")
    if isinstance(raw, dict):
        raw = raw.get("id")
    if not isinstance(raw, str) or not raw.strip():
        raise _bad(
            422, "invalid_parameters", "Field 'voice' must be a voice name, a voice id or {\"id\": ...}.", "voice"
        )
    return mapping.get(raw, raw)


def _speed(body: dict[str, Any]) -> float:
    raw = body.get("speed")
    if raw is None:
        return 1.0
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not MIN_SPEED <= raw <= MAX_SPEED:
        raise _bad(
            422, "invalid_parameters", f"Field 'speed' must be a number from {MIN_SPEED} to {MAX_SPEED}.", "speed"
        )
    return float(raw)


def _choice(body: dict[str, Any], name: str, allowed: tuple[str, ...], default: str) -> str:
    value = body.get(name)
    if value is None:
        return default
    if value not in allowed:
        raise _bad(400, f"invalid_{name}", f"Unsupported {name} {value!r}: use one of {', '.join(allowed)}.", name)
    return str(value)


async def parse_speech_request(request: web.Request) -> SpeechRequest:
    """Check the JSON body; raise ApiError (rendered in OpenAI's envelope) on bad input."""
    try:
        body = await read_json(request)
    except BadJson as err:
        raise _bad(
            400, "invalid_json", "The request body must be a JSON object with 'input' and 'voice'.", None
        ) from err
    if not isinstance(body, dict):
        raise _bad(400, "invalid_json", "The request body must be a JSON object with 'input' and 'voice'.", None)
    settings = request.app[SETTINGS]
    text = _string(body, "input", required=True)
    assert text is not None
    if len(text) > settings.max_text_chars:
        raise _bad(
            400,
            "max_character_limit_exceeded",
            f"'input' has {len(text)} characters and exceeds the limit of {settings.max_text_chars} characters.",
            "input",
        )
    model = _string(body, "model")
    _string(body, "instructions")  # accepted (type-checked) and ignored: the engines take no style prompt
    fmt = RESPONSE_FORMATS[_choice(body, "response_format", tuple(RESPONSE_FORMATS), "mp3")]
    sse = _choice(body, "stream_format", STREAM_FORMATS, "audio") == "sse"
    tts = TtsRequest(
        voice_id=_voice(body, dict(settings.openai_voices)),
        text=text,
        fmt=parse_output_format(fmt.worker_format, route="stream"),
        model_id=model,
        voice_settings={"speed": engine_speed(_speed(body))},
        seed=None,
        options=text_options(body),
    )
    return SpeechRequest(tts, fmt, sse)


def _sse(event: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"


@routes.post(PATH, access=Access.TOKEN)
async def speech(request: web.Request) -> web.StreamResponse:
    """Synthesize ``input`` and stream it back as it is made (or as server-sent events)."""
    speech_request = await parse_speech_request(request)
    tts, fmt = speech_request.tts, speech_request.response_format
    async with await submit(request, tts) as job_stream:
        encoder = fmt.encoder()  # made while the job waits for a worker
        chunks = job_stream.chunks()
        try:
            first = await anext(chunks, None)
        except JobFailed as err:
            raise job_failure(err) from err
        headers = audio_headers(request, tts, job_stream.job)
        headers["Content-Type"] = "text/event-stream" if speech_request.sse else fmt.media_type
        if speech_request.sse:
            headers["Cache-Control"] = "no-cache"
        response = web.StreamResponse(headers=headers)
        await response.prepare(request)

        async def encode(audio: bytes | None) -> bytes:
            """Encode a chunk (None: flush), in a thread for the formats that cost milliseconds."""
            step = encoder.finish if audio is None else functools.partial(encoder.encode, audio)
            return await asyncio.to_thread(step) if fmt.threaded else step()

        async def send(audio: bytes) -> None:
            if not audio:
                return
            if speech_request.sse:
                await response.write(_sse({"type": "speech.audio.delta", "audio": base64.b64encode(audio).decode()}))
            else:
                await response.write(audio)

        async def write_all() -> None:
            if first is not None:
                await send(await encode(first.audio))
                async for event in chunks:
                    await send(await encode(event.audio))
            await send(await encode(None))
            if speech_request.sse:
                chars = len(tts.text)
                usage = {"input_tokens": chars, "output_tokens": 0, "total_tokens": chars}
                await response.write(_sse({"type": "speech.audio.done", "usage": usage}))

        return await finish_stream(request, response, job_stream, write_all())
