"""Middleware every server shares: the request id, and one error middleware given the server's envelope (the speech
API's ElevenLabs ``detail``, the avatar server's ``{code, message}``); a route may declare its own (OpenAI's)."""

from __future__ import annotations

import logging
import re
import uuid
from typing import Final

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler, Middleware

from zsynth.core.codes import ApiCode
from zsynth.core.config import Settings
from zsynth.core.tracing import Tracing
from zsynth.kit.answer_headers import REQUEST_ID_HEADER, TRACE_ID_HEADER
from zsynth.kit.endpoints import ENDPOINTS, Endpoint, endpoint_of
from zsynth.kit.envelope import ErrorEnvelope, Refusal, render
from zsynth.services.keys import REQUEST_ID, TRACE_ID, TRACING

logger = logging.getLogger(__name__)


#: The code an aiohttp HTTP error (unknown route, wrong method, body too large) gets in every envelope.
HTTP_ERROR_CODES: Final = {404: ApiCode.NOT_FOUND, 405: ApiCode.METHOD_NOT_ALLOWED, 413: ApiCode.REQUEST_TOO_LARGE}
INTERNAL_MESSAGE: Final = "Something went wrong on our side."
#: An incoming request id that is taken as this request's id: 1 to 128 printable ASCII characters, no space (it
#: goes into log lines and an answer header as it is). Anything else is ignored and an id is minted.
REQUEST_ID_PATTERN: Final = re.compile(r"[\x21-\x7e]{1,128}")
#: W3C Trace Context: version 00, a trace id and a parent id that are not all zeros, and the flags.
TRACEPARENT_PATTERN: Final = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


def incoming_request_id(request: web.Request) -> str | None:
    """The caller's ``X-Request-ID`` when it is one this server takes (:data:`REQUEST_ID_PATTERN`), else None."""
    given = request.headers.get("X-Request-ID")
    if given is not None and REQUEST_ID_PATTERN.fullmatch(given):
        return given
    return None


def incoming_trace_id(request: web.Request) -> str | None:
    """The trace id of the caller's valid ``traceparent`` header (32 hex digits), else None."""
    match = TRACEPARENT_PATTERN.fullmatch(request.headers.get("traceparent", "").strip())
    if match is None or match[1] == "ff" or set(match[2]) == {"0"} or set(match[3]) == {"0"}:
        return None
    return match[2]


@web.middleware
async def request_id_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Give every request an id, echoed as ``request-id`` and carried in the logs: the caller's ``X-Request-ID``
    when it sent a usable one (a load balancer's), else a minted one; and a trace id, echoed as ``x-trace-id``: the
    caller's ``traceparent`` trace id when it sent one, else the request id."""
    request[REQUEST_ID] = incoming_request_id(request) or uuid.uuid4().hex
    request[TRACE_ID] = incoming_trace_id(request) or request[REQUEST_ID]
    tracing = request.app.get(TRACING)
    if tracing is None:
        response = await handler(request)
    else:
        response = await _traced(request, handler, tracing)
    if not response.prepared:
        response.headers.setdefault(REQUEST_ID_HEADER, request[REQUEST_ID])
        response.headers.setdefault(TRACE_ID_HEADER, request[TRACE_ID])
    return response


async def _traced(request: web.Request, handler: Handler, tracing: Tracing) -> web.StreamResponse:
    """Run the request inside its server span, the child of the caller's ``traceparent`` when it sent one; the
    request's trace id becomes the span's."""
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else "unmatched"  # never the raw path: ids would explode it
    attributes = {"http.request.method": request.method, "http.route": route, "zsynth.request_id": request[REQUEST_ID]}
    with tracing.span(f"{request.method} {route}", attributes, carrier=request.headers, kind="server") as span:
        request[TRACE_ID] = tracing.trace_id(span)
        response = await handler(request)
        span.set_attribute("http.response.status_code", response.status)
        return response


def setup_tracing(app: web.Application, settings: Settings, service: str) -> None:
    """Give ``app`` its tracing when ZSYNTH_OTLP_ENDPOINT is set (nothing of OpenTelemetry is imported otherwise);
    what is buffered is exported when the app shuts down."""
    tracing = Tracing.from_settings(settings, service)
    if tracing is None:
        return
    app[TRACING] = tracing

    async def flush(app: web.Application) -> None:
        tracing.shutdown()

    app.on_cleanup.append(flush)


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
            code = HTTP_ERROR_CODES.get(exc.status, ApiCode.INVALID_REQUEST)
            allow = {k: v for k, v in exc.headers.items() if k == "Allow"}
            return await answer(request, Refusal(exc.status, code, exc.reason, headers=allow))
        except Exception:
            logger.exception("request %s failed", request.get(REQUEST_ID) or "-")
            return await answer(request, Refusal(500, ApiCode.INTERNAL_ERROR, INTERNAL_MESSAGE))

    return error_middleware
