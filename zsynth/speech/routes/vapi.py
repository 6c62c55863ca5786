"""Vapi's custom voice, ``POST /v1/vapi/tts``: raw PCM at the call's sample rate, streamed as it is made.

Vapi (``voice.provider: "custom-voice"``, ``server.url`` pointing here) sends
``{"message": {"type": "voice-request", "text", "sampleRate", "assistant": {"voice": {"voiceId"}}, ...}}`` with its
server secret in ``X-VAPI-SECRET`` (a zsynth key; ``Authorization: Bearer`` works too), and plays the answer's bytes
into the call as they arrive. The answer is 200 ``application/octet-stream``: signed 16-bit little-endian mono PCM at
exactly ``sampleRate``, chunked, written sentence by sentence as the worker makes it. Everything Vapi does not
document as required is optional; other fields of its message (call, customer, timestamp...) are ignored. Refusals
come before the first byte, in the speech API's envelope, with the status of the ElevenLabs routes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Final

import pydantic
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from zsynth.core.audio import parse_output_format
from zsynth.core.codes import ApiCode
from zsynth.core.protocol import Event
from zsynth.kit.endpoints import Access, Endpoints, refusal
from zsynth.services.voices import VOICES
from zsynth.speech.schemas.apidoc import AUDIO_HEADERS
from zsynth.speech.schemas.bodies import require, spoken_text, spoken_text_field
from zsynth.speech.synthesis_http import TtsRequest, audio_headers, speak, stream_speech

routes = Endpoints()

#: The sample rates Vapi asks for (its documentation's four, and the 44100 its example server accepts).
SAMPLE_RATES: Final = (8000, 16000, 22050, 24000, 44100)
_BAD_BODY: Final = "The request body must be a JSON object with a 'message' holding 'type', 'text' and 'sampleRate'."


class VapiVoice(BaseModel):
    """The assistant's voice: only ``voiceId`` is read."""

    model_config = ConfigDict(extra="ignore")

    voiceId: str | None = Field(default=None, description="A zsynth voice id; unknown ids get the swap-out voice.")


class VapiAssistant(BaseModel):
    """The assistant of the call: only its voice is read."""

    model_config = ConfigDict(extra="ignore")

    voice: VapiVoice | None = None


def _type(value: object) -> object:
    if value != "voice-request":
        raise refusal(ApiCode.INVALID_PARAMETERS, "Field 'message.type' must be 'voice-request'.", param="message.type")
    return value


def _sample_rate(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int) or value not in SAMPLE_RATES:
        shown = repr(value) if len(repr(value)) <= 24 else repr(value)[:24] + "..."
        raise refusal(
            ApiCode.INVALID_SAMPLE_RATE,
            f"Field 'message.sampleRate' must be one of {', '.join(map(str, SAMPLE_RATES))} (got {shown}).",
            400,
            param="message.sampleRate",
        )
    return value


class VapiMessage(BaseModel):
    """Vapi's ``ServerMessageVoiceRequest``: the fields read here, the others ignored."""

    model_config = ConfigDict(extra="ignore", json_schema_extra=require("type", "text", "sampleRate"))

    type: Annotated[str, pydantic.BeforeValidator(_type), pydantic.WithJsonSchema({"const": "voice-request"})] = Field(
        default=None, validate_default=True
    )
    text: Annotated[
        str,
        spoken_text(
            "message.text", "'message.text' has {length} characters and exceeds the limit of {limit} characters."
        ),
    ] = spoken_text_field()
    sampleRate: Annotated[
        int, pydantic.BeforeValidator(_sample_rate), pydantic.WithJsonSchema({"enum": list(SAMPLE_RATES)})
    ] = Field(default=None, validate_default=True, description="The PCM sample rate of the answer.")
    assistant: VapiAssistant | None = None


def _message(value: object) -> object:
    if not isinstance(value, dict):
        raise refusal(ApiCode.INVALID_PARAMETERS, "Field 'message' is required and must be an object.", param="message")
    return value


class VapiRequest(BaseModel):
    """The body Vapi posts to a custom voice's server URL."""

    model_config = ConfigDict(extra="ignore", json_schema_extra=require("message"))

    message: Annotated[VapiMessage, pydantic.BeforeValidator(_message)] = Field(default=None, validate_default=True)


def vapi_request(request: web.Request, body: VapiRequest) -> TtsRequest:
    """The synthesis request of a validated body: the assistant's voice (else the swap-out voice), raw PCM."""
    message = body.message
    voice = message.assistant.voice if message.assistant is not None else None
    voice_id = voice.voiceId if voice is not None and voice.voiceId else None
    catalog = request.app.get(VOICES)
    return TtsRequest(
        voice_id=voice_id or (catalog.swapout() if catalog is not None else "default"),
        text=message.text,
        fmt=parse_output_format(f"pcm_{message.sampleRate}", route="stream"),
        model_id=None,
        voice_settings={},
        seed=None,
    )


@routes.post(
    "/v1/vapi/tts",
    access=Access.TOKEN,
    body=VapiRequest,
    bad_json=_BAD_BODY,
    operationId="vapi_custom_voice",
    tags=["vapi"],
    summary="Vapi's custom voice: raw s16le mono PCM at the requested sampleRate, streamed as it is made.",
    responses={
        200: {
            "description": "Raw signed 16-bit little-endian mono PCM at message.sampleRate, chunked, no header.",
            "headers": AUDIO_HEADERS,
            "content": {"application/octet-stream": {"schema": {}}},
        }
    },
    errors=(400, 404, 413, 422, 429, 500),
)
async def vapi_tts(request: web.Request, body: VapiRequest) -> web.StreamResponse:
    """Speak ``message.text`` and stream it back as raw PCM, each chunk as soon as it is made."""
    tts = vapi_request(request, body)
    async with await speak(request, tts) as speech:
        headers = audio_headers(request, tts, speech.job) | {"Content-Type": "application/octet-stream"}
        return await stream_speech(request, speech, headers, _raw_pcm)


async def _raw_pcm(events: AsyncIterator[Event]) -> AsyncIterator[bytes]:
    """Each chunk's PCM as it is: Vapi plays the bytes as they arrive."""
    async for event in events:
        yield event.audio
