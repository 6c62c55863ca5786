"""Routes of the avatar server, one module per resource; :func:`setup_routes` wires them all."""

from __future__ import annotations

from aiohttp import web

from . import connect, control, manage, tokens


async def healthz(request: web.Request) -> web.Response:
    """The process answers (never authenticated)."""
    return web.json_response({"status": "ok"})


def setup_routes(app: web.Application) -> None:
    """Register every route of the avatar server."""
    app.router.add_get("/healthz", healthz)
    tokens.setup(app)
    connect.setup(app)
    control.setup(app)
    manage.setup(app)
