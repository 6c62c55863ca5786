"""The OpenAPI 3.1 document of the speech API, generated from its route declarations (:mod:`zsynth.speech.routes`).

Operations, request models and response models come from the declarations (:mod:`zsynth.kit.openapi`); this module adds
the document's info, its security schemes, its error envelope and the limits of a deployment
(ZSYNTH_MAX_TEXT_CHARS).
"""

from __future__ import annotations

from typing import Any, Final

from zsynth import __version__
from zsynth.core.config import Settings
from zsynth.kit.endpoints import Access
from zsynth.kit.errors import Error
from zsynth.kit.openapi import ErrorDocs, paths_and_schemas
from zsynth.speech.routes import TABLES
from zsynth.speech.schemas.bodies import TEXT_LIMIT_MARKER

SECURITY_SCHEMES: Final[dict[str, dict[str, str]]] = {
    "ApiKeyHeader": {
        "type": "apiKey",
        "in": "header",
        "name": "xi-api-key",
        "description": "A full key (ZSYNTH_API_KEY(S) or a portal zsk_live_ key) or a zsk_temp_ token.",
    },
    "BearerAuth": {
        "type": "http",
        "scheme": "bearer",
        "description": "The same secret as 'Authorization: Bearer <key>'.",
    },
}

#: Either header authenticates; a route a token may not call answers a token with 401 insufficient_scope.
AUTHENTICATED: Final[list[dict[str, list[str]]]] = [{"ApiKeyHeader": []}, {"BearerAuth": []}]

#: Each access rule's OpenAPI security (WebSocket routes, the in-band ones, are outside the document).
SECURITY: Final[dict[Access, list[dict[str, list[str]]]]] = {
    Access.PUBLIC: [],
    Access.TOKEN: AUTHENTICATED,
    Access.FULL: AUTHENTICATED,
    Access.IN_BAND: AUTHENTICATED,
}

INFO: Final = {
    "title": "zsynth speech API",
    "description": "Self-hosted, ElevenLabs-compatible text to speech. Errors carry the envelope "
    '{"detail": {"status", "code", "type", "message", "request_id"}}, except on the OpenAI route '
    '(/v1/audio/speech), whose errors carry OpenAI\'s {"error": {"message", "type", "param", "code"}}. '
    "The realtime WebSocket routes (/v1/text-to-speech/{voice_id}/stream-input and /multi-stream-input) "
    "are not modelled by OpenAPI.",
}

ERROR_TEXT: Final = {
    400: "Bad input: invalid JSON, a field out of range, an unsupported output_format or clip.",
    401: "No key, an unknown or expired key (header WWW-Authenticate: Bearer), or a token on a route that needs a "
    "full key (insufficient_scope).",
    403: "A write from a page on another site to a server without keys (cross_origin_refused).",
    404: "No such resource (a voice, a dictionary or a version that does not exist).",
    405: "The method is not allowed on this path.",
    413: "The request body is larger than ZSYNTH_MAX_BODY_BYTES.",
    422: "A field is missing or has the wrong type.",
    429: "The job queue is full (system_busy); retry after Retry-After.",
    500: "An internal error (never a traceback).",
    501: "The feature needs a keys table (ZSYNTH_API_KEYS_TABLE).",
    503: "Redis, the workers or the keys table are unavailable; retry after Retry-After.",
}

#: The speech API's errors: every authenticated route may also answer 401, 403 and 503 besides its own. The OpenAI
#: route declares its own envelope (``error_envelope``), which its errors take at run time too.
ERRORS: Final = ErrorDocs(Error, ERROR_TEXT, auth_errors=(401, 403, 503))


def build(settings: Settings | None = None) -> dict[str, Any]:
    """A fresh document of the speech API, with the limits of ``settings`` when given."""
    endpoints = [endpoint for table in TABLES for endpoint in table]
    paths, schemas = paths_and_schemas(endpoints, SECURITY, ERRORS)
    for schema in schemas.values():
        for prop in schema.get("properties", {}).values():
            # A spoken-text field (routes.bodies.spoken_text) carries this deployment's limit, when there is one.
            if prop.pop(TEXT_LIMIT_MARKER, False) and settings is not None:
                prop["maxLength"] = settings.limits.max_text_chars
    return {
        "openapi": "3.1.0",
        "info": {**INFO, "version": __version__},
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": {k: dict(v) for k, v in SECURITY_SCHEMES.items()}},
        "security": list(AUTHENTICATED),
    }
