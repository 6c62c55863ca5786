"""The OpenAPI fields of the speech routes' declarations: the error envelopes and the responses they share.

The route modules write their operations' ``responses`` with these helpers; model classes in them become component
schemas when :mod:`zsynth.openapi.speech` builds the document. Nothing here imports :mod:`zsynth.openapi`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from ..endpoints import JSON

Schema = dict[str, Any]


def no_default(schema: dict[str, Any]) -> None:
    """``json_schema_extra`` of an optional field whose absence the schema shows by leaving it out."""
    schema.pop("default", None)


def optional(**kwargs: Any) -> Any:
    """A response field the answer may leave out, but never sends as null (its schema has no default)."""
    return Field(default=None, json_schema_extra=no_default, **kwargs)


class ErrorDetail(BaseModel):
    """Both generations of ElevenLabs error fields: legacy 'status' and current 'code'/'type'."""

    model_config = ConfigDict(extra="forbid")

    status: str = Field(examples=["voice_not_found"])
    code: str = Field(examples=["voice_not_found"])
    type: str = Field(examples=["not_found"])
    message: str
    request_id: str
    param: Annotated[str | None, WithJsonSchema({"type": "string"})] = Field(
        default=None, description="The request field at fault, when there is one.", json_schema_extra=no_default
    )


class Error(BaseModel):
    """The error envelope of every failed request."""

    model_config = ConfigDict(extra="forbid")

    detail: ErrorDetail


class OpenAIErrorBody(BaseModel):
    """OpenAI's error fields."""

    model_config = ConfigDict(extra="forbid")

    message: str
    type: str = Field(examples=["invalid_request_error"])
    param: str | None
    code: str | None


class OpenAIError(BaseModel):
    """OpenAI's error envelope; code is the zsynth status (e.g. invalid_api_key, system_busy)."""

    model_config = ConfigDict(extra="forbid")

    error: OpenAIErrorBody


ERROR_TEXT: Final = {
    400: "Bad input: invalid JSON, a field out of range, an unsupported output_format or clip.",
    401: "No key, an unknown or expired key (header WWW-Authenticate: Bearer), or a token on a route that needs a "
    "full key (insufficient_scope).",
    403: "A write from a page on another site to a server without keys (cross_origin_refused).",
    404: "No such resource (a voice, a dictionary or a version that does not exist).",
    405: "The method is not allowed on this path.",
    413: "The request body is larger than ZSYNTH_MAX_BODY_BYTES.",
    422: "A field is missing or has the wrong type.",
    429: "The job queue is full (system_busy); retry after Retry-After.",
    500: "An internal error (never a traceback).",
    501: "The feature needs a keys table (ZSYNTH_API_KEYS_TABLE).",
    503: "Redis, the workers or the keys table are unavailable; retry after Retry-After.",
}

#: What every authenticated route may answer besides its own errors.
AUTH_ERRORS: Final = (401, 403, 503)

#: Headers ElevenLabs clients read on a TTS answer.
AUDIO_HEADERS: Final[dict[str, Schema]] = {
    "request-id": {"description": "This request's id (also in the logs).", "schema": {"type": "string"}},
    "character-cost": {"description": "Characters billed (the text length).", "schema": {"type": "string"}},
    "history-item-id": {"description": "The synthesis job's id.", "schema": {"type": "string"}},
    "x-voice-id": {
        "description": "The voice that spoke (the swap-out voice for unknown ids).",
        "schema": {"type": "string"},
    },
    "x-model-id": {"description": "The request's model_id, when it had one.", "schema": {"type": "string"}},
}


def json_body(description: str, schema: Any, headers: Mapping[str, Schema] | None = None) -> Schema:
    """A JSON response; ``schema`` is a model class or a schema (e.g. an array of a model)."""
    response: Schema = {"description": description, "content": {JSON: {"schema": schema}}}
    if headers:
        response["headers"] = dict(headers)
    return response


def error(status: int, envelope: type[BaseModel] = Error) -> Schema:
    """A response carrying an error ``envelope``."""
    return {"description": ERROR_TEXT[status], "content": {JSON: {"schema": envelope}}}


def responses(ok: Mapping[int, Schema], *errors: int, envelope: type[BaseModel] = Error) -> dict[str, Schema]:
    """The responses object: the successes given plus the listed errors and the auth errors."""
    codes = sorted(set(errors) | set(AUTH_ERRORS))
    return {str(code): body for code, body in ok.items()} | {str(code): error(code, envelope) for code in codes}


def path_params(**described: str) -> dict[str, dict[str, str]]:
    """The ``path_params`` doc field: each path parameter's description."""
    return {"path_params": dict(described)}
