"""OpenAPI 3.1 documents of zsynth's HTTP servers.

The speech API's document is generated from its route declarations (:mod:`.speech`). The avatar server's is built
from one small module per resource: each has ``SCHEMAS`` (its component schemas), ``paths()`` (its path items) and
optionally ``apply_settings(schemas, settings)`` (limits of this deployment).
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
from . import avatar_common, avatar_connect, avatar_manage, avatar_ops, avatar_tokens, speech

Kind = Literal["speech", "avatar"]

#: The resource modules of each server's document.
SERVERS: Final[dict[str, tuple[ModuleType, ...]]] = {
    "avatar": (avatar_ops, avatar_tokens, avatar_connect, avatar_manage),
}
#: Each server's shared pieces (error envelope, security schemes, default security): they differ between servers.
COMMON: Final[dict[str, ModuleType]] = {"avatar": avatar_common}

_INFO: Final[dict[str, dict[str, str]]] = {
    "avatar": {
        "title": "zsynth avatar streaming server",
        "description": "Session tokens, WebRTC signalling and management of the avatar streaming server. Errors "
        'always carry the envelope {"code", "message"}. The control WebSocket (/control/{session_id}) is not '
        "modelled by OpenAPI.",
    },
}


def build_document(kind: Kind = "speech", settings: Settings | None = None) -> dict[str, Any]:
    """A fresh OpenAPI 3.1 document of the ``kind`` server, with the limits of ``settings`` when given."""
    if kind == "speech":
        return speech.build(settings)
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
