"""The front process: ``create_app(settings)`` builds the aiohttp application of the speech API."""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl
import uuid
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from aiohttp import web
from redis.asyncio import BlockingConnectionPool, Redis

from .access import auth_middleware, authenticator_ctx, open_cors_middleware, setup_cors
from .config import Settings
from .dispatch import DISPATCHER, Dispatcher
from .endpoints import OPENAPI_DOCUMENT, add_endpoints
from .errors import Handler, error_middleware
from .keys import REDIS, REQUEST_ID, SETTINGS
from .metrics import METRICS, Metrics
from .openapi import document_bytes
from .routes import TABLES, setup_services
from .sdnotify import notify
from .supervise import Supervisor
from .tls import TlsError, server_context
from .tls import reload as reload_tls
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
    """One Redis connection pool per front; fail start-up, not the first request, when Redis is down.

    The pool blocks: with ZSYNTH_REDIS_POOL_SIZE commands in flight, the next one waits for a free connection (up to
    ZSYNTH_REDIS_POOL_TIMEOUT) rather than failing with redis-py's MaxConnectionsError.
    """
    settings = app[SETTINGS]
    # Short connect timeout: while Redis is down, requests fail fast with 503 instead of hanging.
    pool = BlockingConnectionPool.from_url(
        settings.redis_url,
        max_connections=settings.redis_pool_size,
        timeout=settings.redis_pool_timeout_s,
        health_check_interval=30,
        socket_connect_timeout=1.0,
    )
    client = Redis.from_pool(pool)
    await client.ping()
    app[REDIS] = client
    yield
    await client.aclose()


async def dispatcher(app: web.Application) -> AsyncIterator[None]:
    """The job dispatcher and its pub/sub listener."""
    metrics = app[METRICS]
    dispatch = Dispatcher(app[SETTINGS], app[REDIS], metrics, Supervisor(on_restart=metrics.count_restart))
    await dispatch.start()
    app[DISPATCHER] = dispatch
    yield
    await dispatch.close()


def create_app(settings: Settings) -> web.Application:
    """Build the speech API application for ``settings``."""
    app = web.Application(
        middlewares=[request_id_middleware, error_middleware, open_cors_middleware, auth_middleware],
        client_max_size=settings.max_body_bytes,
    )
    app[SETTINGS] = settings
    app[METRICS] = Metrics()
    app.cleanup_ctx.extend([authenticator_ctx, redis_client, dispatcher])
    setup_services(app)
    add_endpoints(app, *TABLES)
    app[OPENAPI_DOCUMENT] = lambda: document_bytes("speech", settings)
    setup_cors(app, settings.cors_origins)
    return app


async def serve_app(app: web.Application, settings: Settings, port: int, name: str) -> None:
    """Serve ``app`` until SIGTERM/SIGINT, then drain; shared by the front and the avatar server.

    With ZSYNTH_TLS_CERT_FILE/KEY_FILE the port speaks HTTPS and WSS, and SIGHUP reloads the certificate.
    Drain order: stop accepting connections, run the shutdown hooks (open WebSockets are closed with 1001 "going
    away"), let running HTTP streams finish for up to ZSYNTH_DRAIN_TIMEOUT seconds, then cancel what is left.
    systemd (``Type=notify``) hears READY once the socket listens and STOPPING when the drain starts.
    """
    ssl_context = server_context(settings)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=settings.drain_timeout_s)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, port, reuse_port=settings.reuse_port, ssl_context=ssl_context)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # SIGHUP (systemctl reload) re-reads the certificate; without TLS it is ignored rather than ending the process.
    loop.add_signal_handler(signal.SIGHUP, _on_sighup, ssl_context, settings, name)
    scheme = "https" if ssl_context is not None else "http"
    logger.info("%s listening on %s://%s:%d", name, scheme, settings.host, port)
    notify(f"READY=1\nSTATUS={name} serving")
    await stop.wait()
    logger.info("%s draining: no new connections; open streams get %gs to finish", name, settings.drain_timeout_s)
    notify("STOPPING=1")
    await runner.cleanup()
    logger.info("%s stopped", name)


def _on_sighup(ssl_context: ssl.SSLContext | None, settings: Settings, name: str) -> None:
    if ssl_context is None:
        logger.info("%s: SIGHUP ignored (no TLS certificate to reload)", name)
        return
    reload_tls(ssl_context, settings)


def run_forever(main: Coroutine[Any, Any, None]) -> None:
    """Run a server coroutine on uvloop when available; a bad voice pin or TLS pair exits with its message only."""
    try:
        try:
            import uvloop

            uvloop.run(main)
        except ImportError:
            asyncio.run(main)
    except VoiceConfigError as err:
        # Already logged as critical by the voices start-up; exit without a traceback.
        raise SystemExit(f"zsynth: {err}") from err
    except TlsError as err:
        raise SystemExit(f"zsynth: {err}") from err


def run(settings: Settings) -> None:
    """Blocking entry of ``zsynth serve``."""
    run_forever(serve_app(create_app(settings), settings, settings.port, "front"))
