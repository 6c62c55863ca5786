"""JSON request bodies of the avatar server, read as strict JSON and validated by the route's declared model
(:data:`PARSING`, given to :func:`~zsynth.kit.endpoints.add_endpoints`)."""

from __future__ import annotations

from typing import Any, Final

import pydantic

from zsynth.avatar.errors import AvatarError
from zsynth.kit.endpoints import JSON, Parsing
from zsynth.kit.jsonbody import BadJson

Doc = dict[str, Any]


_NOT_AN_OBJECT = "The request body must be a JSON object."


def avatar_error(http_status: int, code: str, message: str, param: str | None) -> AvatarError:
    """A model's refusal in this server's envelope (``{code, message}``: the field is named in the message)."""
    return AvatarError(http_status, code, message)


def _bad_json(err: BadJson) -> str:
    return f"The request body is not valid JSON: {err}."


#: How the avatar server refuses declared bodies: its envelope; deep nesting, huge numbers, NaN and bad UTF-8 get
#: 400 ``invalid_json`` too, never a 500.
PARSING: Final = Parsing(avatar_error, _bad_json, not_object=_NOT_AN_OBJECT)


def documented(description: str, schema: type[pydantic.BaseModel] | dict[str, object], media: str = JSON) -> Doc:
    """An OpenAPI response object for a route's declaration: a model class becomes a reference to its schema."""
    return {"description": description, "content": {media: {"schema": schema}}}
