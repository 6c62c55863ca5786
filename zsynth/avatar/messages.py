"""The commands of the avatar's control socket (``GET /control/{session_id}``), each a model that validates it.

Every refusal keeps the control socket's code and message (:func:`zsynth.kit.endpoints.refusal`); the route turns it
into an ``error`` event and the session goes on.
"""

from __future__ import annotations

import pydantic

from zsynth.core.codes import ApiCode
from zsynth.kit.endpoints import refusal, text_limit


class ControlMessage(pydantic.BaseModel):
    """Any command on the avatar's control socket: a JSON object with a string ``type``."""

    # A missing field gets the socket's own refusal, not pydantic's "field required": its validator runs on the default.
    type: str = pydantic.Field(default=None, validate_default=True)

    @pydantic.field_validator("type", mode="before")
    @classmethod
    def _type(cls, value: object) -> object:
        if not isinstance(value, str):
            raise refusal(ApiCode.INVALID_MESSAGE, "Send JSON objects with a string 'type'.")
        return value


class SpeakCommand(pydantic.BaseModel):
    """``{"type": "speak", "text": ..., "id"?: ..., "voice_id"?: ...}``: speak ``text`` (queued after earlier ones)."""

    text: str = pydantic.Field(  # None (missing): refused by the validator
        default=None, validate_default=True, description="Non-empty, at most ZSYNTH_MAX_TEXT_CHARS characters."
    )
    voice_id: str | None = pydantic.Field(default=None, description="The voice (default: the session's).")

    @pydantic.field_validator("text", mode="before")
    @classmethod
    def _text(cls, value: object, info: pydantic.ValidationInfo) -> object:
        if not isinstance(value, str) or not value.strip():
            raise refusal(ApiCode.INVALID_TEXT, "'text' must be a non-empty string.")
        limit = text_limit(info)
        if limit is not None and len(value) > limit:
            raise refusal(ApiCode.TEXT_TOO_LONG, f"'text' exceeds {limit} characters.")
        return value

    @pydantic.field_validator("voice_id", mode="before")
    @classmethod
    def _voice_id(cls, value: object) -> object:
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise refusal(ApiCode.INVALID_VOICE_ID, "'voice_id' must be a non-empty string.")
        return value
