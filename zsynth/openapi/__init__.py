"""OpenAPI 3.1 documents of zsynth's HTTP servers, generated from their route declarations.

:mod:`.generate` turns declarations (:mod:`zsynth.endpoints`) into operations and component schemas;
:mod:`.speech` and :mod:`.avatar` add each server's info, security schemes and error envelope. To document a route,
declare it (its models and OpenAPI fields) on its module's ``Endpoints`` table. WebSocket routes are outside OpenAPI.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Literal

from ..config import Settings

Kind = Literal["speech", "avatar"]


def build_document(kind: Kind = "speech", settings: Settings | None = None) -> dict[str, Any]:
    """A fresh OpenAPI 3.1 document of the ``kind`` server, with the limits of ``settings`` when given."""
    # Each server's module is imported on demand, so the speech front never loads the avatar's routes (and aiortc).
    if kind == "speech":
        from . import speech

        return speech.build(settings)
    if kind == "avatar":
        from . import avatar

        return avatar.build(settings)
    raise ValueError(f"unknown server kind {kind!r}")


@functools.cache
def document_bytes(kind: Kind, settings: Settings) -> bytes:
    """The ``kind`` document for ``settings``, serialized once, as served at ``GET /openapi.json``."""
    return json.dumps(build_document(kind, settings), separators=(",", ":")).encode()
