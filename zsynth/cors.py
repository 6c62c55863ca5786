"""CORS of zsynth's HTTP servers: one implementation (aiohttp-cors), offered on the routes declared ``cors=True``.

Credentials always travel in headers, never in cookies, so no server allows credentials. Each server passes its own
allowed and exposed headers; :func:`any_origin` makes a server answer ``Access-Control-Allow-Origin: *`` and
preflights with 204 (the avatar server, which any page may call), where aiohttp-cors echoes the origin and answers
preflights with 200.
"""

from __future__ import annotations

from collections.abc import Iterable

import aiohttp_cors
from aiohttp import hdrs, web

from .endpoints import ENDPOINTS
from .errors import Handler

#: How long a browser may cache a preflight's answer, in seconds.
MAX_AGE = 600


def setup_cors(
    app: web.Application,
    origins: Iterable[str],
    *,
    allow_headers: Iterable[str],
    expose_headers: Iterable[str] = (),
) -> None:
    """Offer every route of ``app`` declared ``cors=True`` to pages on ``origins``; call after all routes are added.

    A route without a declaration is not offered.
    """
    origins = tuple(origins)
    if not origins:
        return
    options = aiohttp_cors.ResourceOptions(  # type: ignore[no-untyped-call]  # aiohttp-cors ships no types
        allow_credentials=False,
        allow_headers=tuple(allow_headers),
        expose_headers=tuple(expose_headers),
        allow_methods="*",
        max_age=MAX_AGE,
    )
    cors = aiohttp_cors.setup(app, defaults=dict.fromkeys(origins, options))
    for route, endpoint in list(app.get(ENDPOINTS, {}).items()):
        if not endpoint.cors or route.method in (hdrs.METH_OPTIONS, hdrs.METH_HEAD):
            continue
        cors.add(route)


async def _wildcard_origin(request: web.Request, response: web.StreamResponse) -> None:
    # Without credentials "*" answers any origin, and a cache may share the answer between origins. A request that
    # matched no route (404, 405) gets it too, so a page can read the JSON error rather than an opaque CORS failure.
    unmatched = request.match_info.http_exception is not None and hdrs.ORIGIN in request.headers
    if unmatched or hdrs.ACCESS_CONTROL_ALLOW_ORIGIN in response.headers:
        response.headers[hdrs.ACCESS_CONTROL_ALLOW_ORIGIN] = "*"


@web.middleware
async def _no_content_preflights(request: web.Request, handler: Handler) -> web.StreamResponse:
    response = await handler(request)
    # A preflight's answer has no body: 204 says so (the status is fixed before on_response_prepare runs).
    if (
        request.method == hdrs.METH_OPTIONS
        and hdrs.ACCESS_CONTROL_ALLOW_ORIGIN in response.headers
        and response.status == 200
        and not response.prepared
    ):
        response.set_status(204)
    return response


def any_origin(app: web.Application) -> None:
    """Answer CORS requests with ``Access-Control-Allow-Origin: *`` and preflights with 204 No Content.

    Call after :func:`setup_cors` with the origins ``("*",)`` (the hook must run after aiohttp-cors's) and before
    the app starts (it adds a middleware).
    """
    app.on_response_prepare.append(_wildcard_origin)
    app.middlewares.append(_no_content_preflights)
