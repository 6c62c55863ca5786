"""``GET /openapi.json``: the OpenAPI 3.1 document of the speech API (unauthenticated, like the probes)."""

from __future__ import annotations

from aiohttp import web

# The module, not its function: zsynth.openapi reads constants of the route modules, so it may still be loading here.
from .. import openapi
from ..keys import SETTINGS


async def openapi_json(request: web.Request) -> web.Response:
    """The document, built once per process."""
    return web.Response(body=openapi.document_bytes("speech", request.app[SETTINGS]), content_type="application/json")


def setup(app: web.Application) -> None:
    """Register the document route."""
    app.router.add_get("/openapi.json", openapi_json)
