"""The avatar server's OpenAPI document: valid 3.1, exactly the avatar app's routes, and real answers that match it."""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from harness.avatar import Viewer
from harness.base import make_settings
from zsynth.avatar.app import create_avatar_app
from zsynth.core.config import Settings
from zsynth.documents import build_document

from .openapi_helpers import Checker, documented, registered

DOC = build_document("avatar")
KEY = "avatar-openapi-key"
FULL = {"X-Api-Key": KEY}
# The control socket is a WebSocket: OpenAPI does not model it.
WEBSOCKET_SUFFIXES = ("/control/{session_id}",)
# An offer of the right shape for the route's checks, naming an avatar that does not exist: answered before signalling.
SHAPED_OFFER = "v=0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\n"


# Both WebRTC peers gather loopback ICE candidates (the conftest fixture).
pytestmark = pytest.mark.usefixtures("loopback_ice")


@pytest.mark.unit
def test_avatar_document_is_valid_openapi_31():
    assert DOC["openapi"].startswith("3.1")
    validate(DOC)
    for schema in DOC["components"]["schemas"].values():
        Draft202012Validator.check_schema(schema)
    # Its own envelope and credentials, not the speech API's.
    assert DOC["components"]["schemas"]["Error"]["required"] == ["code", "message"]
    schemes = DOC["components"]["securitySchemes"]
    assert schemes["ApiKeyHeader"]["name"] == "X-Api-Key" and schemes["BearerAuth"]["scheme"] == "bearer"
    assert schemes["SessionTokenQuery"] == {**schemes["SessionTokenQuery"], "in": "query", "name": "session_token"}


@pytest.mark.unit
def test_avatar_operations_document_their_security():
    for path, item in DOC["paths"].items():
        for method, op in item.items():
            names = {name for requirement in op["security"] for name in requirement}
            if path in ("/healthz", "/openapi.json"):
                assert names == set(), (method, path)
            elif path == "/connect":
                assert names == {"ApiKeyHeader", "BearerAuth", "SessionTokenQuery"}
            else:
                assert names == {"ApiKeyHeader", "BearerAuth"}, (method, path)
                assert "401" in op["responses"]


@pytest.mark.unit
def test_avatar_document_lists_exactly_the_registered_routes():
    # Building the app starts nothing: no Redis or workers needed to list its routes.
    assert registered(create_avatar_app(Settings()), WEBSOCKET_SUFFIXES) == documented(DOC)


@pytest.mark.stack
async def test_avatar_document_is_served_without_a_key(aiohttp_client, redis_url, data_dir):
    settings = make_settings(redis_url, data_dir, auth_api_keys=(KEY,))
    client = await aiohttp_client(create_avatar_app(settings))
    c = Checker(DOC)
    assert (await c.call(client, "GET", "/openapi.json"))[1] == build_document("avatar", settings)
    assert (await c.call(client, "GET", "/healthz"))[0] == 200
    # Without a keys table, session tokens cannot be minted.
    assert (await c.call(client, "POST", "/v1/streaming.create_token", headers=FULL, json={}))[0] == 501
    status, body = await c.call(client, "GET", "/v1/avatars")
    assert status == 401 and body["code"] == "missing_api_key"


@pytest.mark.stack
async def test_real_avatar_answers_match_the_document(aiohttp_client, redis_url, data_dir, keys_table):
    """A sample of successful and failing calls on every avatar route, each checked against the document."""
    settings = make_settings(redis_url, data_dir, auth_api_keys=(KEY,), auth_keys_table=keys_table)
    client = await aiohttp_client(create_avatar_app(settings))
    c = Checker(DOC)
    assert (await c.call(client, "GET", "/healthz"))[0] == 200
    assert (await c.call(client, "GET", "/openapi.json"))[0] == 200
    assert (await c.call(client, "GET", "/metrics", headers=FULL))[0] == 200
    assert (await c.call(client, "GET", "/metrics", headers={"X-Api-Key": "wrong"}))[1]["code"] == "invalid_api_key"

    mint = "/v1/streaming.create_token"
    status, minted = await c.call(client, "POST", mint, headers={"Authorization": f"Bearer {KEY}"}, json={})
    assert status == 200
    token = minted["data"]["token"]
    assert (await c.call(client, "POST", mint, headers=FULL, data=b"[1,"))[1]["code"] == "invalid_json"
    assert (await c.call(client, "POST", mint, headers=FULL, json={"ttl_seconds": "x"}))[0] == 400
    assert (await c.call(client, "POST", mint))[1]["code"] == "missing_api_key"
    bearer_token = {"Authorization": f"Bearer {token}"}
    assert (await c.call(client, "POST", mint, headers=bearer_token))[1]["code"] == "insufficient_scope"

    # /connect takes the session token in the query; bad offers get the envelope.
    as_token = f"?session_token={token}"
    status, body = await c.call(client, "POST", "/connect", query=as_token, json={"sdp": "v=0"})
    assert status == 400 and body["code"] == "invalid_sdp"
    assert (await c.call(client, "POST", "/connect", headers=FULL, data=b"not json"))[1]["code"] == "invalid_json"
    offer = {"sdp": SHAPED_OFFER, "avatar_id": "nobody"}
    status, body = await c.call(client, "POST", "/connect", headers=bearer_token, json=offer)
    assert status == 404 and body["code"] == "avatar_not_found"
    status, body = await c.call(client, "POST", "/connect", query=f"?session_token={KEY}", json=offer)
    assert status == 401 and body["code"] == "invalid_api_key"  # a full key never travels in a URL

    viewer = Viewer()
    try:
        status, answer = await c.call(client, "POST", "/connect", query=as_token, json=await viewer.offer())
        assert status == 200 and answer["type"] == "answer"
        session_id = answer["session_id"]
        status, avatars = await c.call(client, "GET", "/v1/avatars", headers=FULL)
        assert status == 200 and answer["avatar_id"] in {a["avatar_id"] for a in avatars["data"]}
        status, listed = await c.call(client, "GET", "/v1/sessions", headers=FULL)
        assert status == 200 and [s["session_id"] for s in listed["data"]] == [session_id]
        session = "/v1/sessions/{session_id}"
        assert (await c.call(client, "GET", session, session_id=session_id, headers=FULL))[0] == 200
        status, body = await c.call(client, "GET", session, session_id=session_id, query=as_token)
        assert status == 401 and body["code"] == "insufficient_scope"
        assert (await c.call(client, "DELETE", session, session_id=session_id, headers=FULL))[0] == 200
        assert (await c.call(client, "DELETE", session, session_id=session_id, headers=FULL))[0] == 404
        assert (await c.call(client, "GET", session, session_id=session_id, headers=FULL))[0] == 404
    finally:
        await viewer.close()

    assert c.seen == documented(DOC), f"not exercised: {documented(DOC) - c.seen}"
