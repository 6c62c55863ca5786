"""``POST /v1/text-to-speech/{voice_id}`` (whole body) and ``.../stream`` (chunked): text to speech over HTTP."""

from __future__ import annotations

from typing import Final

from ..audio import ALLOWED_OUTPUT_FORMATS, DEFAULT_OUTPUT_FORMAT, parse_output_format
from ..config import Settings
from .components import JSON, PathItems, Schema, nullable, operation, path_param, query_param, ref, responses
from .dictionaries import TEXT_FIELDS

SCHEMAS: Final[dict[str, Schema]] = {
    "VoiceSettingsInput": {
        "type": "object",
        "description": "Per-request voice settings; unknown fields are ignored, out-of-range values are clamped.",
        "properties": {
            "stability": nullable({"type": "number"}),
            "similarity_boost": nullable({"type": "number"}),
            "style": nullable({"type": "number"}),
            "use_speaker_boost": nullable({"type": "boolean"}),
            "speed": nullable({"type": "number"}),
        },
    },
    "TextToSpeechRequest": {
        "type": "object",
        "required": ["text"],
        "properties": {
            "text": {
                "type": "string",
                "pattern": "\\S",
                "description": "The text to speak: not blank, at most ZSYNTH_MAX_TEXT_CHARS characters.",
            },
            "model_id": nullable({"type": "string", "description": "Accepted and echoed; the engine is fixed."}),
            "voice_settings": nullable(ref("VoiceSettingsInput")),
            "seed": nullable({"type": "integer", "minimum": 0, "maximum": 4294967295}),
            **TEXT_FIELDS,
        },
    },
}

# Response headers ElevenLabs clients read on a TTS answer.
AUDIO_HEADERS: Final[dict[str, Schema]] = {
    "request-id": {"description": "This request's id (also in the logs).", "schema": {"type": "string"}},
    "character-cost": {"description": "Characters billed (the text length).", "schema": {"type": "string"}},
    "history-item-id": {"description": "The synthesis job's id.", "schema": {"type": "string"}},
    "x-voice-id": {
        "description": "The voice that spoke (the swap-out voice for unknown ids).",
        "schema": {"type": "string"},
    },
    "x-model-id": {"description": "The request's model_id, when it had one.", "schema": {"type": "string"}},
}


def apply_settings(schemas: dict[str, Schema], settings: Settings) -> None:
    """Write this deployment's text limit (ZSYNTH_MAX_TEXT_CHARS) into the request schema."""
    schemas["TextToSpeechRequest"]["properties"]["text"]["maxLength"] = settings.max_text_chars


def media_types(route: str) -> list[str]:
    """The audio media types a route may answer with, one per codec of its output formats."""
    types = (parse_output_format(name, route=route).media_type for name in ALLOWED_OUTPUT_FORMATS[route])
    return sorted(set(types))


def synthesis_operation(route: str, op_id: str, summary: str, ok: Schema | None = None) -> dict[str, Schema]:
    """A POST synthesis route: its voice, output format and JSON body; ``ok`` (default: audio bytes) is its 200."""
    audio = ok or {
        "description": "The audio, in the media type of output_format (mp3 unless asked otherwise).",
        "headers": AUDIO_HEADERS,
        "content": {media: {"schema": {}} for media in media_types(route)},
    }
    formats = {"enum": list(ALLOWED_OUTPUT_FORMATS[route]), "default": DEFAULT_OUTPUT_FORMAT}
    body = {"required": True, "content": {JSON: {"schema": ref("TextToSpeechRequest")}}}
    return {
        "post": operation(
            op_id,
            "text-to-speech",
            summary,
            responses({200: audio}, 400, 413, 422, 429, 500),
            parameters=[
                path_param("voice_id", "A built-in or cloned voice; unknown ids are spoken by the swap-out voice."),
                query_param("output_format", formats, "Codec, sample rate and bitrate of the audio."),
            ],
            body=body,
        )
    }


def paths() -> PathItems:
    """The HTTP text-to-speech routes (the WebSocket ones are outside OpenAPI)."""
    return {
        "/v1/text-to-speech/{voice_id}": synthesis_operation(
            "convert", "text_to_speech", "Synthesize; answer when complete."
        ),
        "/v1/text-to-speech/{voice_id}/stream": synthesis_operation(
            "stream", "text_to_speech_stream", "Synthesize; stream each chunk as soon as it is ready."
        ),
    }
