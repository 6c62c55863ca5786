"""Access control of the speech API: the authenticator's lifetime, the auth middleware and CORS."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import AsyncIterator
from typing import Final

import aiohttp_cors
from aiohttp import hdrs, web
from yarl import URL

from .auth import (
    AUTHENTICATOR,
    CREDENTIAL,
    Authenticator,
    AuthError,
    ephemeral_allowed,
    fingerprint,
    secret_from_headers,
)
from .errors import ApiError, Handler
from .keys import REQUEST_ID, SETTINGS
from .metrics import METRICS

logger = logging.getLogger(__name__)

# Probes answer without a key, so load balancers and orchestrators need none; the API's description is public too.
# /metrics is not public: it needs a full key whenever keys are configured (ephemeral tokens are refused).
PUBLIC_PATHS: Final = frozenset({"/healthz", "/readyz", "/openapi.json"})
REALTIME_SUFFIXES: Final = ("/stream-input", "/multi-stream-input")
# A full key must never reach a browser, so the route that needs one is not offered to browsers at all.
NO_CORS_PATHS: Final = frozenset({"/v1/tokens/ephemeral"})
CORS_ALLOW_HEADERS: Final = ("Authorization", "xi-api-key", "Content-Type", "Accept")
CORS_EXPOSE_HEADERS: Final = (
    "request-id",
    "character-cost",
    "history-item-id",
    "x-voice-id",
    "x-model-id",
    "Retry-After",
)


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def authenticator_ctx(app: web.Application) -> AsyncIterator[None]:
    """Cleanup context: the Authenticator under app[AUTHENTICATOR] (built from app[SETTINGS] unless preset)."""
    settings = app[SETTINGS]
    auth = app.get(AUTHENTICATOR) or Authenticator.from_settings(settings)
    await auth.start()
    app[AUTHENTICATOR] = auth
    if auth.is_open and not is_loopback(settings.host):
        logger.warning(
            "AUTHENTICATION IS OFF and the server binds %s: anyone who can reach it may use it. "
            "Set ZSYNTH_API_KEY, ZSYNTH_API_KEYS or ZSYNTH_API_KEYS_TABLE.",
            settings.host,
        )
    if auth.is_open and "*" in settings.cors_origins:
        logger.warning(
            "Open CORS: no keys are set and ZSYNTH_CORS_ORIGINS allows any origin, so any web page a visitor of this "
            "server opens could call it. Pages on other origins are refused POST, PUT, PATCH and DELETE (403 "
            "cross_origin_refused)%s. List the pages' origins in ZSYNTH_CORS_ORIGINS, or set keys.",
            " - except that ZSYNTH_CORS_OPEN_WRITES=true allows them" if settings.cors_open_writes else "",
        )
    yield
    await auth.close()


_WRITES: Final = frozenset({hdrs.METH_POST, hdrs.METH_PUT, hdrs.METH_PATCH, hdrs.METH_DELETE})


def cross_origin_write(request: web.Request) -> bool:
    """A write (POST, PUT, PATCH, DELETE) sent by a page on another site: its ``Origin`` header names a host other
    than the one the request was sent to (another port on the same host counts as the same site: the demo page)."""
    origin = request.headers.get(hdrs.ORIGIN)
    if request.method not in _WRITES or origin is None:
        return False  # no Origin: not a browser's cross-origin request (browsers always send it on those)
    try:
        origin_host = URL(origin).host
    except ValueError:
        return True
    return origin_host is None or origin_host.lower() != (request.url.host or "").lower()


@web.middleware
async def open_cors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """With no keys and ``*`` CORS, refuse writes from pages on other sites unless their origin is listed or
    ZSYNTH_CORS_OPEN_WRITES is set: any page a visitor opens could otherwise drive a server on their loopback."""
    settings = request.app[SETTINGS]
    if (
        "*" in settings.cors_origins
        and not settings.cors_open_writes
        and cross_origin_write(request)
        and request.headers[hdrs.ORIGIN] not in settings.cors_origins
        and request.app[AUTHENTICATOR].is_open
    ):
        logger.warning(
            "request %s: %s %s from the page origin %r refused: open server, cross-origin write",
            request.get(REQUEST_ID, "-"),
            request.method,
            request.path,
            request.headers[hdrs.ORIGIN][:200],
        )
        raise ApiError(
            403,
            "cross_origin_refused",
            "This server has no keys and allows any origin, so pages on other sites may only read: list the page's "
            "origin in ZSYNTH_CORS_ORIGINS, set ZSYNTH_CORS_OPEN_WRITES=true, or configure keys.",
        )
    return await handler(request)


def route_path(request: web.Request) -> str:
    """The matched route's pattern (immune to path tricks), or the raw path when nothing matched."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else request.path


def is_realtime_upgrade(request: web.Request) -> bool:
    """A WebSocket upgrade to a realtime path: it authenticates in band, so the middleware lets it through."""
    return (
        request.method == "GET"
        and request.headers.get(hdrs.UPGRADE, "").lower() == "websocket"
        and request.path.startswith("/v1/text-to-speech/")
        and request.path.endswith(REALTIME_SUFFIXES)
    )


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Resolve the caller's credential into request[CREDENTIAL], enforce the token scope, or answer 401."""
    if request.method == "OPTIONS" or request.path in PUBLIC_PATHS or is_realtime_upgrade(request):
        return await handler(request)
    secret = secret_from_headers(request.headers)
    try:
        credential = await request.app[AUTHENTICATOR].verify(secret, client=request.remote)
        if not credential.is_full and not ephemeral_allowed(request.method, route_path(request)):
            raise AuthError("insufficient_scope", "Ephemeral tokens may only synthesize speech and read voices.")
    except AuthError as err:
        request.app[METRICS].auth_failures.labels(err.status).inc()
        logger.info(
            "request %s: %s %s refused: %s (key %s)",
            request.get(REQUEST_ID, "-"),
            request.method,
            request.path,
            err.status,
            fingerprint(secret) if secret else "-",
        )
        headers = {"WWW-Authenticate": "Bearer"} if err.http_status == 401 else {"Retry-After": "1"}
        raise ApiError(err.http_status, err.status, err.message, headers=headers) from err
    request[CREDENTIAL] = credential
    return await handler(request)


def setup_cors(app: web.Application, origins: tuple[str, ...]) -> None:
    """CORS (aiohttp-cors) on every route a browser may call; call after all routes are added."""
    if not origins:
        return
    options = aiohttp_cors.ResourceOptions(  # type: ignore[no-untyped-call]
        allow_credentials=False,  # credentials travel in headers, never in cookies
        allow_headers=CORS_ALLOW_HEADERS,
        expose_headers=CORS_EXPOSE_HEADERS,
        allow_methods="*",
        max_age=600,
    )
    cors = aiohttp_cors.setup(app, defaults=dict.fromkeys(origins, options))
    for route in list(app.router.routes()):
        resource = route.resource
        if resource is None or route.method in ("OPTIONS", "HEAD"):
            continue
        path = resource.canonical
        if path in PUBLIC_PATHS or path in NO_CORS_PATHS:
            continue
        if route.method == hdrs.METH_ANY:
            # aiohttp-cors cannot add a preflight next to a catch-all route (class-based views): it answers OPTIONS.
            logger.debug("no CORS on %s: registered for all methods", path)
            continue
        cors.add(route)
