"""``POST /v1/tokens/ephemeral``: mint a short-lived ``zsk_temp_`` token with a full key."""

from __future__ import annotations

from typing import Final

from .components import JSON, PathItems, Schema, json_body, operation, ref, responses

SCHEMAS: Final[dict[str, Schema]] = {
    "TokenRequest": {
        "type": "object",
        "properties": {
            "ttl_seconds": {
                "type": ["integer", "null"],
                "description": "Lifetime in seconds (default 300, clamped to 30-600).",
                "default": 300,
            }
        },
    },
    "TokenResponse": {
        "type": "object",
        "required": ["token", "expires_at", "scope"],
        "properties": {
            "token": {"type": "string", "pattern": "^zsk_temp_"},
            "expires_at": {"type": "integer", "description": "Unix time the token stops working."},
            "scope": {"const": "tts"},
        },
        "additionalProperties": False,
    },
}


def paths() -> PathItems:
    """The token route (full keys only)."""
    body = {"required": False, "content": {JSON: {"schema": ref("TokenRequest")}}}
    ok = json_body("The new token (Cache-Control: no-store).", ref("TokenResponse"))
    return {
        "/v1/tokens/ephemeral": {
            "post": operation(
                "mint_token",
                "tokens",
                "Mint an ephemeral token a browser may use to synthesize and read voices.",
                responses({200: ok}, 400, 413, 422, 501),
                body=body,
            )
        }
    }
