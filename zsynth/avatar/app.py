"""The avatar server: ``create_avatar_app(settings)`` builds its aiohttp application; ``run_avatar`` serves it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from ..app import dispatcher, redis_client, request_id_middleware
from ..auth import Authenticator
from ..config import Settings
from ..keys import AUTHENTICATOR, AVATAR_SESSIONS, AVATARS, DISPATCHER, METRICS, SETTINGS
from ..metrics import Metrics
from .cors import cors_middleware
from .errors import avatar_error_middleware
from .renderers import AvatarRenderer, builtin_avatars
from .routes import setup_routes
from .sessions import SessionRegistry

logger = logging.getLogger(__name__)


def _authenticator_ctx(auth: Authenticator | None) -> Callable[[web.Application], AsyncIterator[None]]:
    async def authenticator(app: web.Application) -> AsyncIterator[None]:
        """The auth core shared with the speech API: static keys and the keys table (needed to mint tokens)."""
        app[AUTHENTICATOR] = auth or Authenticator.from_settings(app[SETTINGS])
        await app[AUTHENTICATOR].start()
        yield
        await app[AUTHENTICATOR].close()

    return authenticator


async def sessions(app: web.Application) -> AsyncIterator[None]:
    """The live-session registry; every session is closed before Redis and the dispatcher go."""
    registry = SessionRegistry(app[SETTINGS], app[DISPATCHER])
    app[AVATAR_SESSIONS] = registry
    yield
    await registry.close_all("shutting_down")


def create_avatar_app(settings: Settings, auth: Authenticator | None = None) -> web.Application:
    """Build the avatar server application for ``settings`` (``auth``: an auth core to use instead of the default)."""
    app = web.Application(
        middlewares=[cors_middleware, request_id_middleware, avatar_error_middleware], client_max_size=1024 * 1024
    )
    app[SETTINGS] = settings
    app[METRICS] = Metrics()  # the shared dispatcher records job outcomes; this server does not serve /metrics
    avatars: dict[str, AvatarRenderer] = dict(builtin_avatars(settings.avatar_size))
    app[AVATARS] = avatars
    app.cleanup_ctx.extend([redis_client, dispatcher, _authenticator_ctx(auth), sessions])
    setup_routes(app)
    return app


def run_avatar(settings: Settings) -> None:
    """Serve the avatar server on settings.host:settings.avatar_port until SIGINT/SIGTERM."""
    try:
        import uvloop

        asyncio.set_event_loop(uvloop.new_event_loop())
    except ImportError:
        pass
    logger.info("avatar server listening on http://%s:%d", settings.host, settings.avatar_port)
    web.run_app(
        create_avatar_app(settings),
        host=settings.host,
        port=settings.avatar_port,
        print=None,
        handler_cancellation=True,
        access_log=None,
    )
