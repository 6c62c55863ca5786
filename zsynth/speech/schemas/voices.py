"""The voice routes' response models and multipart request schemas (the routes are in
``zsynth.speech.routes.voices``).

Cloning and editing take multipart uploads (audio files and form fields), not JSON: no request model validates them,
so their OpenAPI schemas are written here, next to the bounds they state and the handlers enforce.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, Field

#: At most this many clips per upload.
MAX_FILES: Final = 10
#: A voice name is 1 to this many characters.
MAX_NAME_CHARS: Final = 200


class VoiceSettings(BaseModel):
    """The five voice settings, as listed and as saved."""

    stability: float
    similarity_boost: float
    style: float
    use_speaker_boost: bool
    speed: float


class Voice(BaseModel):
    """The ElevenLabs Voice: every field the SDK's model names, required or not."""

    voice_id: str
    name: str
    category: Literal["premade", "cloned"]
    labels: dict[str, str]
    description: str | None
    preview_url: None
    available_for_tiers: list[str]
    high_quality_base_model_ids: list[str]
    settings: VoiceSettings
    samples: list[dict[str, Any]] | None
    created_at_unix: int = Field(ge=0)
    fine_tuning: dict[str, Any]
    sharing: None
    verified_languages: list[dict[str, Any]]
    voice_verification: dict[str, Any]
    is_owner: bool
    is_legacy: bool


class VoiceList(BaseModel):
    """Every voice."""

    voices: list[Voice]


class VoicePage(BaseModel):
    """One page of voices."""

    voices: list[Voice]
    has_more: bool
    total_count: int = Field(ge=0)
    next_page_token: str | None


class AddVoiceResponse(BaseModel):
    """The new voice's id."""

    voice_id: str
    requires_verification: bool


class DeleteResponse(BaseModel):
    """The voice is gone."""

    status: Literal["ok"]


class EditResponse(BaseModel):
    """The change is saved."""

    status: Literal["ok"]


_FILES: Final = {"contentType": "audio/*, application/octet-stream"}
#: The multipart body of ``POST /voices`` and ``POST /v1/voices/add``.
CLONE_BODY: Final = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["name", "files"],
                "properties": {
                    "name": {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS},
                    "files": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": MAX_FILES,
                        "description": "Reference clips (wav, flac, ogg or mp3; 'file' is accepted too), each at most "
                        "ZSYNTH_VOICE_CLIP_MAX_BYTES.",
                        "items": {"type": "string", "contentMediaType": "application/octet-stream"},
                    },
                    "description": {"type": "string"},
                    "labels": {
                        "type": "string",
                        "description": 'A JSON object of strings, e.g. {"accent": "british"}.',
                    },
                },
            },
            "encoding": {"files": _FILES},
        }
    },
}
#: The multipart body of ``POST /v1/voices/{voice_id}/edit``.
EDIT_BODY: Final = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["name"],
                "description": "Fields left out keep their value; new files replace the reference clip on every box.",
                "properties": {
                    "name": {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS},
                    "description": {"type": "string"},
                    "labels": {"type": "string", "description": 'A JSON object of strings; "null" keeps the labels.'},
                    "files": {
                        "type": "array",
                        "maxItems": MAX_FILES,
                        "description": "A new reference (same rules as cloning).",
                        "items": {"type": "string", "contentMediaType": "application/octet-stream"},
                    },
                },
            },
            "encoding": {"files": _FILES},
        }
    },
}
