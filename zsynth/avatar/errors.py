"""The avatar server's error envelope, ``{"code": ..., "message": ...}`` (the spec's shape for auth failures, used
for every error of this server so clients parse one shape)."""

from __future__ import annotations

import logging
from typing import Final

from aiohttp import web

from ..errors import Handler
from ..keys import REQUEST_ID

logger = logging.getLogger(__name__)

_HTTP_CODES: Final = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}


class AvatarError(Exception):
    """An error answered as ``{"code", "message"}`` with an HTTP status."""

    def __init__(self, http_status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.code = code
        self.message = message
        self.headers = headers or {}

    def response(self, request_id: str) -> web.Response:
        """Render as a JSON response."""
        return web.json_response(
            {"code": self.code, "message": self.message},
            status=self.http_status,
            headers={**self.headers, "request-id": request_id},
        )


@web.middleware
async def avatar_error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Render AvatarError and aiohttp's HTTP errors in the envelope; never leak a traceback."""
    request_id = request.get(REQUEST_ID, "")
    try:
        return await handler(request)
    except AvatarError as err:
        return err.response(request_id)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        allow = {k: v for k, v in exc.headers.items() if k == "Allow"}
        code = _HTTP_CODES.get(exc.status, "invalid_request")
        return AvatarError(exc.status, code, exc.reason, allow).response(request_id)
    except Exception:
        logger.exception("request %s failed", request_id or "-")
        return AvatarError(500, "internal_error", "Something went wrong on our side.").response(request_id)
