"""Middleware shared by the three servers: the request id, and one error middleware parametrised by the server's
envelope (the speech API's ElevenLabs ``detail``, the avatar server's ``{code, message}``)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Final, Protocol, TypeVar

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from .keys import REQUEST_ID

logger = logging.getLogger(__name__)


#: The code an aiohttp HTTP error (unknown route, wrong method, body too large) gets in every envelope.
HTTP_ERROR_CODES: Final = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}
INTERNAL_MESSAGE: Final = "Something went wrong on our side."

E = TypeVar("E", bound=Exception)


class Refusal(Exception):
    """A refusal raised by middleware every server shares (the host allow-list); each server's error middleware
    answers it in that server's envelope."""

    def __init__(self, http_status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.code = code
        self.message = message


class Envelope(Protocol[E]):
    """How one server answers errors: its exception type, how to build one, and how to render one."""

    @property
    def error_type(self) -> type[E]:
        """The exception handlers raise to answer an error."""
        ...

    def make(self, http_status: int, code: str, message: str, headers: Mapping[str, str]) -> E:
        """An error of this server for an aiohttp HTTP error or an unexpected exception."""
        ...

    def render(self, request: web.Request, error: E) -> web.Response:
        """The response for ``error``, with the ``request-id`` header."""
        ...


@web.middleware
async def request_id_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Give every request an id, echoed as ``request-id`` and carried in the logs."""
    request[REQUEST_ID] = uuid.uuid4().hex
    response = await handler(request)
    if not response.prepared:
        response.headers.setdefault("request-id", request[REQUEST_ID])
    return response


def error_middleware_for(envelope: Envelope[E]) -> Middleware:
    """The error middleware of a server: its own errors, a shared middleware's :class:`Refusal`, aiohttp's HTTP
    errors (the ``Allow`` header kept) and any other exception (logged with the request id, answered 500
    ``internal_error``) in ``envelope``; never a traceback.

    An HTTP error below 400 (a redirect) or one that already carries a JSON body passes through unchanged.
    """

    @web.middleware
    async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except envelope.error_type as err:
            return envelope.render(request, err)
        except Refusal as err:
            return envelope.render(request, envelope.make(err.http_status, err.code, err.message, {}))
        except web.HTTPException as exc:
            if exc.status < 400 or exc.content_type == "application/json":
                raise
            code = HTTP_ERROR_CODES.get(exc.status, "invalid_request")
            allow = {k: v for k, v in exc.headers.items() if k == "Allow"}
            return envelope.render(request, envelope.make(exc.status, code, exc.reason, allow))
        except Exception:
            logger.exception("request %s failed", request.get(REQUEST_ID) or "-")
            return envelope.render(request, envelope.make(500, "internal_error", INTERNAL_MESSAGE, {}))

    return error_middleware
