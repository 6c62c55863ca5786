"""The front process: ``create_app(settings)`` builds the aiohttp application of the speech API."""

from __future__ import annotations

from aiohttp import web

from .access import authenticator_ctx
from .config import Settings
from .endpoints import add_endpoints
from .errors import error_middleware
from .hosts import host_guard
from .keys import SETTINGS
from .metrics import METRICS, Metrics
from .middleware import request_id_middleware
from .openapi import document_bytes
from .operations import OPENAPI_DOCUMENT
from .routes import TABLES, setup_services
from .routes.bodies import PARSING
from .server import run_server
from .services import dispatcher, redis_client
from .speech_access import auth_middleware, open_cors_middleware, setup_cors


def create_app(settings: Settings) -> web.Application:
    """Build the speech API application for ``settings``."""
    app = web.Application(
        middlewares=[
            request_id_middleware,
            error_middleware,
            host_guard(settings),
            open_cors_middleware,
            auth_middleware,
        ],
        client_max_size=settings.max_body_bytes,
    )
    app[SETTINGS] = settings
    app[METRICS] = Metrics()
    app.cleanup_ctx.extend([authenticator_ctx, redis_client, dispatcher])
    setup_services(app)
    add_endpoints(app, *TABLES, parsing=PARSING)
    app[OPENAPI_DOCUMENT] = lambda: document_bytes("speech", settings)
    setup_cors(app, settings.cors_origins)
    return app


def run(settings: Settings) -> None:
    """Blocking entry of ``zsynth serve``."""
    run_server(create_app(settings), settings, settings.port, "front")
