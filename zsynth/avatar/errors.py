"""The avatar server's error envelope, ``{"code": ..., "message": ...}`` (the spec's shape for auth failures, used
for every error of this server so clients parse one shape); the model is both the documented schema and the answer."""

from __future__ import annotations

from typing import Final, Self

import pydantic

from zsynth.core.codes import ApiCode
from zsynth.kit.envelope import ErrorEnvelope, Refusal
from zsynth.kit.middleware import error_middleware_for


class AvatarError(Refusal):
    """An error of the avatar server (answered as ``{"code", "message"}`` with an HTTP status)."""

    def __init__(self, http_status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(http_status, code, message, headers=headers)


class Error(ErrorEnvelope):
    """The error envelope of every failed request of the avatar server."""

    model_config = pydantic.ConfigDict(extra="forbid")

    code: str = pydantic.Field(examples=[ApiCode.INVALID_API_KEY, ApiCode.SESSION_NOT_FOUND])
    message: str

    @classmethod
    def of(cls, error: Refusal, request_id: str) -> Self:
        """``{"code", "message"}``: a field at fault is named in the message."""
        return cls(code=error.code, message=error.message)


#: The avatar server's error middleware: every error in this envelope; never a traceback.
avatar_error_middleware: Final = error_middleware_for(Error)
