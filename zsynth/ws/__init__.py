"""The realtime sockets (ElevenLabs stream-input and multi-stream-input) and the registry of open ones."""

from __future__ import annotations

from aiohttp import web

from .lifecycle import setup_registry
from .multi_stream_input import multi_stream_input
from .stream_input import stream_input


def setup(app: web.Application) -> None:
    """Register the two socket routes and close every open socket with GOING_AWAY on shutdown."""
    setup_registry(app)
    app.router.add_get("/v1/text-to-speech/{voice_id}/stream-input", stream_input)
    app.router.add_get("/v1/text-to-speech/{voice_id}/multi-stream-input", multi_stream_input)
