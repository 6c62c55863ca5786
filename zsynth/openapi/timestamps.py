"""``POST .../with-timestamps`` (one JSON) and ``.../stream/with-timestamps`` (a JSON object per line): speech with
character timing."""

from __future__ import annotations

from typing import Final

from .components import JSON, PathItems, Schema, nullable, ref
from .tts import AUDIO_HEADERS, synthesis_operation

SCHEMAS: Final[dict[str, Schema]] = {
    "CharacterAlignment": {
        "type": "object",
        "description": "One entry per character of the text, times in seconds from the start of the whole audio.",
        "required": ["characters", "character_start_times_seconds", "character_end_times_seconds"],
        "properties": {
            "characters": {"type": "array", "items": {"type": "string"}},
            "character_start_times_seconds": {"type": "array", "items": {"type": "number", "minimum": 0}},
            "character_end_times_seconds": {"type": "array", "items": {"type": "number", "minimum": 0}},
        },
        "additionalProperties": False,
    },
    "AudioWithTimestamps": {
        "type": "object",
        "description": "Audio and its character timing; the alignments are null when there is none (e.g. a chunk "
        "of trailing audio). normalized_alignment carries the same characters as alignment: the text is not rewritten.",
        "required": ["audio_base64", "alignment", "normalized_alignment"],
        "properties": {
            "audio_base64": {
                "type": "string",
                "contentEncoding": "base64",
                "description": "The audio in output_format, base64-encoded.",
            },
            "alignment": nullable(ref("CharacterAlignment")),
            "normalized_alignment": nullable(ref("CharacterAlignment")),
        },
        "additionalProperties": False,
    },
}

# The with-timestamps answers carry the TTS headers except x-model-id (the body is JSON, not audio).
HEADERS: Final = {name: header for name, header in AUDIO_HEADERS.items() if name != "x-model-id"}


def _operation(route: str, op_id: str, summary: str, answer: str) -> dict[str, Schema]:
    ok = {"description": answer, "headers": HEADERS, "content": {JSON: {"schema": ref("AudioWithTimestamps")}}}
    return synthesis_operation(route, op_id, summary, ok)


def paths() -> PathItems:
    """The with-timestamps routes."""
    return {
        "/v1/text-to-speech/{voice_id}/with-timestamps": _operation(
            "convert",
            "text_to_speech_with_timestamps",
            "Synthesize; answer with the whole audio and its character timing when complete.",
            "One JSON object: the whole audio as base64 and the alignment of the whole text.",
        ),
        "/v1/text-to-speech/{voice_id}/stream/with-timestamps": _operation(
            "stream",
            "text_to_speech_stream_with_timestamps",
            "Synthesize; stream each chunk's audio and character timing as soon as it is ready.",
            "Newline-delimited JSON, sent as application/json (as ElevenLabs does): one AudioWithTimestamps object "
            "per line, per audio chunk. Times are from the start of the whole audio on every line. A job that fails "
            "mid-stream aborts the connection, so the body has no proper end.",
        ),
    }
