"""The demo server: the page, its static files, ``GET /demo/session`` (tokens per load) and the clone proxy.

The demo holds a full key, so it answers only its allowed host names (:mod:`zsynth.kit.hosts`) and every answer carries
a Content-Security-Policy (its own script and style only; calls to itself and to the two APIs it names) and
``X-Frame-Options: DENY``: no other page may frame it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import aiohttp
from aiohttp import web
from yarl import URL

from zsynth.core.codes import ApiCode
from zsynth.core.config import Settings
from zsynth.demo.backend import DEMO_BACKEND, DemoBackend, UpstreamError, read_clone_form, same_origin
from zsynth.kit.errors import ApiError, error_middleware
from zsynth.kit.hosts import host_guard
from zsynth.kit.middleware import request_id_middleware
from zsynth.kit.server import run_server
from zsynth.services.keys import REQUEST_ID, SETTINGS

logger = logging.getLogger(__name__)

STATIC_DIR: Final = Path(__file__).resolve().parent / "static"
# Tokens and pages must never be cached: every load gets its own.
_NO_STORE: Final = {"Cache-Control": "no-store"}


async def backend_ctx(app: web.Application) -> AsyncIterator[None]:
    """One HTTP client for the demo's calls to the speech API and the avatar server."""
    async with aiohttp.ClientSession() as http:
        app[DEMO_BACKEND] = DemoBackend(app[SETTINGS], http)
        yield


def content_security_policy(api_url: str, avatar_url: str) -> str:
    """The page's policy: its own files, the favicon's ``data:`` URL, and calls (fetch and WebSocket) to this server
    and to the speech API and avatar server at ``api_url`` and ``avatar_url``; no plugins, no framing."""
    apis = [URL(url).origin() for url in (api_url, avatar_url)]
    sockets = [api.with_scheme("wss" if api.scheme == "https" else "ws") for api in apis]
    connect = " ".join(dict.fromkeys(str(url) for url in (*apis, *sockets)))
    return (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        f"connect-src 'self' {connect}; object-src 'none'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    )


async def security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """Every answer (page, static files, JSON, errors) carries the policy for the page as this request opened it."""
    api_url, avatar_url = request.app[DEMO_BACKEND].page_urls(request.url)
    response.headers["Content-Security-Policy"] = content_security_policy(api_url, avatar_url)
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["X-Content-Type-Options"] = "nosniff"


async def index(request: web.Request) -> web.FileResponse:
    """The page."""
    return web.FileResponse(STATIC_DIR / "index.html", headers=_NO_STORE)


async def session(request: web.Request) -> web.Response:
    """Base URLs and freshly minted tokens for this page load."""
    body = await request.app[DEMO_BACKEND].page_session(request.url)
    logger.info("request %s: demo session handed out (mode %s)", request[REQUEST_ID], body["mode"])
    return web.json_response(body, headers=_NO_STORE)


async def clone(request: web.Request) -> web.Response:
    """Forward a multipart clone upload (``name``, ``files``) to the speech API with the full key; only from the demo
    page itself (403 ``cross_origin_refused`` when the ``Origin`` is another one)."""
    settings = request.app[SETTINGS]
    if not same_origin(request.headers.get("Origin"), request.host):
        logger.warning(
            "request %s: clone upload from the page origin %r refused",
            request[REQUEST_ID],
            request.headers.get("Origin", "")[:200],
        )
        raise ApiError(403, ApiCode.CROSS_ORIGIN_REFUSED, "Clone uploads are accepted from the demo page only.")
    if not request.content_type.startswith("multipart/form-data"):
        raise ApiError(
            400, ApiCode.INVALID_CONTENT_TYPE, "Send the clip as multipart/form-data with 'name' and 'files'."
        )
    form = await read_clone_form(request, settings)
    try:
        status, body = await request.app[DEMO_BACKEND].clone(form)
    except UpstreamError as err:
        raise ApiError(502, ApiCode.UPSTREAM_UNAVAILABLE, str(err)) from err
    try:
        parsed = json.loads(body)
    except ValueError as err:
        raise ApiError(502, ApiCode.UPSTREAM_INVALID, f"The speech API answered HTTP {status} without JSON.") from err
    logger.info("request %s: clone upload forwarded (HTTP %d)", request[REQUEST_ID], status)
    return web.json_response(parsed, status=status, headers=_NO_STORE)


def create_demo_app(settings: Settings) -> web.Application:
    """Build the demo server application for ``settings``."""
    app = web.Application(middlewares=[request_id_middleware, error_middleware, host_guard(settings, always=True)])
    app[SETTINGS] = settings
    app.on_response_prepare.append(security_headers)
    app.cleanup_ctx.append(backend_ctx)
    app.router.add_get("/", index)
    app.router.add_get("/demo/session", session)
    app.router.add_post("/demo/clone", clone)
    app.router.add_static("/static/", STATIC_DIR, append_version=False)
    return app


def run_demo(settings: Settings) -> None:
    """Serve the demo on settings.http.host:settings.demo.port until SIGINT/SIGTERM, as the other servers run (uvloop,
    READY/STOPPING, drain)."""
    run_server(create_demo_app(settings), settings, settings.demo.port, "demo server")
