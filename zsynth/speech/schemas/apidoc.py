"""The OpenAPI fields of the speech routes' declarations: the responses they share (the error envelopes are in
:mod:`zsynth.kit.errors`).

The route modules write their operations' ``responses`` with these helpers; model classes in them become component
schemas when :mod:`zsynth.speech.openapi` builds the document. Nothing here imports :mod:`zsynth.documents`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pydantic import Field

from zsynth.kit.answer_headers import (
    CHARACTER_COST_HEADER,
    HISTORY_ITEM_ID_HEADER,
    MODEL_ID_HEADER,
    REQUEST_ID_HEADER,
    TRACE_ID_HEADER,
    VOICE_ID_HEADER,
)
from zsynth.kit.endpoints import JSON
from zsynth.kit.errors import OpenAIError as OpenAIError  # the OpenAI route declares it

Schema = dict[str, Any]


def no_default(schema: dict[str, Any]) -> None:
    """``json_schema_extra`` of an optional field whose absence the schema shows by leaving it out."""
    schema.pop("default", None)


def optional(**kwargs: Any) -> Any:
    """A response field the answer may leave out, but never sends as null (its schema has no default)."""
    return Field(default=None, json_schema_extra=no_default, **kwargs)


#: Headers ElevenLabs clients read on a TTS answer.
AUDIO_HEADERS: Final[dict[str, Schema]] = {
    REQUEST_ID_HEADER: {
        "description": "This request's id (also in the logs): the request's X-Request-ID when it sent a usable one "
        "(1 to 128 printable characters, no space), else one minted here.",
        "schema": {"type": "string"},
    },
    TRACE_ID_HEADER: {
        "description": "This request's trace id: the trace id of its traceparent header when it sent one, else the "
        "request id.",
        "schema": {"type": "string"},
    },
    CHARACTER_COST_HEADER: {"description": "Characters billed (the text length).", "schema": {"type": "string"}},
    HISTORY_ITEM_ID_HEADER: {"description": "The synthesis job's id.", "schema": {"type": "string"}},
    VOICE_ID_HEADER: {
        "description": "The voice that spoke (the swap-out voice for unknown ids).",
        "schema": {"type": "string"},
    },
    MODEL_ID_HEADER: {"description": "The request's model_id, when it had one.", "schema": {"type": "string"}},
}


def json_body(description: str, schema: Any, headers: Mapping[str, Schema] | None = None) -> Schema:
    """A JSON response; ``schema`` is a model class or a schema (e.g. an array of a model)."""
    response: Schema = {"description": description, "content": {JSON: {"schema": schema}}}
    if headers:
        response["headers"] = dict(headers)
    return response
