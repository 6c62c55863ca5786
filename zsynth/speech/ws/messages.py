"""The client messages of the realtime sockets, each declared once as a model that validates it.

The models keep the sockets' lax reading, as upstream: ``flush``, ``try_trigger_generation``, ``close_context`` and
``close_socket`` count by their truth (``1`` flushes), ``text`` may be missing or null (empty), and fields a message
does not use are ignored. Every refusal keeps its socket's code and message (:func:`zsynth.kit.endpoints.refusal`).

The credential (``xi_api_key``, ``authorization``), ``voice_settings`` and the text options
(``pronunciation_dictionary_locators``, ``apply_text_normalization``) of a first message are read where they are
used: :mod:`zsynth.services.auth`, the speaker and :mod:`zsynth.core.text.prepare`.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, TypeVar

import pydantic

from zsynth.core.codes import ApiCode
from zsynth.kit.endpoints import MAX_TEXT_CHARS, refusal, text_limit, validate
from zsynth.speech.ws.buffer import DEFAULT_SCHEDULE, ScheduleError, parse_schedule
from zsynth.speech.ws.connection import WsError

M = TypeVar("M", bound=pydantic.BaseModel)

#: The longest ``context_id``: it is kept for the context's life and echoed in every one of its frames.
MAX_CONTEXT_ID_CHARS: Final = 128


def ws_error(http_status: int, code: str, message: str, param: str | None) -> WsError:
    """A model's refusal as the socket's error frame (the status has no meaning on a socket)."""
    return WsError(code, message)


def read(model: type[M], message: dict[str, Any], max_text_chars: int | None = None) -> M:
    """``message`` as ``model``, or the WsError that ends the socket with its first complaint."""
    return validate(model, message, ws_error, {MAX_TEXT_CHARS: max_text_chars})


def _text(value: object, info: pydantic.ValidationInfo) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise refusal(ApiCode.INVALID_MESSAGE, "Field 'text' must be a string.")
    limit = text_limit(info)
    if limit is not None and len(value) > limit:
        raise refusal(ApiCode.MAX_CHARACTER_LIMIT_EXCEEDED, f"A message's text may hold at most {limit} characters.")
    return value


#: Text to speak: missing or null is empty, at most ZSYNTH_MAX_TEXT_CHARS characters.
Text = Annotated[str, pydantic.BeforeValidator(_text)]
#: A flag that counts by its truth, as upstream: any true value.
ByTruth = Annotated[bool, pydantic.BeforeValidator(bool)]


class TextMessage(pydantic.BaseModel):
    """A stream-input message: text to buffer; ``{"text": ""}`` after the first message ends the input."""

    text: Text = ""
    flush: ByTruth = pydantic.Field(default=False, description="Speak the buffered text now.")
    try_trigger_generation: ByTruth = pydantic.Field(
        default=False, description="Speak the buffered text if it reached the schedule's first entry."
    )


class ContextMessage(pydantic.BaseModel):
    """A multi-stream-input message: text for a context, or ``close_context`` / ``close_socket``.

    ``close_socket`` reads nothing else of the message, ``close_context`` nothing but ``context_id``.
    """

    context_id: str | None = pydantic.Field(
        default=None, description=f"The context (none: the default context), at most {MAX_CONTEXT_ID_CHARS} characters."
    )
    close_context: ByTruth = pydantic.Field(default=False, description="End the context.")
    close_socket: ByTruth = pydantic.Field(default=False, description="End every context, then the socket.")
    text: Text = ""
    flush: ByTruth = pydantic.Field(default=False, description="Speak the context's buffered text now.")
    try_trigger_generation: ByTruth = pydantic.Field(
        default=False, description="Speak the buffered text if it reached the schedule's first entry."
    )

    @pydantic.model_validator(mode="before")
    @classmethod
    def _closing(cls, data: Any) -> Any:
        if isinstance(data, dict):
            if data.get("close_socket"):
                return {"close_socket": True}
            if data.get("close_context"):
                return {"context_id": data.get("context_id"), "close_context": True}
        return data

    @pydantic.field_validator("context_id", mode="before")
    @classmethod
    def _context_id(cls, value: object) -> object:
        if value is not None and not isinstance(value, str):
            raise refusal(ApiCode.INVALID_MESSAGE, "Field 'context_id' must be a string.")
        if value is not None and len(value) > MAX_CONTEXT_ID_CHARS:
            raise refusal(
                ApiCode.INVALID_MESSAGE, f"Field 'context_id' may hold at most {MAX_CONTEXT_ID_CHARS} characters."
            )
        return value


class GenerationConfig(pydantic.BaseModel):
    """How buffered text is released: after how many characters each successive segment is spoken."""

    chunk_length_schedule: tuple[int, ...] = pydantic.Field(
        default=DEFAULT_SCHEDULE, description="Characters buffered before each segment (the last entry repeats)."
    )

    @pydantic.field_validator("chunk_length_schedule", mode="before")
    @classmethod
    def _schedule(cls, value: object) -> tuple[int, ...]:
        try:
            return parse_schedule(value)
        except ScheduleError as err:
            raise refusal(ApiCode.INVALID_MESSAGE, str(err)) from None


class ContextOpening(pydantic.BaseModel):
    """The fields a context's first message may set for the whole context (stream-input: the first message)."""

    generation_config: GenerationConfig = pydantic.Field(
        default_factory=lambda: GenerationConfig(), description="Also read as 'generator_config'."
    )

    @pydantic.model_validator(mode="before")
    @classmethod
    def _config(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        # A false value (null, {}, 0) falls back to 'generator_config', the name some clients send.
        config = data.get("generation_config") or data.get("generator_config") or {}
        if not isinstance(config, dict):
            raise refusal(ApiCode.INVALID_MESSAGE, "Field 'generation_config' must be an object.")
        return {"generation_config": config}
