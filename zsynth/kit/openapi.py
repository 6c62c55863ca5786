"""OpenAPI 3.1 operations and component schemas generated from route declarations (:mod:`zsynth.kit.endpoints`).

For each declared HTTP route: the declaration's ``doc`` fields (operationId, tags, summary, responses, extra
parameters) are the operation; the body model becomes its ``requestBody``, the query model its query parameters,
the path template its path parameters, and the access rule its ``security``. Its ``errors`` (the statuses it
answers in the server's error envelope) become responses in that envelope, with the auth errors every authenticated
route may answer (:class:`ErrorDocs`). Any pydantic model class found in ``doc`` (a response schema) is replaced by
a reference and its schema joins the components, so response shapes are models too. WebSocket routes are left out:
OpenAPI does not model them.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pydantic
from pydantic.json_schema import models_json_schema

from zsynth.core.config import Settings
from zsynth.kit.endpoints import JSON, Access, Endpoint

Schema = dict[str, Any]
REF_TEMPLATE = "#/components/schemas/{model}"

_PATH_PARAM = re.compile(r"{([^}/:]+)(?::[^}]*)?}")


@dataclass(frozen=True, slots=True)
class ErrorDocs:
    """How a server documents its errors: its envelope, what each status means, and the statuses every
    authenticated route may answer (a refused credential, an unreachable keys table)."""

    envelope: type[pydantic.BaseModel]
    text: Mapping[int, str]
    auth_errors: tuple[int, ...]

    def responses(self, endpoint: Endpoint, declared: Iterable[int]) -> dict[str, Schema]:
        """The error responses of ``endpoint``: its ``declared`` statuses, plus the auth errors unless it is public,
        in its declared envelope (a route's own, such as OpenAI's) or the server's."""
        statuses = set(declared)
        if endpoint.access is not Access.PUBLIC:
            statuses |= set(self.auth_errors)
        schema = endpoint.error_envelope or self.envelope
        return {
            str(status): {"description": self.text[status], "content": {JSON: {"schema": schema}}}
            for status in sorted(statuses)
        }


def ref(name: str) -> Schema:
    """A reference to a component schema."""
    return {"$ref": REF_TEMPLATE.format(model=name)}


def models_in(value: Any, found: set[type[pydantic.BaseModel]]) -> None:
    """Add to ``found`` every model class inside ``value`` (a declaration's ``doc``: its response schemas)."""
    if isinstance(value, type) and issubclass(value, pydantic.BaseModel):
        found.add(value)
    elif isinstance(value, Mapping):
        for item in value.values():
            models_in(item, found)
    elif isinstance(value, list | tuple):
        for item in value:
            models_in(item, found)


def _with_refs(value: Any) -> Any:
    """``value`` with every model class replaced by a reference to its component."""
    if isinstance(value, type) and issubclass(value, pydantic.BaseModel):
        return ref(value.__name__)
    if isinstance(value, Mapping):
        return {key: _with_refs(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_with_refs(item) for item in value]
    return value


def component_schemas(models: Iterable[type[pydantic.BaseModel]]) -> dict[str, Schema]:
    """The JSON schemas of ``models`` and of every model they use, keyed by class name."""
    unique = sorted(set(models), key=lambda model: model.__name__)
    if not unique:
        return {}
    _, top = models_json_schema([(model, "validation") for model in unique], ref_template=REF_TEMPLATE)
    schemas: dict[str, Schema] = dict(top.get("$defs", {}))
    names = [model.__name__ for model in unique]
    clash = {name for name in names if names.count(name) > 1}
    if clash:
        raise ValueError(f"two models share the name(s) {sorted(clash)}: component names must be unique")
    return schemas


def _not_null(schema: Schema) -> Schema:
    """A query parameter's schema without the null a model's optional field allows: a query value is never null."""
    options = schema.get("anyOf")
    if isinstance(options, list):
        kept = [option for option in options if option != {"type": "null"}]
        if len(kept) == 1:
            schema = {**{k: v for k, v in schema.items() if k != "anyOf"}, **kept[0]}
    if schema.get("default", ...) is None:
        del schema["default"]
    return schema


def query_parameters(model: type[pydantic.BaseModel]) -> list[Schema]:
    """One OpenAPI query parameter per field of ``model`` (its alias when it has one)."""
    schema = model.model_json_schema(ref_template=REF_TEMPLATE)
    properties: dict[str, Schema] = schema.get("properties", {})
    required = set(schema.get("required", []))
    parameters = []
    for name, prop in properties.items():
        prop = _not_null(dict(prop))
        description = prop.pop("description", None)
        prop.pop("title", None)
        parameter: Schema = {"name": name, "in": "query", "required": name in required, "schema": prop}
        if description:
            parameter["description"] = description
        parameters.append(parameter)
    return parameters


def path_parameters(path: str, described: Mapping[str, str]) -> list[Schema]:
    """The template's path parameters, all required strings, described from ``described``."""
    return [
        {
            "name": name,
            "in": "path",
            "required": True,
            "description": described.get(name, name),
            "schema": {"type": "string"},
        }
        for name in _PATH_PARAM.findall(path)
    ]


def documented(endpoint: Endpoint, errors: ErrorDocs) -> dict[str, Any]:
    """The declaration's ``doc`` with its ``responses`` complete: the successes it declares (keyed by status) and
    its ``errors`` as error responses in its envelope (its declared ``error_envelope``, else the server's)."""
    doc = dict(endpoint.doc)
    declared = doc.pop("errors", ())
    successes = {str(status): body for status, body in doc.get("responses", {}).items()}
    doc["responses"] = successes | errors.responses(endpoint, declared)
    return doc


def operation(
    endpoint: Endpoint, doc: Mapping[str, Any], security: Mapping[Access, list[dict[str, list[str]]]]
) -> Schema:
    """The operation object of one declared route, from its complete ``doc`` (:func:`documented`).

    ``doc`` keys read here besides plain operation fields: ``path_params`` (name -> description); a
    ``requestBody`` in ``doc`` (multipart uploads) is kept as written (a declared body is required unless its
    declaration says ``body_required=False``).
    """
    doc = dict(doc)
    described: Mapping[str, str] = doc.pop("path_params", {})
    op: Schema = {key: _with_refs(value) for key, value in doc.items()}
    op["security"] = list(security[endpoint.access])
    parameters = path_parameters(endpoint.path, described)
    if endpoint.query is not None:
        parameters += query_parameters(endpoint.query)
    parameters += op.pop("parameters", [])
    if parameters:
        op["parameters"] = parameters
    if endpoint.body is not None and "requestBody" not in op:
        op["requestBody"] = {
            "required": endpoint.body_required,
            "content": {JSON: {"schema": ref(endpoint.body.__name__)}},
        }
    return op


def paths_and_schemas(
    endpoints: Iterable[Endpoint], security: Mapping[Access, list[dict[str, list[str]]]], errors: ErrorDocs
) -> tuple[dict[str, Schema], dict[str, Schema]]:
    """The ``paths`` object and the component schemas of ``endpoints`` (WebSocket routes left out), their errors
    documented as ``errors`` says."""
    paths: dict[str, Schema] = {}
    models: set[type[pydantic.BaseModel]] = set()
    for endpoint in endpoints:
        if endpoint.websocket:
            continue
        method = endpoint.method.lower()
        item = paths.setdefault(endpoint.path, {})
        if method in item:
            raise ValueError(f"{endpoint.method} {endpoint.path} declared twice")
        doc = documented(endpoint, errors)
        item[method] = operation(endpoint, doc, security)
        for model in (endpoint.body, endpoint.query):
            if model is not None:
                models.add(model)
        models_in(doc, models)
    return paths, component_schemas(models)


@functools.cache
def document_bytes(build: Callable[[Settings], dict[str, Any]], settings: Settings) -> bytes:
    """The document ``build`` makes for ``settings``, serialized once, as served at ``GET /openapi.json``."""
    return json.dumps(build(settings), separators=(",", ":")).encode()
