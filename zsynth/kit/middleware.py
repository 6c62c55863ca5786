"""Middleware every server shares: the request id, and one error middleware given the server's envelope (the speech
API's ElevenLabs ``detail``, the avatar server's ``{code, message}``); a route may declare its own (OpenAI's)."""

from __future__ import annotations

import logging
import uuid
from typing import Final

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler, Middleware

from zsynth.kit.endpoints import ENDPOINTS, Endpoint, endpoint_of
from zsynth.kit.envelope import ErrorEnvelope, Refusal, render
from zsynth.services.keys import REQUEST_ID

logger = logging.getLogger(__name__)


#: The code an aiohttp HTTP error (unknown route, wrong method, body too large) gets in every envelope.
HTTP_ERROR_CODES: Final = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}
INTERNAL_MESSAGE: Final = "Something went wrong on our side."


@web.middleware
async def request_id_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Give every request an id, echoed as ``request-id`` and carried in the logs."""
    request[REQUEST_ID] = uuid.uuid4().hex
    response = await handler(request)
    if not response.prepared:
        response.headers.setdefault("request-id", request[REQUEST_ID])
    return response


async def declarations_at(request: web.Request) -> list[Endpoint]:
    """The declarations of the route ``request`` matched, or for a wrong method (405) of every route on its path;
    empty for a path no route matches (404) and for undeclared routes."""
    endpoint = endpoint_of(request)
    if endpoint is not None:
        return [endpoint]
    error = request.match_info.http_exception
    if not isinstance(error, web.HTTPMethodNotAllowed):
        return []
    registry = request.app.get(ENDPOINTS, {})
    found = []
    for method in sorted(error.allowed_methods - {hdrs.METH_OPTIONS}):
        declared = registry.get((await request.app.router.resolve(request.clone(method=method))).route)
        if declared is not None:
            found.append(declared)
    return found


async def envelope_of(request: web.Request, default: type[ErrorEnvelope]) -> type[ErrorEnvelope]:
    """The envelope ``request``'s errors are answered in: the one its route declares (on a 405, the one every route
    of the path declares), else the server's ``default``."""
    declared = {endpoint.error_envelope for endpoint in await declarations_at(request)}
    if len(declared) == 1 and (envelope := declared.pop()) is not None:
        return envelope
    return default


def error_middleware_for(envelope: type[ErrorEnvelope]) -> Middleware:
    """The error middleware of a server whose envelope is ``envelope``: a :class:`Refusal` (the servers' errors are
    refusals), aiohttp's HTTP errors (the ``Allow`` header kept) and any other exception (logged with the request
    id, answered 500 ``internal_error``) in the route's envelope (:func:`envelope_of`); never a traceback.

    An HTTP error below 400 (a redirect) or one that already carries a JSON body passes through unchanged.
    """

    async def answer(request: web.Request, error: Refusal) -> web.Response:
        return render(await envelope_of(request, envelope), error, request.get(REQUEST_ID, ""))

    # Each answer is made inside its except clause: a caught exception kept past it would hold its traceback, and
    # with it the request's frames (a refused upload's bytes), in a cycle until the next garbage collection.
    @web.middleware
    async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except Refusal as err:
            return await answer(request, err)
        except web.HTTPException as exc:
            if exc.status < 400 or exc.content_type == "application/json":
                raise
            code = HTTP_ERROR_CODES.get(exc.status, "invalid_request")
            allow = {k: v for k, v in exc.headers.items() if k == "Allow"}
            return await answer(request, Refusal(exc.status, code, exc.reason, headers=allow))
        except Exception:
            logger.exception("request %s failed", request.get(REQUEST_ID) or "-")
            return await answer(request, Refusal(500, "internal_error", INTERNAL_MESSAGE))

    return error_middleware
