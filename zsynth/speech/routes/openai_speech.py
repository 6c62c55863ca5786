"""OpenAI's speech API, ``POST /v1/audio/speech``: one more front door to the same synthesis path.

The request is checked here, then goes through the synthesis service like the ElevenLabs routes' own
(:func:`zsynth.speech.synthesis_http.speak`: keys, token scope, queue bound, metrics, the fetch of a cloned voice
this box lacks and the swap-out rule), and the audio is streamed back as the worker makes it. Errors use
OpenAI's envelope (the route declares it; the error middleware and the document read the declaration) with the status
codes of the ElevenLabs routes.

* ``voice``: a name from ZSYNTH_OPENAI_VOICES (e.g. ``alloy=joe``), any zsynth voice id (clones included), or
  ``{"id": ...}``; anything else gets the swap-out voice.
* ``speed`` (0.25-4.0) is mapped onto the engine's 0.7-1.2 by :func:`engine_speed`.
* ``instructions`` is accepted and ignored: neither engine takes style prompts.
* ``model`` is any string of at most 128 characters, echoed in ``x-model-id``.
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
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any, Final

import pydantic
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from zsynth.core.audio import parse_output_format
from zsynth.core.codes import ApiCode
from zsynth.core.protocol import Event
from zsynth.kit.endpoints import Access, Endpoints, refusal
from zsynth.services.keys import SETTINGS
from zsynth.speech.openai_audio import MAX_SPEED, MIN_SPEED, RESPONSE_FORMATS, STREAM_FORMATS, ResponseFormat, usable
from zsynth.speech.schemas.apidoc import AUDIO_HEADERS, OpenAIError
from zsynth.speech.schemas.bodies import (
    Locators,
    Normalization,
    checked_model_id,
    model_id_field,
    one_of,
    optional_string,
    require,
    spoken_text,
    spoken_text_field,
    text_options,
)
from zsynth.speech.synthesis_http import TtsRequest, audio_headers, speak, stream_speech

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


class VoiceId(BaseModel):
    """A voice given as an object, as OpenAI's newer clients send it."""

    id: str = Field(pattern=r"\S")


def _choice(name: str, value: object, allowed: tuple[str, ...]) -> object:
    if value is not None and value not in allowed:
        raise refusal(f"invalid_{name}", f"Unsupported {name} {value!r}: use one of {', '.join(allowed)}.", 400)
    return value


class OpenAISpeechRequest(BaseModel):
    """The body of ``POST /v1/audio/speech`` (OpenAI's fields, plus ElevenLabs' text options)."""

    model_config = ConfigDict(json_schema_extra=require("input", "voice"))

    input: Annotated[
        str,
        spoken_text("input", "'input' has {length} characters and exceeds the limit of {limit} characters."),
    ] = spoken_text_field()
    model: str | None = model_id_field("Any model name; accepted and echoed in x-model-id.")
    instructions: str | None = Field(default=None, description="Accepted; the engines take no style prompts.")
    response_format: Annotated[str | None, one_of(*RESPONSE_FORMATS)] = Field(
        default=None, json_schema_extra={"default": "mp3"}
    )
    stream_format: Annotated[str | None, one_of(*STREAM_FORMATS)] = Field(
        default=None, json_schema_extra={"default": "audio"}
    )
    voice: Annotated[str, Field(pattern=r"\S")] | VoiceId = Field(
        default=None,
        validate_default=True,
        description='A name mapped by ZSYNTH_OPENAI_VOICES, a zsynth voice id, or {"id": ...}; anything else is '
        "spoken by the swap-out voice.",
    )
    speed: float | None = Field(
        default=None,
        ge=MIN_SPEED,
        le=MAX_SPEED,
        description="Mapped onto the engine's 0.7-1.2, log-linearly: 0.25->0.7, 0.5->0.85, 1->1, 2->1.1, 4->1.2.",
        json_schema_extra={"default": 1.0},
    )
    apply_text_normalization: Normalization
    pronunciation_dictionary_locators: Locators

    @pydantic.field_validator("model", mode="before")
    @classmethod
    def _model(cls, value: object) -> object:
        return checked_model_id("model", value)

    @pydantic.field_validator("instructions", mode="before")
    @classmethod
    def _instructions(cls, value: object) -> object:
        return optional_string("instructions", value)

    @pydantic.field_validator("response_format", mode="before")
    @classmethod
    def _response_format(cls, value: object) -> object:
        _choice("response_format", value, tuple(RESPONSE_FORMATS))
        lacking = usable(value) if isinstance(value, str) else None
        if lacking is not None:  # a format whose library this installation lacks (aac without PyAV)
            raise refusal(ApiCode.INVALID_RESPONSE_FORMAT, lacking, 400)
        return value

    @pydantic.field_validator("stream_format", mode="before")
    @classmethod
    def _stream_format(cls, value: object) -> object:
        return _choice("stream_format", value, STREAM_FORMATS)

    @pydantic.field_validator("voice", mode="before")
    @classmethod
    def _voice(cls, value: object) -> object:
        raw = value.get("id") if isinstance(value, dict) else value
        if not isinstance(raw, str) or not raw.strip():
            raise refusal(
                ApiCode.INVALID_PARAMETERS, "Field 'voice' must be a voice name, a voice id or {\"id\": ...}."
            )
        return raw

    @pydantic.field_validator("speed", mode="before")
    @classmethod
    def _speed(cls, value: object) -> object:
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or not MIN_SPEED <= value <= MAX_SPEED
        ):
            raise refusal(
                ApiCode.INVALID_PARAMETERS, f"Field 'speed' must be a number from {MIN_SPEED} to {MAX_SPEED}."
            )
        return value


_BAD_BODY: Final = "The request body must be a JSON object with 'input' and 'voice'."


def speech_request(request: web.Request, body: OpenAISpeechRequest) -> SpeechRequest:
    """The synthesis request of a declared body (parsed before the handler runs, refused in OpenAI's envelope)."""
    settings = request.app[SETTINGS]
    fmt = RESPONSE_FORMATS[body.response_format or "mp3"]
    voice = body.voice
    assert isinstance(voice, str)  # the validator reads {"id": ...} into its string; VoiceId only documents it
    tts = TtsRequest(
        voice_id=dict(settings.voices.openai).get(voice, voice),
        text=body.input,
        fmt=parse_output_format(fmt.worker_format, route="stream"),
        model_id=body.model,
        voice_settings={"speed": engine_speed(body.speed if body.speed is not None else 1.0)},
        seed=None,
        options=text_options(body.apply_text_normalization, body.pronunciation_dictionary_locators),
    )
    return SpeechRequest(tts, fmt, body.stream_format == "sse")


def _sse(event: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"


@routes.post(
    PATH,
    access=Access.TOKEN,
    body=OpenAISpeechRequest,
    bad_json=_BAD_BODY,
    operationId="openai_create_speech",
    tags=["openai"],
    summary="OpenAI speech API: synthesize input and stream it back.",
    responses={
        200: {
            "description": "The audio in response_format, streamed as it is made (flac is sent once complete), "
            "or server-sent events (speech.audio.delta, then speech.audio.done) with stream_format sse.",
            "headers": AUDIO_HEADERS,
            "content": {
                **{fmt.media_type: {"schema": {}} for fmt in RESPONSE_FORMATS.values()},
                "text/event-stream": {"schema": {}},
            },
        }
    },
    errors=(400, 404, 413, 422, 429, 500),
    error_envelope=OpenAIError,
)
async def speech(request: web.Request, body: OpenAISpeechRequest) -> web.StreamResponse:
    """Synthesize ``input`` and stream it back as it is made (or as server-sent events)."""
    asked = speech_request(request, body)
    tts, fmt = asked.tts, asked.response_format
    async with await speak(request, tts) as speech:
        encoder = fmt.encoder()  # made while the job waits for a worker
        headers = audio_headers(request, tts, speech.job)
        headers["Content-Type"] = "text/event-stream" if asked.sse else fmt.media_type
        if asked.sse:
            headers["Cache-Control"] = "no-cache"

        async def encode(audio: bytes | None) -> bytes:
            """Encode a chunk (None: flush), in a thread for the formats that cost milliseconds."""
            step = encoder.finish if audio is None else functools.partial(encoder.encode, audio)
            return await asyncio.to_thread(step) if fmt.threaded else step()

        def framed(audio: bytes) -> bytes:
            if not audio or not asked.sse:
                return audio
            return _sse({"type": "speech.audio.delta", "audio": base64.b64encode(audio).decode()})

        async def render(events: AsyncIterator[Event]) -> AsyncIterator[bytes]:
            async for event in events:
                yield framed(await encode(event.audio))
            yield framed(await encode(None))
            if asked.sse:
                chars = len(tts.text)
                usage = {"input_tokens": chars, "output_tokens": 0, "total_tokens": chars}
                yield _sse({"type": "speech.audio.done", "usage": usage})

        return await stream_speech(request, speech, headers, render)
