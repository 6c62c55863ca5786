"""HTTP routes of the speech API, one module per resource, each declaring its routes on its own ``routes`` table.

:data:`TABLES` lists every table (the realtime sockets' included); :func:`setup_services` adds what the routes need
besides themselves (the voice library, the dictionary store, the socket registry).
"""

from __future__ import annotations

from typing import Final

from aiohttp import web

from zsynth.kit.endpoints import Endpoints
from zsynth.services.dictionaries import dictionaries_context
from zsynth.services.synthesis import synthesis_context
from zsynth.services.voice_library import voices_context
from zsynth.speech import ws
from zsynth.speech.routes import (
    dialogue,
    dictionaries,
    health,
    models,
    openai_pickers,
    openai_speech,
    timestamps,
    tokens,
    tts,
    user,
    vapi,
    voices,
)

#: Every route table of the speech API, in registration order.
TABLES: Final[tuple[Endpoints, ...]] = (
    health.operations,
    health.routes,
    tts.routes,
    openai_speech.routes,
    openai_pickers.routes,
    vapi.routes,
    dialogue.routes,
    tokens.routes,
    voices.routes,
    models.routes,
    user.routes,
    timestamps.routes,
    dictionaries.routes,
    ws.routes,
)


def setup_services(app: web.Application) -> None:
    """The lifecycles the routes rely on (call before :func:`~zsynth.kit.endpoints.add_endpoints`).

    The voice library and the dictionary store are services (``zsynth.services.voice_library``,
    ``zsynth.services.dictionaries``): the routes, the synthesis service and the sockets read what they set.
    """
    app.cleanup_ctx.extend([voices_context, dictionaries_context, synthesis_context])
    ws.setup(app)
