"""JSON request bodies of the avatar server, read as strict JSON and validated by the route's declared model."""

from __future__ import annotations

from typing import Any, TypeVar

import pydantic
from aiohttp import web

from ... import jsonbody
from ...endpoints import JSON, validate
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
    raw = await request.read()
    if not raw.strip():
        if required:
            raise AvatarError(400, "invalid_json", _NOT_AN_OBJECT)
        return validate(model, {}, avatar_error)
    try:
        body = jsonbody.loads(raw)
    except jsonbody.BadJson as err:
        raise AvatarError(400, "invalid_json", f"The request body is not valid JSON: {err}.") from err
    if not isinstance(body, dict):
        raise AvatarError(400, "invalid_json", _NOT_AN_OBJECT)
    return validate(model, body, avatar_error)


def documented(description: str, schema: type[pydantic.BaseModel] | dict[str, object], media: str = JSON) -> Doc:
    """An OpenAPI response object for a route's declaration: a model class becomes a reference to its schema."""
    return {"description": description, "content": {media: {"schema": schema}}}
