"""The avatar server's error envelope, ``{"code": ..., "message": ...}`` (the spec's shape for auth failures, used
for every error of this server so clients parse one shape)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from aiohttp import web

from ..keys import REQUEST_ID
from ..middleware import error_middleware_for


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


class _AvatarEnvelope:
    """``{"code", "message"}``."""

    error_type = AvatarError

    def make(self, http_status: int, code: str, message: str, headers: Mapping[str, str]) -> AvatarError:
        return AvatarError(http_status, code, message, dict(headers))

    def render(self, request: web.Request, error: AvatarError) -> web.Response:
        return error.response(request.get(REQUEST_ID, ""))


#: The avatar server's error middleware: AvatarError and aiohttp's HTTP errors in this envelope; never a traceback.
avatar_error_middleware: Final = error_middleware_for(_AvatarEnvelope())
