"""The front process: ``create_app(settings)`` builds the aiohttp application of the speech API."""

from __future__ import annotations

from aiohttp import web

from zsynth.core.config import Settings
from zsynth.kit.access import authenticator_ctx
from zsynth.kit.endpoints import add_endpoints
from zsynth.kit.errors import error_middleware
from zsynth.kit.hosts import host_guard
from zsynth.kit.middleware import request_id_middleware, setup_tracing
from zsynth.kit.openapi import document_bytes
from zsynth.kit.operations import OPENAPI_DOCUMENT
from zsynth.kit.server import run_server
from zsynth.services.keys import SETTINGS
from zsynth.services.metrics import METRICS, Metrics
from zsynth.services.queue import dispatcher, redis_client
from zsynth.speech import openapi
from zsynth.speech.access import auth_middleware, open_cors_middleware, setup_cors
from zsynth.speech.routes import TABLES, setup_services
from zsynth.speech.schemas.bodies import PARSING
from zsynth.speech.wyoming import wyoming_context


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
        client_max_size=settings.limits.max_body_bytes,
    )
    app[SETTINGS] = settings
    app[METRICS] = Metrics()
    setup_tracing(app, settings, "zsynth-front")  # only with ZSYNTH_OTLP_ENDPOINT (docs/operations.md, Traces)
    app.cleanup_ctx.extend([authenticator_ctx, redis_client, dispatcher])
    setup_services(app)
    if settings.wyoming.uri is not None:
        # After the services it speaks through (voices, dictionaries, dispatcher): it closes before them.
        app.cleanup_ctx.append(wyoming_context)
    add_endpoints(app, *TABLES, parsing=PARSING)
    app[OPENAPI_DOCUMENT] = lambda: document_bytes(openapi.build, settings)
    setup_cors(app, settings.http.cors_origins)
    return app


def run(settings: Settings) -> None:
    """Blocking entry of ``zsynth serve``."""
    run_server(create_app(settings), settings, settings.http.port, "front")
