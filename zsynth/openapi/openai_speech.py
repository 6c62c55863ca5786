"""``POST /v1/audio/speech``: OpenAI's speech API, with OpenAI's error envelope."""

from __future__ import annotations

from typing import Final

from ..config import Settings
from ..openai_audio import MAX_SPEED, MIN_SPEED, RESPONSE_FORMATS, STREAM_FORMATS
from .components import AUTH_ERRORS, JSON, PathItems, Schema, error, nullable, operation, ref
from .dictionaries import TEXT_FIELDS
from .tts import AUDIO_HEADERS

SCHEMAS: Final[dict[str, Schema]] = {
    "OpenAISpeechRequest": {
        "type": "object",
        "required": ["input", "voice"],
        "properties": {
            "input": {
                "type": "string",
                "pattern": "\\S",
                "description": "The text to speak: not blank, at most ZSYNTH_MAX_TEXT_CHARS characters.",
            },
            "model": nullable({"type": "string", "description": "Any model name; accepted and echoed in x-model-id."}),
            "voice": {
                "description": 'A name mapped by ZSYNTH_OPENAI_VOICES, a zsynth voice id, or {"id": ...}; '
                "anything else is spoken by the swap-out voice.",
                "anyOf": [
                    {"type": "string", "pattern": "\\S"},
                    {"type": "object", "required": ["id"], "properties": {"id": {"type": "string", "pattern": "\\S"}}},
                ],
            },
            "instructions": nullable({"type": "string", "description": "Accepted; the engines take no style prompts."}),
            **TEXT_FIELDS,
            "response_format": nullable({"enum": list(RESPONSE_FORMATS), "default": "mp3"}),
            "speed": nullable(
                {
                    "type": "number",
                    "minimum": MIN_SPEED,
                    "maximum": MAX_SPEED,
                    "default": 1.0,
                    "description": "Mapped onto the engine's 0.7-1.2, log-linearly: 0.25->0.7, 0.5->0.85, 1->1, "
                    "2->1.1, 4->1.2.",
                }
            ),
            "stream_format": nullable({"enum": list(STREAM_FORMATS), "default": "audio"}),
        },
    },
    "OpenAIError": {
        "type": "object",
        "description": "OpenAI's error envelope; code is the zsynth status (e.g. invalid_api_key, system_busy).",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["message", "type", "param", "code"],
                "properties": {
                    "message": {"type": "string"},
                    "type": {"type": "string", "examples": ["invalid_request_error"]},
                    "param": {"type": ["string", "null"]},
                    "code": {"type": ["string", "null"]},
                },
                "additionalProperties": False,
            }
        },
        "additionalProperties": False,
    },
}


def apply_settings(schemas: dict[str, Schema], settings: Settings) -> None:
    """Write this deployment's text limit (ZSYNTH_MAX_TEXT_CHARS) into the request schema."""
    schemas["OpenAISpeechRequest"]["properties"]["input"]["maxLength"] = settings.max_text_chars


def _error(status: int) -> Schema:
    return {**error(status), "content": {JSON: {"schema": ref("OpenAIError")}}}


def paths() -> PathItems:
    """The OpenAI speech route."""
    audio = {
        "description": "The audio in response_format, streamed as it is made (flac is sent once complete), or "
        "server-sent events (speech.audio.delta, then speech.audio.done) with stream_format sse.",
        "headers": AUDIO_HEADERS,
        "content": {
            **{fmt.media_type: {"schema": {}} for fmt in RESPONSE_FORMATS.values()},
            "text/event-stream": {"schema": {}},
        },
    }
    errors = sorted({400, 413, 422, 429, 500, *AUTH_ERRORS})
    return {
        "/v1/audio/speech": {
            "post": operation(
                "openai_create_speech",
                "openai",
                "OpenAI speech API: synthesize input and stream it back.",
                {"200": audio} | {str(code): _error(code) for code in errors},
                body={"required": True, "content": {JSON: {"schema": ref("OpenAISpeechRequest")}}},
            )
        }
    }
