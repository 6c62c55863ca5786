"""``POST /connect``: WebRTC signalling in one round trip (the control socket ``/control/{session_id}`` is a
WebSocket, outside OpenAPI)."""

from __future__ import annotations

from typing import Final

from .avatar_common import STREAM, operation, responses
from .components import JSON, PathItems, Schema, json_body, nullable, ref

_NAME: Final[Schema] = {"type": "string", "pattern": "\\S"}

SCHEMAS: Final[dict[str, Schema]] = {
    "ConnectRequest": {
        "type": "object",
        "required": ["sdp"],
        "properties": {
            "sdp": {"type": "string", "description": "The browser's offer: it must receive one audio and one video."},
            "type": {"const": "offer", "default": "offer"},
            "avatar_id": {
                **nullable(_NAME),
                "description": "The avatar to stream (default: the first of GET /v1/avatars).",
            },
            "voice_id": {**nullable(_NAME), "description": "The voice that speaks (default: ZSYNTH_AVATAR_VOICE_ID)."},
        },
    },
    "ConnectAnswer": {
        "type": "object",
        "required": ["sdp", "type", "session_id", "avatar_id", "voice_id", "control_url"],
        "properties": {
            "sdp": {"type": "string", "description": "The answer, with every ICE candidate (no trickle)."},
            "type": {"const": "answer"},
            "session_id": {"type": "string"},
            "avatar_id": {"type": "string"},
            "voice_id": {"type": "string"},
            "control_url": {
                "type": "string",
                "pattern": "^/control/",
                "description": "The control WebSocket of this session (same credential).",
            },
        },
        "additionalProperties": False,
    },
}


def paths() -> PathItems:
    """The signalling route (a full key or a session token)."""
    body = {"required": True, "content": {JSON: {"schema": ref("ConnectRequest")}}}
    ok = json_body("The SDP answer and the new session.", ref("ConnectAnswer"))
    return {
        "/connect": {
            "post": operation(
                "connect",
                "sessions",
                "Answer an SDP offer with a new session streaming an avatar.",
                responses({200: ok}, 400, 404, 413, 500),
                STREAM,
                body=body,
            )
        }
    }
