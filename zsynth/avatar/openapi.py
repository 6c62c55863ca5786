"""The avatar server's OpenAPI 3.1 document, generated from its route declarations (:mod:`zsynth.avatar.routes`).

Each declaration lists its ``errors``: the statuses it answers in the envelope ``{"code", "message"}`` besides the
auth errors, which every authenticated route may answer (:class:`~zsynth.kit.openapi.ErrorDocs`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from zsynth import __version__
from zsynth.avatar.errors import Error
from zsynth.avatar.routes import TABLES
from zsynth.core.config import Settings
from zsynth.kit.endpoints import Access
from zsynth.kit.openapi import ErrorDocs, Schema, paths_and_schemas

INFO: Final = {
    "title": "zsynth avatar streaming server",
    "description": "Session tokens, WebRTC signalling and management of the avatar streaming server. Errors "
    'always carry the envelope {"code", "message"}. The control WebSocket (/control/{session_id}) is not '
    "modelled by OpenAPI.",
}

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

_FULL_KEY: Final[list[dict[str, list[str]]]] = [{"ApiKeyHeader": []}, {"BearerAuth": []}]
#: Each access rule's security requirements (a session token on a full-key route gets 401 insufficient_scope).
SECURITY: Final[Mapping[Access, list[dict[str, list[str]]]]] = {
    Access.FULL: _FULL_KEY,
    Access.TOKEN: [*_FULL_KEY, {"SessionTokenQuery": []}],
    Access.PUBLIC: [],
    Access.IN_BAND: [],
}

ERROR_TEXT: Final = {
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

#: The avatar server's errors: every authenticated route may also answer 401 and 503 besides its own.
ERRORS: Final = ErrorDocs(Error, ERROR_TEXT, auth_errors=(401, 503))


def build(settings: Settings | None = None) -> dict[str, Any]:
    """A fresh OpenAPI 3.1 document of the avatar server (``settings`` changes nothing in it: no limit is shown)."""
    endpoints = [endpoint for table in TABLES for endpoint in table]
    paths, schemas = paths_and_schemas(endpoints, SECURITY, ERRORS)
    document = {
        "openapi": "3.1.0",
        "info": {**INFO, "version": __version__},
        "paths": paths,
        "components": {"schemas": dict(sorted(schemas.items())), "securitySchemes": SECURITY_SCHEMES},
        "security": _FULL_KEY,
    }
    # A new dict each call: callers may change it without touching the module constants.
    return copy.deepcopy(document)
