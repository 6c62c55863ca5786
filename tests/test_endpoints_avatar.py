"""The avatar server's routes are declarations: each has an access rule, each model is in its document, and CORS
is offered exactly on the routes declared ``cors=True``."""

from __future__ import annotations

import pydantic
import pytest
from aiohttp import web

from harness.base import make_settings
from zsynth.avatar.app import create_avatar_app
from zsynth.avatar.routes import TABLES
from zsynth.core.config import Settings
from zsynth.kit.cors import setup_cors
from zsynth.kit.endpoints import ENDPOINTS, Access, Endpoints, add_endpoints
from zsynth.kit.openapi import models_in

KEY = "avatar-endpoints-key"


@pytest.mark.unit
def test_every_registered_route_is_declared_with_an_access_rule():
    app = create_avatar_app(Settings())
    declared = app[ENDPOINTS]
    undeclared = []
    for route in app.router.routes():
        if route.method == "OPTIONS":
            continue  # aiohttp-cors's preflight routes: no handler of ours runs behind them
        endpoint = declared.get(route)
        if endpoint is None:
            undeclared.append((route.method, route.resource.canonical if route.resource else "?"))
        else:
            assert isinstance(endpoint.access, Access), endpoint
    assert undeclared == []
    # The control socket authenticates on its upgrade like /connect: a full key or this session's token.
    control = next(e for table in TABLES for e in table if e.websocket)
    assert control.path == "/control/{session_id}" and control.access is Access.TOKEN


@pytest.mark.stack
async def test_every_declared_model_is_in_the_served_document(aiohttp_client, redis_url, data_dir):
    client = await aiohttp_client(create_avatar_app(make_settings(redis_url, data_dir, auth_api_keys=(KEY,))))
    resp = await client.get("/openapi.json")
    assert resp.status == 200
    document = await resp.json()
    schemas = document["components"]["schemas"]
    requests: set[type[pydantic.BaseModel]] = set()
    responses: set[type[pydantic.BaseModel]] = set()
    for table in TABLES:
        for endpoint in table:
            requests.update(model for model in (endpoint.body, endpoint.query) if model is not None)
            models_in(endpoint.doc, responses)
            if endpoint.body is not None:
                op = document["paths"][endpoint.path][endpoint.method.lower()]
                schema = op["requestBody"]["content"]["application/json"]["schema"]
                assert schema == {"$ref": f"#/components/schemas/{endpoint.body.__name__}"}
    assert {model.__name__ for model in requests} == {"SessionTokenRequest", "ConnectRequest"}
    for model in requests | responses:
        assert model.__name__ in schemas, model
        assert set(schemas[model.__name__]["properties"]) == set(model.model_json_schema()["properties"])


@pytest.mark.stack
async def test_cors_is_offered_only_where_declared(aiohttp_client):
    routes = Endpoints()

    @routes.post("/open", access=Access.PUBLIC)
    async def open_route(request: web.Request) -> web.Response:
        return web.json_response({})

    @routes.post("/closed", access=Access.PUBLIC, cors=False)
    async def closed_route(request: web.Request) -> web.Response:
        return web.json_response({})

    app = web.Application()
    add_endpoints(app, routes)
    setup_cors(app, ("https://page.example",), allow_headers=("Content-Type",))
    client = await aiohttp_client(app)
    page = {"Origin": "https://page.example"}
    preflight = {**page, "Access-Control-Request-Method": "POST"}
    resp = await client.options("/open", headers=preflight)
    assert resp.status == 200 and resp.headers["Access-Control-Allow-Origin"] == "https://page.example"
    resp = await client.post("/open", headers=page)
    assert resp.headers["Access-Control-Allow-Origin"] == "https://page.example"
    assert (await client.options("/closed", headers=preflight)).status == 405
    resp = await client.post("/closed", headers=page)
    assert resp.status == 200 and "Access-Control-Allow-Origin" not in resp.headers
    resp = await client.post("/open", headers={"Origin": "https://other.example"})
    assert "Access-Control-Allow-Origin" not in resp.headers


@pytest.mark.stack
async def test_the_avatar_answers_any_origin_with_a_wildcard(aiohttp_client, redis_url, data_dir):
    client = await aiohttp_client(create_avatar_app(make_settings(redis_url, data_dir, auth_api_keys=(KEY,))))
    page = {"Origin": "https://app.example"}
    resp = await client.options("/v1/sessions/abc", headers={**page, "Access-Control-Request-Method": "DELETE"})
    assert resp.status == 204 and resp.headers["Access-Control-Allow-Origin"] == "*"
    assert resp.headers["Access-Control-Max-Age"] == "600" and await resp.read() == b""
    resp = await client.delete("/v1/sessions/abc", headers={**page, "X-Api-Key": KEY})
    body = await resp.json()
    assert resp.status == 404 and body["code"] == "session_not_found"
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
    # A path no route matches: the page can read the JSON error.
    resp = await client.get("/v1/no-such-thing", headers={**page, "X-Api-Key": KEY})
    assert resp.status == 404 and resp.headers["Access-Control-Allow-Origin"] == "*"
    assert (await resp.json())["code"] == "not_found"
    # A page may send every credential header, not others.
    for header in ("xi-api-key", "X-Api-Key", "Authorization"):
        asked = {**page, "Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": header}
        resp = await client.options("/v1/avatars", headers=asked)
        assert resp.status == 204 and header.lower() in resp.headers["Access-Control-Allow-Headers"].lower()
    refused = {**page, "Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "x-evil"}
    assert (await client.options("/v1/avatars", headers=refused)).status == 403
