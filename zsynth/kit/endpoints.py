"""Route declarations: every route of every server is declared once, next to its handler.

A declaration names the handler, who may call it (:class:`Access`), whether pages on other origins may call it
(``cors``), the pydantic models of its JSON body and its query string, and the OpenAPI fields no model expresses
(operation id, tag, summary, responses). The access middleware, the CORS set-up, the OpenAPI generator and the
request parsing read the declarations (``app[ENDPOINTS]`` or a module's :class:`Endpoints` table); nothing else keeps
a table of paths, and a handler gets its models from its declaration.

A route module declares its routes on a module-level table; the handler gets the declared models, parsed::

    routes = Endpoints()

    @routes.post("/v1/tokens/ephemeral", access=Access.FULL, cors=False, body=TokenRequest, operationId=...)
    async def mint(request: web.Request, body: TokenRequest) -> web.Response:
        ttl = body.ttl_seconds

and the app factory adds the tables with :func:`add_endpoints`, giving its server's :class:`Parsing` (error
envelope, messages for a body that is not JSON, validation context).

How a handler takes its declared models (:func:`bind` checks the annotations against the declaration):

* ``query: Model``: the query string, parsed before the handler runs.
* ``body: Model``: the JSON body, read and parsed before the handler runs (after the query: a bad query is answered
  first). The access middleware has run before, so a refused credential never gets its body read.
* ``body: Later[Model]``: the JSON body, read when the handler awaits ``body.read()``: after the checks that must
  answer first (the dictionary routes answer 404 for an unknown dictionary whatever the body holds).
* No ``body`` parameter: the handler reads its body itself (``POST /v1/voices/{voice_id}/settings/edit``, whose
  message quotes the parser's complaint). Multipart uploads declare no body model (their ``requestBody`` is
  written in the OpenAPI fields).

The realtime sockets declare no query model: they read theirs (:class:`zsynth.speech.ws.query.RealtimeQuery`) after the
upgrade, so that a refusal is an error frame and a 1008 close.
"""

from __future__ import annotations

import enum
import functools
import inspect
import typing
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Literal, Protocol, TypeVar

import pydantic
import pydantic_core
from aiohttp import web

from zsynth.core.codes import ApiCode
from zsynth.kit.envelope import ErrorEnvelope
from zsynth.kit.jsonbody import BadJson, BodyTooLarge, loads, read_limited
from zsynth.services.keys import SETTINGS

M = TypeVar("M", bound=pydantic.BaseModel)
#: A route handler: the request, and the declared ``body=`` / ``query=`` its signature names (see the module doc).
RouteHandler = Callable[..., Awaitable[web.StreamResponse]]
H = TypeVar("H", bound=RouteHandler)


class Access(enum.Enum):
    """Who may call a route."""

    #: Anyone, without a credential (probes, the OpenAPI documents).
    PUBLIC = "public"
    #: A full key, or a short-lived token (the speech API's ``zsk_temp_`` tokens of scope ``tts``, the avatar's
    #: session tokens).
    TOKEN = "token"
    #: A full key only; tokens are refused.
    FULL = "full"
    #: The handler authenticates in band (the realtime WebSockets read the key from the upgrade or the first
    #: message), so the access middleware lets the request through.
    IN_BAND = "in_band"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One route's declaration."""

    method: str
    path: str
    #: The handler as written (add_endpoints registers it bound to its declared models: :func:`bind`).
    handler: RouteHandler
    access: Access
    #: Whether pages on the allowed origins (ZSYNTH_CORS_ORIGINS) may call it cross-origin.
    cors: bool = True
    body: type[pydantic.BaseModel] | None = None
    query: type[pydantic.BaseModel] | None = None
    #: False: a missing or blank body is ``{}`` (and the OpenAPI request body is optional).
    body_required: bool = True
    #: The message of 400 ``invalid_json`` for this route's body (None: its server's :attr:`Parsing.bad_json`).
    bad_json: str | None = None
    #: A WebSocket route: outside OpenAPI.
    websocket: bool = False
    #: OpenAPI operation fields the models do not give (operationId, tags, summary, responses, parameters...).
    doc: Mapping[str, Any] = field(default_factory=dict)
    #: The envelope of its errors when it is not its server's (the OpenAI route's), at run time and in the document.
    error_envelope: type[ErrorEnvelope] | None = None


class Endpoints:
    """A module's table of route declarations (like aiohttp's ``RouteTableDef``, with access and models)."""

    def __init__(self) -> None:
        self._items: list[Endpoint] = []

    def __iter__(self) -> Iterator[Endpoint]:
        return iter(self._items)

    def route(
        self,
        method: str,
        path: str,
        *,
        access: Access,
        cors: bool = True,
        body: type[pydantic.BaseModel] | None = None,
        query: type[pydantic.BaseModel] | None = None,
        body_required: bool = True,
        bad_json: str | None = None,
        websocket: bool = False,
        error_envelope: type[ErrorEnvelope] | None = None,
        **doc: Any,
    ) -> Callable[[H], H]:
        """Declare ``method path`` with the decorated handler (returned as written); ``error_envelope`` the route's
        own error envelope; ``doc`` holds OpenAPI operation fields, and ``errors`` (the statuses the route answers in
        its error envelope), which :mod:`zsynth.kit.openapi` turns into responses."""

        def register(handler: H) -> H:
            self._items.append(
                Endpoint(
                    method.upper(),
                    path,
                    handler,
                    access,
                    cors,
                    body,
                    query,
                    body_required,
                    bad_json,
                    websocket,
                    doc,
                    error_envelope,
                )
            )
            return handler

        return register

    def get(self, path: str, **kwargs: Any) -> Callable[[H], H]:
        """Declare a GET route (HEAD is answered too)."""
        return self.route("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> Callable[[H], H]:
        """Declare a POST route."""
        return self.route("POST", path, **kwargs)

    def patch(self, path: str, **kwargs: Any) -> Callable[[H], H]:
        """Declare a PATCH route."""
        return self.route("PATCH", path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Callable[[H], H]:
        """Declare a DELETE route."""
        return self.route("DELETE", path, **kwargs)


#: Each registered route's declaration (HEAD routes map to their GET's).
ENDPOINTS: Final = web.AppKey("endpoints", dict[web.AbstractRoute, Endpoint])
#: The media type of JSON bodies and of the OpenAPI documents.
JSON: Final = "application/json"


def add_endpoints(app: web.Application, *tables: Endpoints, parsing: Parsing | None = None) -> None:
    """Register every declared route on ``app``, bound to its declared models (:func:`bind`; ``parsing`` is the
    server's way of refusing them: required when a handler takes a model), and remember its declaration."""
    registry = app.get(ENDPOINTS)
    if registry is None:
        registry = app[ENDPOINTS] = {}
    for table in tables:
        for endpoint in table:
            handler = bind(endpoint, parsing)
            if endpoint.method == "GET":
                # add_get also registers HEAD, as plain aiohttp routes do.
                route = app.router.add_get(endpoint.path, handler)
                for other in route.resource or ():
                    if other.method == "HEAD":
                        registry[other] = endpoint
            else:
                route = app.router.add_route(endpoint.method, endpoint.path, handler)
            registry[route] = endpoint


def endpoint_of(request: web.Request) -> Endpoint | None:
    """The declaration of the route ``request`` matched (None for 404/405 answers and undeclared routes)."""
    registry = request.app.get(ENDPOINTS)
    if registry is None:
        return None
    return registry.get(request.match_info.route)


def all_endpoints(app: web.Application) -> list[Endpoint]:
    """Every declaration of ``app``, each once, in registration order."""
    seen: dict[int, Endpoint] = {}
    for endpoint in app.get(ENDPOINTS, {}).values():
        seen.setdefault(id(endpoint), endpoint)
    return list(seen.values())


# ----- request models ----------------------------------------------------------------------------------------------


class ErrorFactory(Protocol):
    """Builds a transport's error (the speech API's ApiError, the avatar's AvatarError) from a refusal."""

    def __call__(self, http_status: int, code: str, message: str, param: str | None) -> Exception: ...


#: The validation context key of the longest text a request or message may carry (ZSYNTH_MAX_TEXT_CHARS).
MAX_TEXT_CHARS: Final = "max_text_chars"


def text_limit(info: pydantic.ValidationInfo) -> int | None:
    """The text limit the caller passed in the validation context (None: no limit given)."""
    limit = (info.context or {}).get(MAX_TEXT_CHARS)
    return None if limit is None else int(limit)


def refusal(
    code: str, message: str, status: int = 422, *, param: str | None = None
) -> pydantic_core.PydanticCustomError:
    """An error for a model validator to raise: ``code`` and ``message`` reach the client as they are.

    ``status`` is the HTTP status (422 unless the API answers this refusal with another one, e.g. 400
    ``max_character_limit_exceeded``); ``param`` names the field at fault when it is not the one validated (a key
    inside it, e.g. ``voice_settings.speed``). The message travels in the context too: pydantic formats the
    template with the context, and a message quoting the client's input may hold braces.
    """
    context: dict[str, Any] = {"status": status, "message": message}
    if param is not None:
        context["param"] = param
    return pydantic_core.PydanticCustomError(code, message, context)


def _param(loc: tuple[int | str, ...]) -> str | None:
    return ".".join(str(part) for part in loc) or None


def first_error(err: pydantic.ValidationError) -> tuple[int, str, str, str | None]:
    """(status, code, message, param) of a model's first complaint.

    A :func:`refusal` keeps its own code, status and message; pydantic's own complaints become 422
    ``invalid_parameters`` with a message naming the field.
    """
    error = err.errors(include_url=False)[0]
    loc = tuple(part for part in error["loc"] if not (isinstance(part, str) and part.startswith("function-")))
    param = _param(loc)
    ctx = error.get("ctx") or {}
    if "status" in ctx and isinstance(ctx["status"], int):
        return ctx["status"], error["type"], str(ctx.get("message", error["msg"])), ctx.get("param", param)
    message = error["msg"]
    if param is not None:
        message = f"Field '{param}': {message[0].lower()}{message[1:]}." if message else f"Field '{param}' is invalid."
    return 422, ApiCode.INVALID_PARAMETERS, message, param


def validate(model: type[M], data: object, error: ErrorFactory, context: Mapping[str, Any] | None = None) -> M:
    """``data`` as ``model``, or the transport's error for its first complaint."""
    try:
        return model.model_validate(data, context=dict(context or {}))
    except pydantic.ValidationError as err:
        raise error(*first_error(err)) from None


async def json_body_bytes(request: web.Request, error: ErrorFactory) -> bytes:
    """The raw bytes of a JSON body, at most the app's ZSYNTH_MAX_JSON_BODY_BYTES; past it, the transport's 413
    ``request_too_large``, before anything is parsed (ZSYNTH_MAX_BODY_BYTES is for multipart uploads only)."""
    limit = request.app[SETTINGS].limits.max_json_body_bytes
    try:
        return await read_limited(request, limit)
    except BodyTooLarge as err:
        raise error(
            413, ApiCode.REQUEST_TOO_LARGE, f"The JSON body exceeds the limit of {err.limit} bytes.", None
        ) from None


async def parse_body(
    request: web.Request,
    model: type[M],
    error: ErrorFactory,
    *,
    bad_json: str | Callable[[BadJson], str],
    not_object: str | None = None,
    context: Mapping[str, Any] | None = None,
    optional: bool = False,
) -> M:
    """The JSON body as ``model``.

    A body over ZSYNTH_MAX_JSON_BODY_BYTES gets 413 ``request_too_large`` (:func:`json_body_bytes`). A body that is
    not strict JSON gets 400 ``invalid_json`` with the message ``bad_json`` (or what it makes of the parser's
    complaint); an empty one, or one that is not an object, gets ``not_object`` (by default the same message).
    ``optional`` takes a missing or blank body as ``{}``.
    """

    def complaint(err: BadJson) -> str:
        return bad_json if isinstance(bad_json, str) else bad_json(err)

    raw = await json_body_bytes(request, error)
    data: object = {}
    if raw.strip():
        try:
            data = loads(raw)
        except BadJson as err:
            raise error(400, ApiCode.INVALID_JSON, complaint(err), None) from err
    elif not optional:
        data = None
    if not isinstance(data, dict):
        message = not_object if not_object is not None else complaint(BadJson("not a JSON object"))
        raise error(400, ApiCode.INVALID_JSON, message, None)
    return validate(model, data, error, context)


def _is_list(annotation: object) -> bool:
    if typing.get_origin(annotation) is list:
        return True
    return any(_is_list(arg) for arg in typing.get_args(annotation))


def query_data(request: web.Request, model: type[pydantic.BaseModel]) -> dict[str, object]:
    """The query string as ``model`` reads it: every value of a list field, the first value of any other
    (as ``request.query.get`` gives it); parameters the model does not name are left out."""
    data: dict[str, object] = {}
    for name, info in model.model_fields.items():
        key = info.alias or name
        if key in request.query:
            data[key] = request.query.getall(key) if _is_list(info.annotation) else request.query[key]
    return data


def parse_query(
    request: web.Request, model: type[M], error: ErrorFactory, context: Mapping[str, Any] | None = None
) -> M:
    """The query string as ``model`` (see :func:`query_data`)."""
    return validate(model, query_data(request, model), error, context)


# ----- declared models, given to the handlers ----------------------------------------------------------------------


def _no_context(request: web.Request) -> Mapping[str, Any]:
    return {}


@dataclass(frozen=True, slots=True)
class Parsing:
    """How one server refuses the declared bodies and queries of its routes."""

    #: Builds the server's error (its envelope) from a refusal.
    error: ErrorFactory
    #: The message of 400 ``invalid_json`` for a body that is not JSON, or what it makes of the parser's complaint
    #: (a route's own :attr:`Endpoint.bad_json` wins).
    bad_json: str | Callable[[BadJson], str]
    #: The message for a body that is JSON but not an object (None: the ``bad_json`` one).
    not_object: str | None = None
    #: The validation context of a request (e.g. :data:`MAX_TEXT_CHARS`).
    context: Callable[[web.Request], Mapping[str, Any]] = _no_context


class Later(Generic[M]):
    """A declared JSON body that the handler reads when it chooses (``body: Later[Model]``), refused as its server
    refuses bodies; read once, later reads give the same model."""

    __slots__ = ("_read", "_model")

    def __init__(self, read: Callable[[], Awaitable[M]]) -> None:
        self._read = read
        self._model: M | None = None

    async def read(self) -> M:
        """The body as the declared model (the server's error when it is refused)."""
        if self._model is None:
            self._model = await self._read()
        return self._model


def _takes(endpoint: Endpoint, name: str, model: type[pydantic.BaseModel] | None) -> Literal["now", "later"] | None:
    """How the handler takes the declared ``model`` as ``name``: "now", "later" (a :class:`Later`), or None (it
    does not take it); TypeError when its annotation does not match the declaration."""
    handler = endpoint.handler
    if name not in inspect.signature(handler).parameters:
        return None
    where = f"{endpoint.method} {endpoint.path}: {handler.__qualname__}"
    if model is None:
        raise TypeError(f"{where} takes {name}= but its declaration names no {name} model")
    hint = typing.get_type_hints(handler).get(name)
    if hint is model:
        return "now"
    if name == "body" and typing.get_origin(hint) is Later and typing.get_args(hint) == (model,):
        return "later"
    raise TypeError(f"{where}: {name} is annotated {hint!r}, but the declaration names {model.__name__}")


def bind(endpoint: Endpoint, parsing: Parsing | None) -> RouteHandler:
    """The handler to register for ``endpoint``: the handler as written when it takes no declared model; otherwise
    one that parses the query, then the body (or hands it a :class:`Later`), as its signature asks, and calls it
    with ``query=`` / ``body=``. TypeError (at start-up) when a handler's annotation and its declaration disagree."""
    handler = endpoint.handler
    query_model, body_model = endpoint.query, endpoint.body
    query_mode = _takes(endpoint, "query", query_model)
    body_mode = _takes(endpoint, "body", body_model)
    if query_mode is None and body_mode is None:
        return handler
    if parsing is None:
        raise TypeError(f"{endpoint.method} {endpoint.path} takes its declared models: add_endpoints needs parsing=")
    bad_json = endpoint.bad_json if endpoint.bad_json is not None else parsing.bad_json
    optional = not endpoint.body_required

    @functools.wraps(handler)
    async def parsed(request: web.Request) -> web.StreamResponse:
        context = parsing.context(request)
        kwargs: dict[str, object] = {}
        if query_model is not None and query_mode is not None:
            kwargs["query"] = parse_query(request, query_model, parsing.error, context)
        if body_model is not None and body_mode is not None:

            async def read() -> pydantic.BaseModel:
                return await parse_body(
                    request,
                    body_model,
                    parsing.error,
                    bad_json=bad_json,
                    not_object=parsing.not_object,
                    context=context,
                    optional=optional,
                )

            kwargs["body"] = await read() if body_mode == "now" else Later(read)
        return await handler(request, **kwargs)

    return parsed
