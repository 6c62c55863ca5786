"""The avatar server: ``create_avatar_app(settings)`` builds its aiohttp application; ``run_avatar`` serves it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Final

from aiohttp import web

from zsynth.avatar import openapi
from zsynth.avatar.access import avatar_access_middleware, open_write_middleware
from zsynth.avatar.errors import avatar_error_middleware
from zsynth.avatar.renderers import AvatarRenderer, builtin_avatars
from zsynth.avatar.renderers.base import AVATARS
from zsynth.avatar.routes import setup_routes
from zsynth.avatar.sessions import AVATAR_SESSIONS, SessionRegistry
from zsynth.core.config import Settings
from zsynth.core.protocol import ErrorCode
from zsynth.kit.access import authenticator_ctx
from zsynth.kit.cors import any_origin, setup_cors
from zsynth.kit.hosts import host_guard
from zsynth.kit.middleware import request_id_middleware
from zsynth.kit.openapi import document_bytes
from zsynth.kit.operations import OPENAPI_DOCUMENT
from zsynth.kit.server import run_server
from zsynth.services.auth import AUTHENTICATOR, CREDENTIAL_HEADERS, Authenticator
from zsynth.services.keys import SETTINGS
from zsynth.services.metrics import METRICS, Metrics
from zsynth.services.queue import dispatcher, redis_client
from zsynth.services.synthesis import SYNTHESIS, synthesis_context
from zsynth.services.voice_library import follower_voices_context

logger = logging.getLogger(__name__)

#: The request headers pages on other origins may send.
ALLOW_HEADERS: Final = (*CREDENTIAL_HEADERS, "Content-Type")


async def sessions(app: web.Application) -> AsyncIterator[None]:
    """The live-session registry; every session is closed before Redis and the dispatcher go."""
    registry = SessionRegistry(app[SETTINGS], app[SYNTHESIS])
    app[AVATAR_SESSIONS] = registry
    app[METRICS].avatar_sessions.set_function(lambda: len(registry.sessions))
    yield
    await registry.close_all(ErrorCode.SHUTTING_DOWN)


def create_avatar_app(settings: Settings, auth: Authenticator | None = None) -> web.Application:
    """Build the avatar server application for ``settings`` (``auth``: an auth core to use instead of the default)."""
    app = web.Application(
        middlewares=[
            request_id_middleware,
            avatar_error_middleware,
            host_guard(settings),
            open_write_middleware,
            avatar_access_middleware,
        ],
        client_max_size=1024 * 1024,
    )
    app[SETTINGS] = settings
    app[METRICS] = Metrics()
    avatars: dict[str, AvatarRenderer] = dict(builtin_avatars(settings.avatar.size))
    app[AVATARS] = avatars
    if auth is not None:
        app[AUTHENTICATOR] = auth  # authenticator_ctx uses a preset one (tests inject a clock this way)
    # The voice library (a follower: the speech front owns changes) gives sessions clones and the swap-out voice.
    app.cleanup_ctx.extend(
        [redis_client, dispatcher, authenticator_ctx, follower_voices_context, synthesis_context, sessions]
    )
    app[OPENAPI_DOCUMENT] = lambda: document_bytes(openapi.build, settings)
    setup_routes(app)
    # Any page may call: every route needs a key or a token. Token minting is the exception: a full key belongs in a
    # backend, so it is offered only to the origins ZSYNTH_CORS_ORIGINS names (none by default).
    setup_cors(app, ("*",), allow_headers=ALLOW_HEADERS, full_key_origins=settings.http.cors_origins)
    any_origin(app)
    return app


def run_avatar(settings: Settings) -> None:
    """Serve the avatar server on settings.http.host:settings.avatar.port until SIGINT/SIGTERM, then drain."""
    run_server(create_avatar_app(settings), settings, settings.avatar.port, "avatar server")
