"""The speech API's error envelopes: ElevenLabs' ``{"detail": {...}}`` for every route, OpenAI's
``{"error": {...}}`` for the route that declares it. Each model is both the documented schema and the answer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, Self

from aiohttp.typedefs import Handler as Handler  # re-exported: handlers and middlewares type with it
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from zsynth.core.codes import ApiCode, ErrorType
from zsynth.kit.envelope import ErrorEnvelope, Refusal
from zsynth.kit.middleware import error_middleware_for

ERROR_TYPES: Final = {
    400: ErrorType.VALIDATION,
    401: ErrorType.AUTHENTICATION,
    403: ErrorType.AUTHORIZATION,
    404: ErrorType.NOT_FOUND,
    405: ErrorType.INVALID_REQUEST,
    413: ErrorType.VALIDATION,
    415: ErrorType.VALIDATION,
    421: ErrorType.INVALID_REQUEST,
    422: ErrorType.VALIDATION,
    429: ErrorType.RATE_LIMIT,
    501: ErrorType.NOT_SUPPORTED,
    503: ErrorType.SERVICE_UNAVAILABLE,
}

_OPENAI_TYPES: Final = {401: ErrorType.AUTHENTICATION, 403: ErrorType.PERMISSION, 429: ErrorType.RATE_LIMIT}


def openai_error_type(http_status: int) -> str:
    """OpenAI's ``error.type`` for a status: its own names for auth and rate limits, else request or server."""
    return _OPENAI_TYPES.get(http_status, ErrorType.INVALID_REQUEST_ERROR if http_status < 500 else ErrorType.SERVER)


class ApiError(Refusal):
    """An error of the speech API, answered in the route's envelope (ElevenLabs' unless it declares OpenAI's)."""

    def __init__(
        self,
        http_status: int,
        status: str,
        message: str,
        *,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(http_status, status, message, param=param, headers=headers)

    @property
    def status(self) -> str:
        """The ElevenLabs status (the envelope's ``status`` and ``code``)."""
        return self.code


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


class ErrorDetail(BaseModel):
    """Both generations of ElevenLabs error fields: legacy 'status' and current 'code'/'type'."""

    model_config = ConfigDict(extra="forbid")

    status: str = Field(examples=[ApiCode.VOICE_NOT_FOUND])
    code: str = Field(examples=[ApiCode.VOICE_NOT_FOUND])
    type: str = Field(examples=[ErrorType.NOT_FOUND])
    message: str
    request_id: str
    param: Annotated[str | None, WithJsonSchema({"type": "string"})] = Field(
        default=None, description="The request field at fault, when there is one.", json_schema_extra=_no_default
    )


class Error(ErrorEnvelope):
    """The error envelope of every failed request."""

    model_config = ConfigDict(extra="forbid")

    detail: ErrorDetail

    @classmethod
    def of(cls, error: Refusal, request_id: str) -> Self:
        """``{"detail": {"status", "code", "type", "message", "request_id"}}``, and ``param`` when there is one."""
        fields: dict[str, Any] = {
            "status": error.code,
            "code": error.code,
            "type": ERROR_TYPES.get(error.http_status, ErrorType.INTERNAL),
            "message": error.message,
            "request_id": request_id,
        }
        if error.param is not None:  # set only when there is one: unset fields are not sent
            fields["param"] = error.param
        return cls(detail=ErrorDetail(**fields))


class OpenAIErrorBody(BaseModel):
    """OpenAI's error fields."""

    model_config = ConfigDict(extra="forbid")

    message: str
    type: str = Field(examples=[ErrorType.INVALID_REQUEST_ERROR])
    param: str | None
    code: str | None


class OpenAIError(ErrorEnvelope):
    """OpenAI's error envelope; code is the zsynth status (e.g. invalid_api_key, system_busy)."""

    model_config = ConfigDict(extra="forbid")

    error: OpenAIErrorBody

    @classmethod
    def of(cls, error: Refusal, request_id: str) -> Self:
        """``{"error": {"message", "type", "param", "code"}}`` (``code``: the ElevenLabs status)."""
        body = OpenAIErrorBody(
            message=error.message, type=openai_error_type(error.http_status), param=error.param, code=error.code
        )
        return cls(error=body)


#: The speech API's error middleware (the demo server uses it too): every error in the route's envelope (ElevenLabs'
#: unless the route declares another); never a traceback.
error_middleware: Final = error_middleware_for(Error)
