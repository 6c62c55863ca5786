"""Routes of the avatar server, one module per resource; :func:`setup_routes` wires them all."""

from __future__ import annotations

from aiohttp import web

from ... import openapi
from ...keys import SETTINGS
from ...metrics import CONTENT_TYPE, METRICS
from ..access import authorize
from . import connect, control, manage, tokens


async def healthz(request: web.Request) -> web.Response:
    """The process answers (never authenticated)."""
    return web.json_response({"status": "ok"})


async def openapi_json(request: web.Request) -> web.Response:
    """This server's OpenAPI 3.1 document (never authenticated, like the speech API's), built once per process."""
    return web.Response(body=openapi.document_bytes("avatar", request.app[SETTINGS]), content_type="application/json")


async def metrics(request: web.Request) -> web.Response:
    """Prometheus metrics of this avatar server (live sessions, jobs, time to first audio); full key only."""
    await authorize(request, stream_route=False)
    return web.Response(body=request.app[METRICS].render(), headers={"Content-Type": CONTENT_TYPE})


def setup_routes(app: web.Application) -> None:
    """Register every route of the avatar server."""
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/openapi.json", openapi_json)
    app.router.add_get("/metrics", metrics)
    tokens.setup(app)
    connect.setup(app)
    control.setup(app)
    manage.setup(app)
