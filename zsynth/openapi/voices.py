"""Voices: listing (v1, v2), settings, cloning (``POST /voices``, ``POST /v1/voices/add``), edits and removal."""

from __future__ import annotations

from typing import Final

from ..routes.voices import SORTS, VOICE_TYPES
from .components import (
    PathItems,
    Schema,
    json_body,
    nullable,
    operation,
    path_param,
    query_param,
    ref,
    responses,
)

_STRING_MAP: Final[Schema] = {"type": "object", "additionalProperties": {"type": "string"}}

# The five voice settings, as listed and as saved.
_SETTINGS_PROPERTIES: Final[Schema] = {
    "stability": {"type": "number"},
    "similarity_boost": {"type": "number"},
    "style": {"type": "number"},
    "use_speaker_boost": {"type": "boolean"},
    "speed": {"type": "number"},
}

SCHEMAS: Final[dict[str, Schema]] = {
    "VoiceSettings": {
        "type": "object",
        "required": ["stability", "similarity_boost", "style", "use_speaker_boost", "speed"],
        "properties": _SETTINGS_PROPERTIES,
    },
    "Voice": {
        "type": "object",
        "description": "The ElevenLabs Voice: every field the SDK's model names, required or not.",
        "required": [
            "voice_id",
            "name",
            "category",
            "labels",
            "description",
            "preview_url",
            "available_for_tiers",
            "high_quality_base_model_ids",
            "settings",
            "samples",
            "created_at_unix",
            "fine_tuning",
            "sharing",
            "verified_languages",
            "voice_verification",
            "is_owner",
            "is_legacy",
        ],
        "properties": {
            "voice_id": {"type": "string"},
            "name": {"type": "string"},
            "category": {"enum": ["premade", "cloned"]},
            "labels": _STRING_MAP,
            "description": nullable({"type": "string"}),
            "preview_url": {"type": "null"},
            "available_for_tiers": {"type": "array", "items": {"type": "string"}},
            "high_quality_base_model_ids": {"type": "array", "items": {"type": "string"}},
            "settings": ref("VoiceSettings"),
            "samples": nullable({"type": "array", "items": {"type": "object"}}),
            "created_at_unix": {"type": "integer", "minimum": 0},
            "fine_tuning": {"type": "object"},
            "sharing": {"type": "null"},
            "verified_languages": {"type": "array", "items": {"type": "object"}},
            "voice_verification": {"type": "object"},
            "is_owner": {"type": "boolean"},
            "is_legacy": {"type": "boolean"},
        },
    },
    "VoiceList": {
        "type": "object",
        "required": ["voices"],
        "properties": {"voices": {"type": "array", "items": ref("Voice")}},
    },
    "VoicePage": {
        "type": "object",
        "required": ["voices", "has_more", "total_count", "next_page_token"],
        "properties": {
            "voices": {"type": "array", "items": ref("Voice")},
            "has_more": {"type": "boolean"},
            "total_count": {"type": "integer", "minimum": 0},
            "next_page_token": nullable({"type": "string"}),
        },
    },
    "CloneRequest": {
        "type": "object",
        "required": ["name", "files"],
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 200},
            "files": {
                "type": "array",
                "minItems": 1,
                "maxItems": 10,
                "description": "Reference clips (wav, flac, ogg or mp3; 'file' is accepted too), each at most "
                "ZSYNTH_VOICE_CLIP_MAX_BYTES.",
                "items": {"type": "string", "contentMediaType": "application/octet-stream"},
            },
            "description": {"type": "string"},
            "labels": {"type": "string", "description": 'A JSON object of strings, e.g. {"accent": "british"}.'},
        },
    },
    "AddVoiceResponse": {
        "type": "object",
        "required": ["voice_id", "requires_verification"],
        "properties": {"voice_id": {"type": "string"}, "requires_verification": {"type": "boolean"}},
    },
    "DeleteResponse": {
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"const": "ok"}},
    },
    "EditVoiceRequest": {
        "type": "object",
        "required": ["name"],
        "description": "Fields left out keep their value; new files replace the reference clip on every box.",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 200},
            "description": {"type": "string"},
            "labels": {"type": "string", "description": 'A JSON object of strings; "null" keeps the labels.'},
            "files": {
                "type": "array",
                "maxItems": 10,
                "description": "A new reference (same rules as cloning).",
                "items": {"type": "string", "contentMediaType": "application/octet-stream"},
            },
        },
    },
    "VoiceSettingsEdit": {
        "type": "object",
        "description": "Any of the five settings; the ones sent are saved over the voice's saved ones (other "
        "fields are ignored, null keeps the saved value). They become the defaults of every job for the voice.",
        "properties": _SETTINGS_PROPERTIES,
    },
    "EditResponse": {
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"const": "ok"}},
    },
}

_VOICE_ID: Final = path_param("voice_id", "A voice id (built-in, or custom-... for clones).")
_CLONE_BODY: Final[Schema] = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": ref("CloneRequest"),
            "encoding": {"files": {"contentType": "audio/*, application/octet-stream"}},
        }
    },
}


def _v2_parameters() -> list[Schema]:
    return [
        query_param("page_size", {"type": "integer", "minimum": 1, "maximum": 100, "default": 10}, "Page size."),
        query_param("next_page_token", {"type": "string"}, "The token of the previous page."),
        query_param("search", {"type": "string"}, "Case-insensitive match on name, description and labels."),
        query_param("category", {"type": "string"}, "premade or cloned."),
        query_param("voice_type", {"enum": list(VOICE_TYPES)}, "The ElevenLabs voice type filter."),
        {
            "name": "voice_ids",
            "in": "query",
            "required": False,
            "description": "Only these voices (repeat the parameter).",
            "schema": {"type": "array", "items": {"type": "string"}},
            "style": "form",
            "explode": True,
        },
        query_param("sort", {"enum": list(SORTS)}, "Sort key (default: built-in first, then oldest clone)."),
        query_param("sort_direction", {"enum": ["asc", "desc"]}, "Sort direction."),
    ]


_STORAGE_503: Final = (
    " With ZSYNTH_VOICES_BUCKET set the change is in the bucket before the answer; a bucket that cannot be reached "
    "answers 503 voice_storage_unavailable with Retry-After and changes nothing."
)


def _delete(op_id: str, summary: str) -> Schema:
    ok = json_body("Removed on every box (the bucket keeps a tombstone).", ref("DeleteResponse"))
    return operation(op_id, "voices", summary + _STORAGE_503, responses({200: ok}, 400, 404), parameters=[_VOICE_ID])


def paths() -> PathItems:
    """The voice routes."""
    settings = json_body("The settings.", ref("VoiceSettings"))
    return {
        "/v1/voices": {
            "get": operation(
                "list_voices",
                "voices",
                "Every voice, built-in first.",
                responses({200: json_body("The voices.", ref("VoiceList"))}),
            )
        },
        "/v2/voices": {
            "get": operation(
                "list_voices_v2",
                "voices",
                "Voices filtered, sorted and paged.",
                responses({200: json_body("One page.", ref("VoicePage"))}, 400, 422),
                parameters=_v2_parameters(),
            )
        },
        "/v1/voices/settings/default": {
            "get": operation("default_settings", "voices", "The default voice settings.", responses({200: settings}))
        },
        "/v1/voices/{voice_id}": {
            "get": operation(
                "get_voice",
                "voices",
                "One voice (404 voice_not_found: no swap-out here).",
                responses({200: json_body("The voice.", ref("Voice"))}, 404),
                parameters=[_VOICE_ID],
            ),
            "delete": _delete("delete_voice_v1", "Remove a cloned voice."),
        },
        "/v1/voices/{voice_id}/settings": {
            "get": operation(
                "voice_settings",
                "voices",
                "A voice's saved settings (the defaults where none were saved).",
                responses({200: settings}, 404),
                parameters=[_VOICE_ID],
            )
        },
        "/v1/voices/{voice_id}/edit": {
            "post": operation(
                "edit_voice",
                "voices",
                "Rename, describe, relabel or re-record a cloned voice (the SDK's voices.update); built-in voices "
                "answer 400 voice_not_editable." + _STORAGE_503,
                responses({200: json_body("Saved on every box.", ref("EditResponse"))}, 400, 404, 413, 422),
                parameters=[_VOICE_ID],
                body={
                    "required": True,
                    "content": {
                        "multipart/form-data": {
                            "schema": ref("EditVoiceRequest"),
                            "encoding": {"files": {"contentType": "audio/*, application/octet-stream"}},
                        }
                    },
                },
            )
        },
        "/v1/voices/{voice_id}/settings/edit": {
            "post": operation(
                "edit_voice_settings",
                "voices",
                "Save a voice's settings (the SDK's voices.settings.update), built-in voices included; jobs for "
                "the voice start from them." + _STORAGE_503,
                responses({200: json_body("Saved on every box.", ref("EditResponse"))}, 400, 404, 422),
                parameters=[_VOICE_ID],
                body={"required": True, "content": {"application/json": {"schema": ref("VoiceSettingsEdit")}}},
            )
        },
        "/v1/voices/add": {
            "post": operation(
                "add_voice",
                "voices",
                "Instant voice cloning (ElevenLabs shape of the answer)." + _STORAGE_503,
                responses({200: json_body("The new voice's id.", ref("AddVoiceResponse"))}, 400, 413, 422, 500),
                body=_CLONE_BODY,
            )
        },
        "/voices": {
            "post": operation(
                "clone_voice",
                "voices",
                "Clone a voice from a reference clip; answers the whole voice object." + _STORAGE_503,
                responses({200: json_body("The new voice.", ref("Voice"))}, 400, 413, 422, 500),
                body=_CLONE_BODY,
            )
        },
        "/voices/{voice_id}": {"delete": _delete("delete_voice", "Remove a cloned voice.")},
    }
