"""JSON request bodies of the avatar server, read as strict JSON and validated by the route's declared model."""

from __future__ import annotations

from typing import Any, TypeVar

import pydantic
from aiohttp import web

from ...endpoints import JSON, parse_body
from ..errors import AvatarError

M = TypeVar("M", bound=pydantic.BaseModel)
Doc = dict[str, Any]


_NOT_AN_OBJECT = "The request body must be a JSON object."


def avatar_error(http_status: int, code: str, message: str, param: str | None) -> AvatarError:
    """A model's refusal in this server's envelope (``{code, message}``: the field is named in the message)."""
    return AvatarError(http_status, code, message)


async def read_body(request: web.Request, model: type[M], *, required: bool) -> M:
    """The JSON object body as ``model``; an empty body is ``{}`` unless ``required``.

    Deep nesting, huge numbers, NaN and bad UTF-8 get 400 ``invalid_json`` too, never a 500.
    """
    return await parse_body(
        request,
        model,
        avatar_error,
        bad_json=lambda err: f"The request body is not valid JSON: {err}.",
        not_object=_NOT_AN_OBJECT,
        optional=not required,
    )


def documented(description: str, schema: type[pydantic.BaseModel] | dict[str, object], media: str = JSON) -> Doc:
    """An OpenAPI response object for a route's declaration: a model class becomes a reference to its schema."""
    return {"description": description, "content": {media: {"schema": schema}}}
