"""Access control of the speech API: the authenticator's lifetime, the auth middleware and CORS.

Both read each route's declaration (:mod:`zsynth.endpoints`): its :class:`~zsynth.endpoints.Access` rule says who may
call it, its ``cors`` flag whether pages on other origins may.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Final

from aiohttp import hdrs, web
from yarl import URL

from . import cors
from .answer_headers import AUDIO_HEADER_NAMES
from .auth import (
    AUTHENTICATOR,
    CREDENTIAL,
    CREDENTIAL_HEADERS,
    Authenticator,
    AuthError,
    fingerprint,
    read_credential,
)
from .endpoints import ENDPOINTS, Access, endpoint_of
from .errors import ApiError, Handler
from .hosts import is_loopback_name
from .keys import REQUEST_ID, SETTINGS
from .logs import quoted
from .metrics import METRICS

logger = logging.getLogger(__name__)

CORS_ALLOW_HEADERS: Final = (*CREDENTIAL_HEADERS, "Content-Type", "Accept")
CORS_EXPOSE_HEADERS: Final = (*AUDIO_HEADER_NAMES, "Retry-After")


async def authenticator_ctx(app: web.Application) -> AsyncIterator[None]:
    """Cleanup context: the Authenticator under app[AUTHENTICATOR] (built from app[SETTINGS] unless preset)."""
    settings = app[SETTINGS]
    auth = app.get(AUTHENTICATOR) or Authenticator.from_settings(settings)
    await auth.start()
    app[AUTHENTICATOR] = auth
    if auth.is_open and not is_loopback_name(settings.host):  # binding it keeps the server on this machine
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


def refuses_open_write(request: web.Request, *, any_origin_only: bool) -> bool:
    """Whether a server without keys refuses this write from a page on another site: its origin is not listed and
    ZSYNTH_CORS_OPEN_WRITES is off. ``any_origin_only``: refuse only while ZSYNTH_CORS_ORIGINS allows ``*`` (the
    speech API, whose CORS otherwise admits listed pages only); the avatar server answers every origin, so it
    refuses whenever it has no keys."""
    settings = request.app[SETTINGS]
    return (
        ("*" in settings.cors_origins or not any_origin_only)
        and not settings.cors_open_writes
        and cross_origin_write(request)
        and request.headers[hdrs.ORIGIN] not in settings.cors_origins
        and request.app[AUTHENTICATOR].is_open
    )


@web.middleware
async def open_cors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """With no keys and ``*`` CORS, refuse writes from pages on other sites unless their origin is listed or
    ZSYNTH_CORS_OPEN_WRITES is set: any page a visitor opens could otherwise drive a server on their loopback."""
    if refuses_open_write(request, any_origin_only=True):
        logger.warning(
            "request %s: %s %s from the page origin %s refused: open server, cross-origin write",
            request.get(REQUEST_ID, "-"),
            request.method,
            quoted(request.path),
            quoted(request.headers[hdrs.ORIGIN]),
        )
        raise ApiError(
            403,
            "cross_origin_refused",
            "This server has no keys and allows any origin, so pages on other sites may only read: list the page's "
            "origin in ZSYNTH_CORS_ORIGINS, set ZSYNTH_CORS_OPEN_WRITES=true, or configure keys.",
        )
    return await handler(request)


async def required_access(request: web.Request) -> Access:
    """The access rule of the route ``request`` matched.

    A WebSocket route authenticates in band only on a WebSocket upgrade; a plain GET to it needs a credential like
    any other route. A request that matched no route (404, 405) needs a credential too, so that callers without one
    learn nothing about which paths exist; only a path whose every route is public (a probe asked with another
    method) is answered without one.
    """
    endpoint = endpoint_of(request)
    if endpoint is not None:
        if endpoint.access is Access.IN_BAND and request.headers.get(hdrs.UPGRADE, "").lower() != "websocket":
            return Access.TOKEN
        return endpoint.access
    error = request.match_info.http_exception
    if isinstance(error, web.HTTPMethodNotAllowed):
        registry = request.app.get(ENDPOINTS, {})
        found = set()
        for method in error.allowed_methods - {hdrs.METH_OPTIONS}:
            match = await request.app.router.resolve(request.clone(method=method))
            declared = registry.get(match.route)
            found.add(declared.access if declared is not None else Access.FULL)
        if found == {Access.PUBLIC}:
            return Access.PUBLIC
    return Access.TOKEN


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Resolve the caller's credential into request[CREDENTIAL] as the route's access rule asks, or answer 401."""
    if request.method == "OPTIONS":
        return await handler(request)
    access = await required_access(request)
    if access in (Access.PUBLIC, Access.IN_BAND):
        return await handler(request)
    secret = read_credential(request).secret
    try:
        authenticator = request.app[AUTHENTICATOR]
        credential = await authenticator.verify(secret, client=authenticator.client_of(request))
        if not credential.is_full and access is Access.FULL:
            raise AuthError("insufficient_scope", "Ephemeral tokens may only synthesize speech and read voices.")
    except AuthError as err:
        request.app[METRICS].auth_failures.labels(err.status).inc()
        logger.info(
            "request %s: %s %s refused: %s (key %s)",
            request.get(REQUEST_ID, "-"),
            request.method,
            quoted(request.path),
            err.status,
            fingerprint(secret) if secret else "-",
        )
        headers = {"WWW-Authenticate": "Bearer"} if err.http_status == 401 else {"Retry-After": "1"}
        raise ApiError(err.http_status, err.status, err.message, headers=headers) from err
    request[CREDENTIAL] = credential
    return await handler(request)


def setup_cors(app: web.Application, origins: tuple[str, ...]) -> None:
    """CORS on every route declared ``cors=True``, with the speech API's headers; call after all routes are added."""
    cors.setup_cors(app, origins, allow_headers=CORS_ALLOW_HEADERS, expose_headers=CORS_EXPOSE_HEADERS)
