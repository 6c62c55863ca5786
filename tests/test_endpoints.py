"""Route declarations of the speech API: every route declares its access, every request model is documented, and
the models refuse bad input with the API's own codes, fields and messages."""

from __future__ import annotations

import inspect

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from pydantic import BaseModel

from harness.base import make_settings
from zsynth.kit.endpoints import (
    ENDPOINTS,
    Access,
    Endpoints,
    Later,
    Parsing,
    add_endpoints,
    all_endpoints,
    query_data,
    validate,
)
from zsynth.kit.errors import ApiError, error_middleware
from zsynth.services.keys import SETTINGS
from zsynth.speech.app import create_app
from zsynth.speech.routes import TABLES
from zsynth.speech.routes.dictionaries import DictionaryListQuery, RulesRequest
from zsynth.speech.routes.openai_speech import OpenAISpeechRequest
from zsynth.speech.routes.voices import VoiceListQuery
from zsynth.speech.schemas.bodies import MAX_TEXT_CHARS, api_error
from zsynth.speech.synthesis_http import TextToSpeechRequest

from .helpers import status_and_code

KEY = "endpoints-test-key"


@pytest.fixture
def app(redis_url, data_dir):
    return create_app(make_settings(redis_url, data_dir, auth_api_key=KEY))


@pytest.mark.stack
def test_every_route_declares_its_access(app):
    registry = app[ENDPOINTS]
    undeclared = []
    for route in app.router.routes():
        if route.method in ("HEAD", "OPTIONS"):
            continue
        endpoint = registry.get(route)
        if endpoint is None or not isinstance(endpoint.access, Access):
            undeclared.append(f"{route.method} {route.resource.canonical if route.resource else route}")
    assert not undeclared, undeclared
    # Every declaration of every table is registered, each once.
    declared = [endpoint for table in TABLES for endpoint in table]
    assert len(all_endpoints(app)) == len(declared)


@pytest.mark.stack
def test_the_realtime_sockets_authenticate_in_band(app):
    sockets = {e.path: e for e in all_endpoints(app) if e.websocket}
    assert set(sockets) == {
        "/v1/text-to-speech/{voice_id}/stream-input",
        "/v1/text-to-speech/{voice_id}/multi-stream-input",
        "/v1/text-to-dialogue/stream-input",
        "/v1/text-to-dialogue/multi-stream-input",
    }
    assert all(e.access is Access.IN_BAND for e in sockets.values())


@pytest.mark.stack
def test_no_browser_may_call_the_routes_that_need_no_cors(app):
    no_cors = {e.path for e in all_endpoints(app) if not e.cors}
    # Both minting routes need a full key, which must never reach a browser.
    expected = {"/healthz", "/readyz", "/openapi.json", "/v1/tokens/ephemeral", "/v1/single-use-token/{token_type}"}
    assert no_cors == expected


@pytest.mark.stack
@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("POST", "/v1/text-to-speech/{voice_id}", True),
        ("POST", "/v1/text-to-speech/{voice_id}/stream", True),
        ("POST", "/v1/text-to-speech/{voice_id}/with-timestamps", True),
        ("GET", "/v1/text-to-speech/{voice_id}/stream-input", True),
        ("POST", "/v1/audio/speech", True),
        ("GET", "/v1/voices", True),
        ("GET", "/v1/voices/{voice_id}", True),
        ("GET", "/v1/voices/settings/default", True),
        ("GET", "/v2/voices", True),
        ("POST", "/v1/voices/add", False),
        ("POST", "/voices", False),
        ("DELETE", "/voices/{voice_id}", False),
        ("DELETE", "/v1/voices/{voice_id}", False),
        ("POST", "/v1/tokens/ephemeral", False),
        ("GET", "/v1/models", False),
        ("GET", "/v1/user", False),
        ("GET", "/metrics", False),
        ("GET", "/v1/pronunciation-dictionaries", False),
    ],
)
def test_token_scope_is_declared(app, method, path, allowed):
    """Tokens may synthesize (every transport) and read voices; everything else needs a full key."""
    (endpoint,) = [e for e in all_endpoints(app) if (e.method, e.path) == (method, path)]
    assert (endpoint.access in (Access.TOKEN, Access.IN_BAND)) is allowed


@pytest.mark.stack
async def test_every_request_model_is_in_the_served_document(aiohttp_client, app):
    client = await aiohttp_client(app)
    resp = await client.get("/openapi.json")  # public: no key
    assert resp.status == 200
    schemas = (await resp.json())["components"]["schemas"]
    models = {m.__name__ for e in all_endpoints(app) for m in (e.body, e.query) if m is not None}
    assert {"TextToSpeechRequest", "OpenAISpeechRequest", "TokenRequest", "VoiceListQuery"} <= models
    missing = models - set(schemas)
    assert not missing, missing
    for name in models:
        assert schemas[name].get("type") == "object", name


def _refused(model, data, **context) -> ApiError:
    with pytest.raises(ApiError) as err:
        validate(model, data, api_error, context)
    return err.value


@pytest.mark.unit
def test_a_refusal_keeps_the_code_status_field_and_message():
    limit = {MAX_TEXT_CHARS: 5}
    err = _refused(TextToSpeechRequest, {"text": "too long"}, **limit)
    assert (err.http_status, err.status, err.param) == (400, "max_character_limit_exceeded", "text")
    assert err.message == "This request's text has 8 characters and exceeds the character limit of 5 characters."
    err = _refused(TextToSpeechRequest, {}, **limit)
    assert (err.http_status, err.status, err.param) == (422, "invalid_parameters", "text")
    assert err.message == "Field 'text' is required and must be a non-empty string."
    # A key inside a field is named, not just the field.
    err = _refused(TextToSpeechRequest, {"text": "hi", "voice_settings": {"speed": "fast"}}, **limit)
    assert (err.status, err.param, err.message) == (
        "invalid_parameters",
        "voice_settings.speed",
        "voice_settings.speed must be a number.",
    )
    # The first field checked is the one answered, whatever else is wrong.
    err = _refused(TextToSpeechRequest, {"text": "hi", "model_id": 5, "seed": -1}, **limit)
    assert (err.param, err.message) == ("model_id", "Field 'model_id' must be a string.")


@pytest.mark.unit
def test_a_refusal_quoting_the_input_keeps_its_braces():
    err = _refused(
        OpenAISpeechRequest, {"input": "hi", "voice": "a", "response_format": "{status}"}, **{MAX_TEXT_CHARS: 9}
    )
    assert (err.http_status, err.status, err.param) == (400, "invalid_response_format", "response_format")
    assert err.message.startswith("Unsupported response_format '{status}': use one of mp3")
    err = _refused(OpenAISpeechRequest, {"input": "hi", "voice": {}}, **{MAX_TEXT_CHARS: 9})
    assert err.message == "Field 'voice' must be a voice name, a voice id or {\"id\": ...}."


@pytest.mark.unit
def test_models_give_the_handlers_checked_values():
    body = validate(
        TextToSpeechRequest,
        {"text": "hi", "seed": 42.0, "voice_settings": {"speed": 1}},
        api_error,
        {MAX_TEXT_CHARS: 9},
    )
    assert body.seed == 42 and body.voice_settings_dict() == {"speed": 1.0}
    rules = validate(RulesRequest, {"rules": [{"type": "alias", "string_to_replace": "a", "alias": "b"}]}, api_error)
    assert [(r.type, r.string_to_replace, r.alias, r.case_sensitive) for r in rules.parsed()] == [
        ("alias", "a", "b", True)
    ]
    err = _refused(DictionaryListQuery, {"page_size": "500", "cursor": "x"})
    assert (err.param, err.message) == (None, "page_size and cursor must be whole numbers.")


@pytest.mark.unit
def test_query_reads_the_first_value_and_every_value_of_a_list():
    request = make_mocked_request("GET", "/v2/voices?voice_ids=a&voice_ids=b&sort=name&sort=bogus&other=1")
    assert query_data(request, VoiceListQuery) == {"voice_ids": ["a", "b"], "sort": "name"}


# ----- handlers take their declared models -------------------------------------------------------------------------


class _Query(BaseModel):
    n: int = 1


class _Body(BaseModel):
    text: str


_TEST_PARSING = Parsing(api_error, "Send a JSON object.")


def _table() -> Endpoints:
    routes = Endpoints()

    @routes.post("/now", access=Access.PUBLIC, query=_Query, body=_Body)
    async def now(request: web.Request, query: _Query, body: _Body) -> web.Response:
        return web.json_response({"n": query.n, "text": body.text})

    @routes.post("/later/{thing}", access=Access.PUBLIC, body=_Body, bad_json="This route's own message.")
    async def later(request: web.Request, body: Later[_Body]) -> web.Response:
        if request.match_info["thing"] != "known":
            raise ApiError(404, "not_found", "No such thing.")
        return web.json_response({"text": (await body.read()).text})

    @routes.post("/optional", access=Access.PUBLIC, body=_Body, body_required=False)
    async def optional(request: web.Request, body: _Body) -> web.Response:
        return web.json_response({"text": body.text})

    return routes


@pytest.fixture
async def bound(aiohttp_client, redis_url, data_dir):
    app = web.Application(middlewares=[error_middleware])
    app[SETTINGS] = make_settings(redis_url, data_dir)  # the JSON body limit
    add_endpoints(app, _table(), parsing=_TEST_PARSING)
    return await aiohttp_client(app)


@pytest.mark.stack
async def test_a_handler_gets_its_declared_models_parsed(bound):
    resp = await bound.post("/now?n=3", json={"text": "hi"})
    assert resp.status == 200 and await resp.json() == {"n": 3, "text": "hi"}
    # The query is checked first, the body then, in the server's envelope with its messages.
    resp = await bound.post("/now?n=x", data=b"not json")
    assert await status_and_code(resp) == (422, "invalid_parameters")
    resp = await bound.post("/now", data=b"not json")
    assert await status_and_code(resp) == (400, "invalid_json")
    resp = await bound.post("/now", data=b"[]")
    assert (await resp.json())["detail"]["message"] == "Send a JSON object."
    # A required body may not be missing; an optional one is {} (and then validated).
    assert await status_and_code(await bound.post("/now")) == (400, "invalid_json")
    assert await status_and_code(await bound.post("/optional")) == (422, "invalid_parameters")


@pytest.mark.stack
async def test_a_later_body_is_read_after_the_handler_s_own_checks(bound):
    # The handler's 404 comes first, whatever the body holds.
    assert await status_and_code(await bound.post("/later/other", data=b"not json")) == (404, "not_found")
    resp = await bound.post("/later/known", data=b"not json")
    detail = (await resp.json())["detail"]
    assert (resp.status, detail["code"], detail["message"]) == (400, "invalid_json", "This route's own message.")
    resp = await bound.post("/later/known", json={"text": "hi"})
    assert await resp.json() == {"text": "hi"}


@pytest.mark.unit
def test_a_handler_annotation_must_match_its_declaration():
    routes = Endpoints()

    @routes.post("/wrong", access=Access.PUBLIC, body=_Body)
    async def wrong(request: web.Request, body: _Query) -> web.Response:
        return web.json_response({})

    with pytest.raises(TypeError, match="declaration names _Body"):
        add_endpoints(web.Application(), routes, parsing=_TEST_PARSING)
    undeclared = Endpoints()

    @undeclared.get("/undeclared", access=Access.PUBLIC)
    async def takes(request: web.Request, query: _Query) -> web.Response:
        return web.json_response({})

    with pytest.raises(TypeError, match="names no query model"):
        add_endpoints(web.Application(), undeclared, parsing=_TEST_PARSING)
    with pytest.raises(TypeError, match="needs parsing="):
        add_endpoints(web.Application(), _table())


@pytest.mark.stack
def test_the_routes_that_read_their_declared_body_themselves(app):
    own = {
        (e.method, e.path)
        for e in all_endpoints(app)
        if e.body is not None and "body" not in inspect.signature(e.handler).parameters
    }
    # settings/edit quotes the parser's complaint in its message.
    assert own == {("POST", "/v1/voices/{voice_id}/settings/edit")}


@pytest.mark.stack
async def test_an_unknown_dictionary_is_answered_before_its_body_is_read(aiohttp_client, app):
    client = await aiohttp_client(app)
    headers = {"xi-api-key": KEY}
    for path in ("", "/add-rules", "/remove-rules", "/set-rules"):
        method = "PATCH" if not path else "POST"
        resp = await client.request(method, f"/v1/pronunciation-dictionaries/nope{path}", data=b"{", headers=headers)
        assert await status_and_code(resp) == (404, "pronunciation_dictionary_not_found"), path
