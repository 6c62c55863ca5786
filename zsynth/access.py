"""Access control of the speech API: the authenticator's lifetime, the words of its access checks
(:class:`~zsynth.gate.Gate`, for HTTP and the realtime sockets), the auth middleware and CORS.

Both read each route's declaration (:mod:`zsynth.endpoints`): its :class:`~zsynth.endpoints.Access` rule says who may
call it (checked by :mod:`zsynth.gate`), its ``cors`` flag whether pages on other origins may.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Final

from aiohttp import hdrs, web
from yarl import URL

from . import cors
from .answer_headers import AUDIO_HEADER_NAMES
from .auth import AUTHENTICATOR, CREDENTIAL_HEADERS, Authenticator
from .errors import ApiError, Handler
from .gate import Gate, access_middleware
from .hosts import is_loopback_name
from .keys import REQUEST_ID, SETTINGS
from .logs import quoted

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


#: The speech API's HTTP routes: credentials in headers only.
HTTP_GATE: Final = Gate(
    query=None, insufficient_scope="Ephemeral tokens may only synthesize speech and read voices.", challenge=True
)
#: The realtime sockets: a token may also come as ``?authorization=`` (browsers cannot set headers on a WebSocket).
SOCKET_GATE: Final = Gate(
    query="authorization",
    insufficient_scope=HTTP_GATE.insufficient_scope,
    full_key_in_query="Query parameter 'authorization' takes an ephemeral token only; send full keys in the "
    "xi-api-key header or the first message.",
)

#: Resolve the caller's credential into request[CREDENTIAL] as the route's access rule asks, or answer 401.
auth_middleware: Final = access_middleware(HTTP_GATE)


def setup_cors(app: web.Application, origins: tuple[str, ...]) -> None:
    """CORS on every route declared ``cors=True``, with the speech API's headers; call after all routes are added."""
    cors.setup_cors(app, origins, allow_headers=CORS_ALLOW_HEADERS, expose_headers=CORS_EXPOSE_HEADERS)
