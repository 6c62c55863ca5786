"""Response and operation builders of the hand-written (avatar) OpenAPI modules."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

JSON = "application/json"

Schema = dict[str, Any]
Operation = dict[str, Any]
PathItems = dict[str, dict[str, Any]]

#: Either header authenticates (the default security of :func:`operation`).
AUTHENTICATED: Final[list[dict[str, list[str]]]] = [{"ApiKeyHeader": []}, {"BearerAuth": []}]
#: Probes and the document itself need nothing.
PUBLIC: Final[list[dict[str, list[str]]]] = []


def ref(name: str) -> Schema:
    """A reference to a component schema."""
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: Schema) -> Schema:
    """``schema`` or JSON null (OpenAPI 3.1 has no ``nullable``)."""
    return {"anyOf": [schema, {"type": "null"}]}


_ERROR_TEXT: Final = {
    400: "Bad input: invalid JSON, a field out of range, an unsupported output_format or clip.",
    401: "No key or an unknown/expired key (header WWW-Authenticate: Bearer).",
    403: "The credential's scope does not cover this route (an ephemeral token on a full-key route).",
    404: "No such resource.",
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


def error(status: int, text: str | None = None, *, texts: Mapping[int, str] = _ERROR_TEXT) -> Schema:
    """A response carrying the document's error envelope (its ``Error`` schema), described from ``texts``."""
    return {"description": text or texts[status], "content": {JSON: {"schema": ref("Error")}}}


def json_body(description: str, schema: Schema, headers: dict[str, Schema] | None = None) -> Schema:
    """A JSON response."""
    response: Schema = {"description": description, "content": {JSON: {"schema": schema}}}
    if headers:
        response["headers"] = headers
    return response


def responses(
    ok: dict[int, Schema],
    *errors: int,
    authenticated: bool = True,
    auth_errors: tuple[int, ...] = AUTH_ERRORS,
    texts: Mapping[int, str] = _ERROR_TEXT,
) -> dict[str, Schema]:
    """The responses object: the successes given plus the listed errors (and the auth errors when authenticated).

    The avatar server passes its own ``auth_errors`` and error ``texts``.
    """
    codes = sorted(set(errors) | (set(auth_errors) if authenticated else set()))
    return {str(code): body for code, body in ok.items()} | {str(code): error(code, texts=texts) for code in codes}


def operation(
    op_id: str,
    tag: str,
    summary: str,
    responses_: dict[str, Schema],
    *,
    authenticated: bool = True,
    security: list[dict[str, list[str]]] | None = None,
    parameters: list[Schema] | None = None,
    body: Schema | None = None,
) -> Operation:
    """One operation object; ``security`` (the avatar server's schemes) overrides ``authenticated``."""
    if security is None:
        security = AUTHENTICATED if authenticated else PUBLIC
    op: Operation = {
        "operationId": op_id,
        "tags": [tag],
        "summary": summary,
        "security": security,
        "responses": responses_,
    }
    if parameters:
        op["parameters"] = parameters
    if body is not None:
        op["requestBody"] = body
    return op


def path_param(name: str, description: str) -> Schema:
    """A required string path parameter."""
    return {"name": name, "in": "path", "required": True, "description": description, "schema": {"type": "string"}}


def query_param(name: str, schema: Schema, description: str) -> Schema:
    """An optional query parameter."""
    return {"name": name, "in": "query", "required": False, "description": description, "schema": schema}
