"""``GET /openapi.json``: the OpenAPI 3.1 document of the speech API (unauthenticated, like the probes).

The app factory puts the document's builder under ``app[OPENAPI_DOCUMENT]``: this module does not import
:mod:`zsynth.openapi`, which reads the route tables.
"""

from __future__ import annotations

from aiohttp import web

from ..endpoints import OPENAPI_DOCUMENT, Access, Endpoints
from .apidoc import JSON

routes = Endpoints()


@routes.get(
    "/openapi.json",
    access=Access.PUBLIC,
    cors=False,
    operationId="openapi",
    tags=["operations"],
    summary="This OpenAPI 3.1 document.",
    responses={"200": {"description": "The document.", "content": {JSON: {"schema": {"type": "object"}}}}},
)
async def openapi_json(request: web.Request) -> web.Response:
    """The document, built once per process."""
    return web.Response(body=request.app[OPENAPI_DOCUMENT](), content_type="application/json")
