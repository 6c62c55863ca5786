"""``POST /v1/streaming.create_token``: a full key mints a short-lived session token for a browser."""

from __future__ import annotations

from typing import Final

from .avatar_common import FULL_KEY, data_body, operation, responses
from .components import JSON, PathItems, Schema, ref

# The same shapes as the speech API's token route (one rule for both servers: zsynth.auth.clamp_ttl).
SCHEMAS: Final[dict[str, Schema]] = {
    "SessionTokenRequest": {
        "type": "object",
        "properties": {
            "ttl_seconds": {
                "type": ["integer", "null"],
                "description": "Lifetime in seconds (default 300, clamped to 30-600).",
                "default": 300,
            }
        },
    },
    "SessionToken": {
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
    body = {"required": False, "content": {JSON: {"schema": ref("SessionTokenRequest")}}}
    ok = data_body("The new session token.", ref("SessionToken"))
    return {
        "/v1/streaming.create_token": {
            "post": operation(
                "create_session_token",
                "tokens",
                "Mint a session token a browser may use on /connect and the control socket.",
                responses({200: ok}, 400, 413, 501),
                FULL_KEY,
                body=body,
            )
        }
    }
