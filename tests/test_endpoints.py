"""Route declarations of the speech API: every route declares its access, every request model is documented, and
the models refuse bad input with the API's own codes, fields and messages."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request

from zsynth.app import create_app
from zsynth.endpoints import ENDPOINTS, Access, all_endpoints, query_data, validate
from zsynth.errors import ApiError
from zsynth.routes import TABLES
from zsynth.routes.bodies import MAX_TEXT_CHARS, api_error
from zsynth.routes.dictionaries import DictionaryListQuery, RulesRequest
from zsynth.routes.openai_speech import OpenAISpeechRequest
from zsynth.routes.tts import TextToSpeechRequest
from zsynth.routes.voices import VoiceListQuery

from .helpers import make_settings

KEY = "endpoints-test-key"


@pytest.fixture
def app(redis_url, data_dir):
    return create_app(make_settings(redis_url, data_dir, api_key=KEY))


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


def test_the_realtime_sockets_authenticate_in_band(app):
    sockets = {e.path: e for e in all_endpoints(app) if e.websocket}
    assert set(sockets) == {
        "/v1/text-to-speech/{voice_id}/stream-input",
        "/v1/text-to-speech/{voice_id}/multi-stream-input",
    }
    assert all(e.access is Access.IN_BAND for e in sockets.values())


def test_no_browser_may_call_the_routes_that_need_no_cors(app):
    no_cors = {e.path for e in all_endpoints(app) if not e.cors}
    assert no_cors == {"/healthz", "/readyz", "/openapi.json", "/v1/tokens/ephemeral"}


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


def test_a_refusal_quoting_the_input_keeps_its_braces():
    err = _refused(
        OpenAISpeechRequest, {"input": "hi", "voice": "a", "response_format": "{status}"}, **{MAX_TEXT_CHARS: 9}
    )
    assert (err.http_status, err.status, err.param) == (400, "invalid_response_format", "response_format")
    assert err.message.startswith("Unsupported response_format '{status}': use one of mp3")
    err = _refused(OpenAISpeechRequest, {"input": "hi", "voice": {}}, **{MAX_TEXT_CHARS: 9})
    assert err.message == "Field 'voice' must be a voice name, a voice id or {\"id\": ...}."


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


def test_query_reads_the_first_value_and_every_value_of_a_list():
    request = make_mocked_request("GET", "/v2/voices?voice_ids=a&voice_ids=b&sort=name&sort=bogus&other=1")
    assert query_data(request, VoiceListQuery) == {"voice_ids": ["a", "b"], "sort": "name"}
