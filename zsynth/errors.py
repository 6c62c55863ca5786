"""The ElevenLabs error envelope, raised anywhere in a handler and rendered by one middleware."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from aiohttp import web
from aiohttp.typedefs import Handler as Handler  # re-exported: handlers and middlewares type with it

from .keys import REQUEST_ID
from .middleware import error_middleware_for

ERROR_TYPES: Final = {
    400: "validation_error",
    401: "authentication_error",
    403: "authorization_error",
    404: "not_found",
    405: "invalid_request",
    413: "validation_error",
    415: "validation_error",
    421: "invalid_request",
    422: "validation_error",
    429: "rate_limit_error",
    501: "not_supported",
    503: "service_unavailable",
}

#: Routes under this prefix speak OpenAI's dialect, errors included.
OPENAI_PREFIX: Final = "/v1/audio/"
_OPENAI_TYPES: Final = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}


def openai_error_type(http_status: int) -> str:
    """OpenAI's ``error.type`` for a status: its own names for auth and rate limits, else request or server."""
    return _OPENAI_TYPES.get(http_status, "invalid_request_error" if http_status < 500 else "server_error")


class ApiError(Exception):
    """An error answered as ``{"detail": {"status", "code", "type", "message", "request_id"}}``."""

    def __init__(
        self,
        http_status: int,
        status: str,
        message: str,
        *,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.status = status
        self.message = message
        self.param = param
        self.headers = dict(headers or {})

    def body(self, request_id: str) -> dict[str, Any]:
        """Both generations of ElevenLabs fields: legacy ``status`` and current ``code``/``type``."""
        detail: dict[str, Any] = {
            "status": self.status,
            "code": self.status,
            "type": ERROR_TYPES.get(self.http_status, "internal_error"),
            "message": self.message,
            "request_id": request_id,
        }
        if self.param is not None:
            detail["param"] = self.param
        return {"detail": detail}

    def openai_body(self) -> dict[str, Any]:
        """OpenAI's envelope, ``{"error": {"message", "type", "param", "code"}}`` (code: the ElevenLabs status)."""
        return {
            "error": {
                "message": self.message,
                "type": openai_error_type(self.http_status),
                "param": self.param,
                "code": self.status,
            }
        }

    def response(self, request_id: str, *, openai: bool = False) -> web.Response:
        """Render as a JSON response, in OpenAI's envelope when ``openai``."""
        return web.json_response(
            self.openai_body() if openai else self.body(request_id),
            status=self.http_status,
            headers={**self.headers, "request-id": request_id},
            dumps=lambda obj: json.dumps(obj, ensure_ascii=False),
        )


class _ElevenLabsEnvelope:
    """The speech API's envelope: ``{"detail": {...}}``, or OpenAI's ``{"error": {...}}`` under ``/v1/audio/``."""

    error_type = ApiError

    def make(self, http_status: int, code: str, message: str, headers: Mapping[str, str]) -> ApiError:
        return ApiError(http_status, code, message, headers=headers)

    def render(self, request: web.Request, error: ApiError) -> web.Response:
        return error.response(request.get(REQUEST_ID, ""), openai=request.path.startswith(OPENAI_PREFIX))


#: The speech API's error middleware (the demo server uses it too): ApiError and aiohttp's HTTP errors in the
#: route's envelope; never a traceback.
error_middleware: Final = error_middleware_for(_ElevenLabsEnvelope())
