"""HTTP routes, one module per resource; :func:`setup_routes` wires them all."""

from __future__ import annotations

from aiohttp import web

from .. import ws
from . import health, timestamps, tts


def setup_routes(app: web.Application) -> None:
    """Register every route of the speech API."""
    health.setup(app)
    tts.setup(app)
    timestamps.setup(app)
    ws.setup(app)
