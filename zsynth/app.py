"""The front process: ``create_app(settings)`` builds the aiohttp application of the speech API."""

from __future__ import annotations

from aiohttp import web

from .access import auth_middleware, authenticator_ctx, open_cors_middleware, setup_cors
from .config import Settings
from .errors import error_middleware
from .keys import SETTINGS
from .metrics import METRICS, Metrics
from .middleware import request_id_middleware
from .routes import setup_routes
from .server import run_server
from .services import dispatcher, redis_client


def create_app(settings: Settings) -> web.Application:
    """Build the speech API application for ``settings``."""
    app = web.Application(
        middlewares=[request_id_middleware, error_middleware, open_cors_middleware, auth_middleware],
        client_max_size=settings.max_body_bytes,
    )
    app[SETTINGS] = settings
    app[METRICS] = Metrics()
    app.cleanup_ctx.extend([authenticator_ctx, redis_client, dispatcher])
    setup_routes(app)
    setup_cors(app, settings.cors_origins)
    return app


def run(settings: Settings) -> None:
    """Blocking entry of ``zsynth serve``."""
    run_server(create_app(settings), settings, settings.port, "front")
