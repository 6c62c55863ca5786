"""CORS for browser pages on other origins: they call ``/connect`` with a session token in the query string.

Any origin may call, without cookies: every route needs a key or token, and a browser never holds a full key. A
server without keys is the exception: there any page a visitor opens could drive it, so pages on other sites are
refused POST and DELETE (403 ``cross_origin_refused``) as on the speech API (:func:`zsynth.access.cross_origin_write`),
unless their origin is listed in ``ZSYNTH_CORS_ORIGINS`` or ``ZSYNTH_CORS_OPEN_WRITES`` is true.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web

from ..access import cross_origin_write
from ..auth import AUTHENTICATOR
from ..errors import Handler
from ..keys import SETTINGS

_ALLOW_HEADERS: Final = "Authorization, Content-Type, X-Api-Key"
_ALLOW_METHODS: Final = "GET, POST, DELETE, OPTIONS"


@web.middleware
async def cors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answer preflights and mark responses readable from any origin."""
    origin = request.headers.get("Origin")
    if origin is None:
        return await handler(request)
    if request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
        return web.Response(
            status=204,
            headers={
                "Access-Control-Allow-Origin": "*",
                "Access-Control-Allow-Methods": _ALLOW_METHODS,
                "Access-Control-Allow-Headers": _ALLOW_HEADERS,
                "Access-Control-Max-Age": "600",
            },
        )
    settings = request.app[SETTINGS]
    if (
        not settings.cors_open_writes
        and origin not in settings.cors_origins
        and cross_origin_write(request)
        and request.app[AUTHENTICATOR].is_open
    ):
        return web.json_response(
            {
                "code": "cross_origin_refused",
                "message": "This server has no keys, so pages on other sites may not drive it: list the page's origin "
                "in ZSYNTH_CORS_ORIGINS, set ZSYNTH_CORS_OPEN_WRITES=true, or configure keys.",
            },
            status=403,
            headers={"Access-Control-Allow-Origin": "*"},
        )
    response = await handler(request)
    if not response.prepared:
        response.headers["Access-Control-Allow-Origin"] = "*"
    return response
