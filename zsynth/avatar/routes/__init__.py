"""Routes of the avatar server, one module per resource; :func:`setup_routes` wires them all."""

from __future__ import annotations

from aiohttp import web

from ...keys import METRICS
from ...metrics import CONTENT_TYPE
from ..access import authorize
from . import connect, control, manage, tokens


async def healthz(request: web.Request) -> web.Response:
    """The process answers (never authenticated)."""
    return web.json_response({"status": "ok"})


async def metrics(request: web.Request) -> web.Response:
    """Prometheus metrics of this avatar server (live sessions, jobs, time to first audio); full key only."""
    await authorize(request, stream_route=False)
    return web.Response(body=request.app[METRICS].render(), headers={"Content-Type": CONTENT_TYPE})


def setup_routes(app: web.Application) -> None:
    """Register every route of the avatar server."""
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    tokens.setup(app)
    connect.setup(app)
    control.setup(app)
    manage.setup(app)
