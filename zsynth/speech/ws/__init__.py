"""The realtime sockets (ElevenLabs stream-input and multi-stream-input) and the registry of open ones."""

from __future__ import annotations

from typing import Final

from aiohttp import web

from zsynth.kit.endpoints import Access, Endpoints
from zsynth.speech.ws.dialogue import dialogue_multi_stream_input, dialogue_stream_input
from zsynth.speech.ws.lifecycle import setup_registry
from zsynth.speech.ws.multi_stream_input import multi_stream_input
from zsynth.speech.ws.stream_input import stream_input

#: How the realtime routes' paths end (both under ``/v1/text-to-speech/{voice_id}``).
REALTIME_SUFFIXES: Final = ("/stream-input", "/multi-stream-input")

routes = Endpoints()
# The sockets read the key from the upgrade or from the first message, so the access middleware lets them through.
for _suffix, _handler in zip(REALTIME_SUFFIXES, (stream_input, multi_stream_input), strict=True):
    routes.get("/v1/text-to-speech/{voice_id}" + _suffix, access=Access.IN_BAND, websocket=True)(_handler)
# The dialogue sockets: the same machinery, voices named per context (zsynth.speech.ws.dialogue).
routes.get("/v1/text-to-dialogue/stream-input", access=Access.IN_BAND, websocket=True)(dialogue_stream_input)
routes.get("/v1/text-to-dialogue/multi-stream-input", access=Access.IN_BAND, websocket=True)(
    dialogue_multi_stream_input
)


def setup(app: web.Application) -> None:
    """Close every open socket with GOING_AWAY on shutdown (the routes are on :data:`routes`)."""
    setup_registry(app)
