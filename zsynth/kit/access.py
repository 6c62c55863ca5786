"""Access control both servers share: the authenticator's lifetime and the test for a cross-origin write to a
server without keys. Each server's own access rules (the speech API's :data:`~zsynth.speech.access.HTTP_GATE`, the
avatar's) are checked by :mod:`zsynth.kit.gate`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Final

from aiohttp import hdrs, web
from yarl import URL

from zsynth.kit.hosts import is_loopback_name
from zsynth.services.auth import AUTHENTICATOR, Authenticator
from zsynth.services.keys import SETTINGS

logger = logging.getLogger(__name__)


async def authenticator_ctx(app: web.Application) -> AsyncIterator[None]:
    """Cleanup context: the Authenticator under app[AUTHENTICATOR] (built from app[SETTINGS] unless preset)."""
    settings = app[SETTINGS]
    auth = app.get(AUTHENTICATOR) or Authenticator.from_settings(settings)
    await auth.start()
    app[AUTHENTICATOR] = auth
    if auth.is_open and not is_loopback_name(settings.http.host):  # binding it keeps the server on this machine
        logger.warning(
            "AUTHENTICATION IS OFF and the server binds %s: anyone who can reach it may use it. "
            "Set ZSYNTH_API_KEY, ZSYNTH_API_KEYS or ZSYNTH_API_KEYS_TABLE.",
            settings.http.host,
        )
    if auth.is_open and "*" in settings.http.cors_origins:
        logger.warning(
            "Open CORS: no keys are set and ZSYNTH_CORS_ORIGINS allows any origin, so any web page a visitor of this "
            "server opens could call it. Pages on other origins are refused POST, PUT, PATCH and DELETE (403 "
            "cross_origin_refused)%s. List the pages' origins in ZSYNTH_CORS_ORIGINS, or set keys.",
            " - except that ZSYNTH_CORS_OPEN_WRITES=true allows them" if settings.http.cors_open_writes else "",
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
        ("*" in settings.http.cors_origins or not any_origin_only)
        and not settings.http.cors_open_writes
        and cross_origin_write(request)
        and request.headers[hdrs.ORIGIN] not in settings.http.cors_origins
        and request.app[AUTHENTICATOR].is_open
    )
