"""OpenAPI 3.1 documents of zsynth's HTTP servers, generated from their route declarations.

:mod:`zsynth.kit.openapi` turns declarations (:mod:`zsynth.kit.endpoints`) into operations and component schemas;
:mod:`zsynth.speech.openapi` and :mod:`zsynth.avatar.openapi` add each server's info, security schemes and error
envelope; each server serves its own. This module builds either for the command line, the docs and the tests. To
document a route, declare it (its models and OpenAPI fields) on its module's ``Endpoints`` table. WebSocket routes are
outside OpenAPI.
"""

from __future__ import annotations

from typing import Any, Literal

from zsynth.core.config import Settings

Kind = Literal["speech", "avatar"]


def build_document(kind: Kind = "speech", settings: Settings | None = None) -> dict[str, Any]:
    """A fresh OpenAPI 3.1 document of the ``kind`` server, with the limits of ``settings`` when given."""
    # Each server's module is imported on demand, so the speech front never loads the avatar's routes (and aiortc).
    if kind == "speech":
        from zsynth.speech import openapi as speech

        return speech.build(settings)
    if kind == "avatar":
        from zsynth.avatar import openapi as avatar

        return avatar.build(settings)
    raise ValueError(f"unknown server kind {kind!r}")
