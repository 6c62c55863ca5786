"""Shared pieces of the avatar server's document: its error envelope, security schemes and response builders."""

from __future__ import annotations

from typing import Final

from . import components
from .components import JSON, Operation, Schema

SECURITY_SCHEMES: Final[dict[str, Schema]] = {
    "ApiKeyHeader": {
        "type": "apiKey",
        "in": "header",
        "name": "X-Api-Key",
        "description": "A full key (ZSYNTH_API_KEY(S) or a portal zsk_live_ key), or on /connect a session token.",
    },
    "BearerAuth": {
        "type": "http",
        "scheme": "bearer",
        "description": "The same secret as 'Authorization: Bearer <key>'.",
    },
    "SessionTokenQuery": {
        "type": "apiKey",
        "in": "query",
        "name": "session_token",
        "description": "A zsk_temp_ session token, for browsers (which cannot set headers on a WebSocket). "
        "Only on the stream routes; a full key here is refused, as URLs end up in logs.",
    },
}

#: Management routes: a full key in either header (a session token gets 401 insufficient_scope).
FULL_KEY: Final[list[dict[str, list[str]]]] = [{"ApiKeyHeader": []}, {"BearerAuth": []}]
#: Stream routes: a full key or a session token in either header, or a session token in the query.
STREAM: Final[list[dict[str, list[str]]]] = [*FULL_KEY, {"SessionTokenQuery": []}]
#: The probe and the document need nothing.
PUBLIC: Final[list[dict[str, list[str]]]] = []
#: The document's top-level security.
DEFAULT_SECURITY: Final = FULL_KEY

SCHEMAS: Final[dict[str, Schema]] = {
    "Error": {
        "type": "object",
        "description": "The error envelope of every failed request of the avatar server.",
        "required": ["code", "message"],
        "properties": {
            "code": {"type": "string", "examples": ["invalid_api_key", "session_not_found"]},
            "message": {"type": "string"},
        },
        "additionalProperties": False,
    },
}

_ERROR_TEXT: Final = {
    400: "Bad input: invalid JSON (invalid_json), a bad field (invalid_parameters) or SDP (invalid_sdp).",
    401: "No key (missing_api_key), an unknown/expired key or token (invalid_api_key), a full key in the query, "
    "or a session token on a full-key route (insufficient_scope).",
    404: "No such resource (avatar_not_found, session_not_found).",
    413: "The request body is larger than 1 MiB (request_too_large).",
    500: "An internal error (internal_error; never a traceback).",
    501: "Session tokens need a keys table (not_supported; ZSYNTH_API_KEYS_TABLE).",
    503: "The keys table is unreachable (service_unavailable), or the box runs its session limit (capacity, with "
    "Retry-After).",
}

#: What every authenticated route may answer besides its own errors.
AUTH_ERRORS: Final = (401, 503)


def error(status: int, text: str | None = None) -> Schema:
    """A response carrying this server's error envelope."""
    return components.error(status, text, texts=_ERROR_TEXT)


def data_body(description: str, schema: Schema) -> Schema:
    """A JSON response wrapping ``schema`` in ``{"data": ...}``, as the avatar server answers."""
    wrapped = {"type": "object", "required": ["data"], "properties": {"data": schema}}
    return {"description": description, "content": {JSON: {"schema": wrapped}}}


def responses(ok: dict[int, Schema], *errors: int, authenticated: bool = True) -> dict[str, Schema]:
    """The successes given plus the listed errors (and this server's auth errors when authenticated)."""
    return components.responses(ok, *errors, authenticated=authenticated, auth_errors=AUTH_ERRORS, texts=_ERROR_TEXT)


def operation(
    op_id: str,
    tag: str,
    summary: str,
    responses_: dict[str, Schema],
    security: list[dict[str, list[str]]],
    *,
    parameters: list[Schema] | None = None,
    body: Schema | None = None,
) -> Operation:
    """One operation object of the avatar server (its own security schemes)."""
    return components.operation(op_id, tag, summary, responses_, security=security, parameters=parameters, body=body)
