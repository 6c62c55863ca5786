"""CORS of zsynth's HTTP servers: one implementation (aiohttp-cors), offered on the routes declared ``cors=True``.

Credentials always travel in headers, never in cookies, so no server allows credentials. Each server passes its own
allowed and exposed headers; :func:`any_origin` makes a server answer ``Access-Control-Allow-Origin: *`` and
preflights with 204 (the avatar server, which any page may call), where aiohttp-cors echoes the origin and answers
preflights with 200.

A route declared ``cors=False`` is offered to no page, except that a full-key route is offered to the origins a
server names in ``full_key_origins`` (the avatar server: the ones ZSYNTH_CORS_ORIGINS lists by name). Minting tokens
is such a route: the full key belongs in a backend, not in a page, so ``*`` never covers it.
"""

from __future__ import annotations

from collections.abc import Iterable

import aiohttp_cors
from aiohttp import hdrs, web

from zsynth.kit.endpoints import ENDPOINTS, Access, endpoint_of
from zsynth.kit.errors import Handler

#: How long a browser may cache a preflight's answer, in seconds.
MAX_AGE = 600


def setup_cors(
    app: web.Application,
    origins: Iterable[str],
    *,
    allow_headers: Iterable[str],
    expose_headers: Iterable[str] = (),
    full_key_origins: Iterable[str] = (),
) -> None:
    """Offer every route of ``app`` declared ``cors=True`` to pages on ``origins``, and the full-key routes declared
    ``cors=False`` to pages on ``full_key_origins``; call after all routes are added.

    A route without a declaration is not offered.
    """
    origins, full_key_origins = tuple(origins), tuple(o for o in full_key_origins if o != "*")
    if not origins and not full_key_origins:
        return
    options = aiohttp_cors.ResourceOptions(  # type: ignore[no-untyped-call]  # aiohttp-cors ships no types
        allow_credentials=False,
        allow_headers=tuple(allow_headers),
        expose_headers=tuple(expose_headers),
        allow_methods="*",
        max_age=MAX_AGE,
    )
    # No defaults: each route carries its own origins, so a route's narrower list is not widened by a default "*".
    cors = aiohttp_cors.setup(app)
    for route, endpoint in list(app.get(ENDPOINTS, {}).items()):
        if route.method in (hdrs.METH_OPTIONS, hdrs.METH_HEAD):
            continue
        offered = origins if endpoint.cors else full_key_origins if endpoint.access is Access.FULL else ()
        if offered:
            cors.add(route, dict.fromkeys(offered, options))


async def _wildcard_origin(request: web.Request, response: web.StreamResponse) -> None:
    # Without credentials "*" answers any origin, and a cache may share the answer between origins. A request that
    # matched no route (404, 405) gets it too, so a page can read the JSON error rather than an opaque CORS failure.
    # A preflight that matched nothing (a route offered to no page) gets no answer a browser could take for consent.
    # A route offered to named origins only (token minting) keeps aiohttp-cors's echo of the origin.
    unmatched = (
        request.match_info.http_exception is not None
        and hdrs.ORIGIN in request.headers
        and request.method != hdrs.METH_OPTIONS
    )
    endpoint = endpoint_of(request)
    offered = hdrs.ACCESS_CONTROL_ALLOW_ORIGIN in response.headers and (endpoint is None or endpoint.cors)
    if unmatched or offered:
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
