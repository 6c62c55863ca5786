"""``GET /v1/models``: the one engine this deployment runs, as a bare array."""

from __future__ import annotations

from typing import Final

from .components import PathItems, Schema, json_body, operation, ref, responses

SCHEMAS: Final[dict[str, Schema]] = {
    "Model": {
        "type": "object",
        "description": "The ElevenLabs model entry; every model_id in a request is served by this engine.",
        "required": [
            "model_id",
            "name",
            "can_do_text_to_speech",
            "description",
            "languages",
            "maximum_text_length_per_request",
            "token_cost_factor",
        ],
        "properties": {
            "model_id": {"type": "string"},
            "name": {"type": "string"},
            "can_be_finetuned": {"type": "boolean"},
            "can_do_text_to_speech": {"type": "boolean"},
            "can_do_voice_conversion": {"type": "boolean"},
            "can_use_style": {"type": "boolean"},
            "can_use_speaker_boost": {"type": "boolean"},
            "serves_pro_voices": {"type": "boolean"},
            "token_cost_factor": {"type": "number"},
            "description": {"type": "string"},
            "requires_alpha_access": {"type": "boolean"},
            "max_characters_request_free_user": {"type": "integer"},
            "max_characters_request_subscribed_user": {"type": "integer"},
            "maximum_text_length_per_request": {"type": "integer"},
            "languages": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["language_id", "name"],
                    "properties": {"language_id": {"type": "string"}, "name": {"type": "string"}},
                },
            },
            "model_rates": {"type": "object"},
            "concurrency_group": {"type": "string"},
        },
    },
}


def paths() -> PathItems:
    """The models route."""
    models = json_body("A bare array (an object here breaks the SDK).", {"type": "array", "items": ref("Model")})
    return {"/v1/models": {"get": operation("list_models", "models", "List the models.", responses({200: models}))}}
