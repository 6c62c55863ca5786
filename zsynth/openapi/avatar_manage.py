"""Management routes of the avatar server (full key only): the avatars on offer and the live sessions."""

from __future__ import annotations

from typing import Final

from .avatar_common import FULL_KEY, data_body, operation, responses
from .components import JSON, PathItems, Schema, nullable, path_param, ref

SCHEMAS: Final[dict[str, Schema]] = {
    "Avatar": {
        "type": "object",
        "required": ["avatar_id", "name", "renderer", "width", "height", "fps", "description"],
        "properties": {
            "avatar_id": {"type": "string"},
            "name": {"type": "string"},
            "renderer": {"type": "string"},
            "width": {"type": "integer", "minimum": 1},
            "height": {"type": "integer", "minimum": 1},
            "fps": {"type": "integer", "minimum": 1},
            "description": {"type": "string"},
        },
        "additionalProperties": False,
    },
    "Session": {
        "type": "object",
        "required": [
            "session_id",
            "avatar_id",
            "voice_id",
            "state",
            "created_at",
            "control_attached",
            "talking_task_id",
            "queued_tasks",
            "idle_s",
            "audio_frames_sent",
            "video_frames_sent",
        ],
        "properties": {
            "session_id": {"type": "string"},
            "avatar_id": {"type": "string"},
            "voice_id": {"type": "string"},
            "state": {"enum": ["connecting", "connected", "closing"]},
            "created_at": {"type": "integer", "description": "Unix time the session was created."},
            "control_attached": {"type": "boolean"},
            "talking_task_id": nullable({"type": "string"}),
            "queued_tasks": {"type": "integer", "minimum": 0},
            "idle_s": {"type": "number", "minimum": 0},
            "audio_frames_sent": {"type": "integer", "minimum": 0},
            "video_frames_sent": {"type": "integer", "minimum": 0},
        },
        "additionalProperties": False,
    },
    "SessionList": {
        "type": "object",
        "required": ["data", "limit"],
        "properties": {
            "data": {"type": "array", "items": ref("Session")},
            "limit": {"type": "integer", "description": "ZSYNTH_AVATAR_MAX_SESSIONS of this box."},
        },
        "additionalProperties": False,
    },
    "ClosedSession": {
        "type": "object",
        "required": ["session_id", "closed"],
        "properties": {"session_id": {"type": "string"}, "closed": {"const": True}},
        "additionalProperties": False,
    },
}


def paths() -> PathItems:
    """The avatar list and the session routes."""
    session_id = [path_param("session_id", "A live session's id (from POST /connect).")]
    sessions = {"description": "The live sessions of this box.", "content": {JSON: {"schema": ref("SessionList")}}}
    return {
        "/v1/avatars": {
            "get": operation(
                "list_avatars",
                "avatars",
                "Every avatar this server can stream.",
                responses({200: data_body("The avatars.", {"type": "array", "items": ref("Avatar")})}),
                FULL_KEY,
            )
        },
        "/v1/sessions": {
            "get": operation(
                "list_sessions",
                "sessions",
                "Live sessions on this box and the limit.",
                responses({200: sessions}),
                FULL_KEY,
            )
        },
        "/v1/sessions/{session_id}": {
            "get": operation(
                "get_session",
                "sessions",
                "One live session.",
                responses({200: data_body("The session.", ref("Session"))}, 404),
                FULL_KEY,
                parameters=session_id,
            ),
            "delete": operation(
                "close_session",
                "sessions",
                "Close a live session: its stream ends and its control socket is closed.",
                responses({200: data_body("The session is closed.", ref("ClosedSession"))}, 404),
                FULL_KEY,
                parameters=session_id,
            ),
        },
    }
