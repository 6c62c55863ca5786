"""CORS for browser pages on other origins: they call ``/connect`` with a session token in the query string.

Any origin may call, without cookies: every route needs a key or token, and a browser never holds a full key.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web

from ..errors import Handler

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
    response = await handler(request)
    if not response.prepared:
        response.headers["Access-Control-Allow-Origin"] = "*"
    return response
