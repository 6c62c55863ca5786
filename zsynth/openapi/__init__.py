"""OpenAPI 3.1 documents of zsynth's HTTP servers, one small module per resource.

Each resource module has ``SCHEMAS`` (its component schemas), ``paths()`` (its path items) and optionally
``apply_settings(schemas, settings)`` (limits of this deployment). To document a new route, add it to its resource's
module, or add a module and list it under its server in :data:`SERVERS`.
WebSocket routes are outside OpenAPI and stay undocumented here.
"""

from __future__ import annotations

import copy
import functools
import json
from types import ModuleType
from typing import Any, Final, Literal

from .. import __version__
from ..config import Settings
from . import (
    components,
    dictionaries,
    health,
    metrics,
    models,
    openai_speech,
    timestamps,
    tokens,
    tts,
    user,
    voices,
)

Kind = Literal["speech", "avatar"]

#: The resource modules of each server's document.
SERVERS: Final[dict[str, tuple[ModuleType, ...]]] = {
    "speech": (health, metrics, tts, openai_speech, timestamps, tokens, voices, models, user, dictionaries),
}
#: Each server's shared pieces (error envelope, security schemes, default security): they differ between servers.
COMMON: Final[dict[str, ModuleType]] = {"speech": components}

_INFO: Final[dict[str, dict[str, str]]] = {
    "speech": {
        "title": "zsynth speech API",
        "description": "Self-hosted, ElevenLabs-compatible text to speech. Errors carry the envelope "
        '{"detail": {"status", "code", "type", "message", "request_id"}}, except on the OpenAI route '
        '(/v1/audio/speech), whose errors carry OpenAI\'s {"error": {"message", "type", "param", "code"}}. '
        "The realtime WebSocket routes (/v1/text-to-speech/{voice_id}/stream-input and /multi-stream-input) "
        "are not modelled by OpenAPI.",
    },
}


def build_document(kind: Kind = "speech", settings: Settings | None = None) -> dict[str, Any]:
    """A fresh OpenAPI 3.1 document of the ``kind`` server, with the limits of ``settings`` when given."""
    if kind == "avatar":
        # Imported here: the avatar's routes (and aiortc) stay out of a speech server that serves its document.
        from . import avatar

        return avatar.build(settings)
    try:
        modules = SERVERS[kind]
    except KeyError:
        raise ValueError(f"unknown server kind {kind!r}") from None
    paths: dict[str, Any] = {}
    common = COMMON[kind]
    schemas: dict[str, Any] = dict(common.SCHEMAS)
    for module in modules:
        for path, item in module.paths().items():
            # Two modules may share a path (different methods); a method documented twice is a bug.
            clash = set(item) & set(paths.get(path, {}))
            if clash:
                raise ValueError(f"{path}: {sorted(clash)} documented twice")
            paths.setdefault(path, {}).update(item)
        schemas.update(copy.deepcopy(module.SCHEMAS))
    document = {
        "openapi": "3.1.0",
        "info": {**_INFO[kind], "version": __version__},
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": dict(common.SECURITY_SCHEMES)},
        "security": common.DEFAULT_SECURITY,
    }
    if settings is not None:
        for module in modules:
            if hook := getattr(module, "apply_settings", None):
                hook(schemas, settings)
    # A new dict each call: callers may change it without touching the module constants.
    return copy.deepcopy(document)


@functools.cache
def document_bytes(kind: Kind, settings: Settings) -> bytes:
    """The ``kind`` document for ``settings``, serialized once, as served at ``GET /openapi.json``."""
    return json.dumps(build_document(kind, settings), separators=(",", ":")).encode()
