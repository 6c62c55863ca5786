"""HTTP routes, one module per resource; :func:`setup_routes` wires them all."""

from __future__ import annotations

from aiohttp import web

from .. import ws
from . import dictionaries, document, health, metrics, models, openai_speech, timestamps, tokens, tts, user, voices


def setup_routes(app: web.Application) -> None:
    """Register every route of the speech API."""
    health.setup(app)
    document.setup(app)
    metrics.setup(app)
    tts.setup(app)
    openai_speech.setup(app)
    tokens.setup(app)
    voices.setup(app)
    models.setup(app)
    user.setup(app)
    timestamps.setup(app)
    dictionaries.setup(app)
    ws.setup(app)
