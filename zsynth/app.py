"""The front process: ``create_app(settings)`` builds the aiohttp application of the speech API."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator

from aiohttp import web
from redis.asyncio import Redis

from .config import Settings
from .dispatch import Dispatcher
from .errors import Handler, error_middleware
from .keys import DISPATCHER, REDIS, REQUEST_ID, SETTINGS
from .routes import setup_routes
from .voices import VoiceConfigError

logger = logging.getLogger(__name__)


@web.middleware
async def request_id_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Give every request an id, echoed as ``request-id`` and carried in the logs."""
    request[REQUEST_ID] = uuid.uuid4().hex
    response = await handler(request)
    if not response.prepared:
        response.headers.setdefault("request-id", request[REQUEST_ID])
    return response


async def redis_client(app: web.Application) -> AsyncIterator[None]:
    """One Redis connection pool per front; fail start-up, not the first request, when Redis is down."""
    client = Redis.from_url(app[SETTINGS].redis_url, health_check_interval=30)
    await client.ping()
    app[REDIS] = client
    yield
    await client.aclose()


async def dispatcher(app: web.Application) -> AsyncIterator[None]:
    """The job dispatcher and its pub/sub listener."""
    dispatch = Dispatcher(app[SETTINGS], app[REDIS])
    await dispatch.start()
    app[DISPATCHER] = dispatch
    yield
    await dispatch.close()


def create_app(settings: Settings) -> web.Application:
    """Build the speech API application for ``settings``."""
    app = web.Application(
        middlewares=[request_id_middleware, error_middleware],
        client_max_size=settings.max_body_bytes,
    )
    app[SETTINGS] = settings
    app.cleanup_ctx.extend([redis_client, dispatcher])
    setup_routes(app)
    return app


def run(settings: Settings) -> None:
    """Serve the front on settings.host:settings.port (uvloop when available) until SIGINT/SIGTERM."""
    loop_factory = None
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:
        pass
    import asyncio

    if loop_factory is not None:
        asyncio.set_event_loop(loop_factory())
    logger.info("front listening on http://%s:%d", settings.host, settings.port)
    try:
        web.run_app(
            create_app(settings),
            host=settings.host,
            port=settings.port,
            print=None,
            handler_cancellation=True,
            access_log=None,
        )
    except VoiceConfigError as err:
        # Already logged as critical by the voices start-up; exit without a traceback.
        raise SystemExit(f"zsynth: {err}") from err
