"""``GET /v1/user`` and ``GET /v1/user/subscription``: account stubs for clients that read them at start-up."""

from __future__ import annotations

from typing import Final

from .components import PathItems, Schema, json_body, nullable, operation, ref, responses

SCHEMAS: Final[dict[str, Schema]] = {
    "Subscription": {
        "type": "object",
        "description": "A self-hosted stub: nothing is metered, the limits are generous constants.",
        "required": ["tier", "character_count", "character_limit", "voice_slots_used", "voice_limit", "status"],
        "properties": {
            "tier": {"type": "string"},
            "character_count": {"type": "integer"},
            "character_limit": {"type": "integer"},
            "can_extend_character_limit": {"type": "boolean"},
            "allowed_to_extend_character_limit": {"type": "boolean"},
            "next_character_count_reset_unix": nullable({"type": "integer"}),
            "voice_slots_used": {"type": "integer", "minimum": 0},
            "voice_limit": {"type": "integer"},
            "professional_voice_limit": {"type": "integer"},
            "can_use_instant_voice_cloning": {"type": "boolean"},
            "can_use_professional_voice_cloning": {"type": "boolean"},
            "currency": nullable({"type": "string"}),
            "status": {"type": "string"},
            "billing_period": nullable({"type": "string"}),
            "character_refresh_period": nullable({"type": "string"}),
        },
    },
    "User": {
        "type": "object",
        "required": ["user_id", "subscription", "is_new_user", "xi_api_key", "created_at"],
        "properties": {
            "user_id": {"type": "string"},
            "workspace_id": {"type": "string"},
            "subscription": ref("Subscription"),
            "is_new_user": {"type": "boolean"},
            "xi_api_key": {"type": "null", "description": "Never echoed."},
            "is_api_key_hashed": {"type": "boolean"},
            "first_name": nullable({"type": "string"}),
            "created_at": {"type": "integer"},
            "seat_type": {"type": "string"},
        },
    },
}


def paths() -> PathItems:
    """The account stub routes."""
    return {
        "/v1/user": {
            "get": operation(
                "get_user", "user", "The account (a stub).", responses({200: json_body("The user.", ref("User"))})
            )
        },
        "/v1/user/subscription": {
            "get": operation(
                "get_subscription",
                "user",
                "The subscription (a stub; voice_slots_used counts the clones).",
                responses({200: json_body("The subscription.", ref("Subscription"))}),
            )
        },
    }
