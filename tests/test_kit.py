"""The server kit both servers share: one rule for paths no route answers, each error in the envelope its route
declares, and one access check for HTTP requests and sockets alike."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest

from harness.base import make_settings
from harness.ws import collect
from zsynth.avatar.app import create_avatar_app
from zsynth.services.auth import AUTHENTICATOR, Authenticator
from zsynth.speech.app import create_app

pytestmark = pytest.mark.stack

KEY = "kit-full-key"

#: Each server, a route it declares GET only, and how to read the code of an error answer in its envelope.
SERVERS = {
    "speech": ("/v1/models", lambda body: body["detail"]["code"]),
    "avatar": ("/v1/avatars", lambda body: body["code"]),
}


def build(server: str, settings: Any) -> Any:
    return create_app(settings) if server == "speech" else create_avatar_app(settings)


@pytest.mark.parametrize("server", sorted(SERVERS))
async def test_paths_no_route_answers_get_404_and_405_whatever_the_caller_presents(
    aiohttp_client, redis_url, data_dir, server
):
    """As ElevenLabs answers them: 404 and 405 come before any key check, in the server's envelope."""
    client = await aiohttp_client(build(server, make_settings(redis_url, data_dir, auth_api_keys=(KEY,))))
    get_only, code_of = SERVERS[server]
    for headers in ({}, {"xi-api-key": "not-a-key"}, {"X-Api-Key": KEY}):
        resp = await client.get("/v1/no-such-route", headers=headers)
        assert resp.status == 404 and code_of(await resp.json()) == "not_found", headers
        resp = await client.delete(get_only, headers=headers)
        assert resp.status == 405 and code_of(await resp.json()) == "method_not_allowed", headers
        assert {"GET", "HEAD"} <= {method.strip() for method in resp.headers["Allow"].split(",")}
        assert resp.headers["request-id"]
    # A route that is there still needs its key.
    resp = await client.get(get_only)
    assert resp.status == 401 and code_of(await resp.json()) == "missing_api_key"


async def test_errors_take_the_envelope_their_route_declares(aiohttp_client, redis_url, data_dir):
    """The OpenAI route declares OpenAI's envelope: its refusals, and a wrong method on its path, come in it; a path
    under /v1/audio/ that no route declares gets the API's own envelope."""
    client = await aiohttp_client(create_app(make_settings(redis_url, data_dir, auth_api_key=KEY)))
    resp = await client.post("/v1/audio/speech", json={"model": "m", "voice": "alloy", "input": "Hi."})
    assert resp.status == 401 and resp.headers["WWW-Authenticate"] == "Bearer"
    body = await resp.json()
    assert body == {
        "error": {
            "message": body["error"]["message"],
            "type": "authentication_error",
            "param": None,
            "code": "missing_api_key",
        }
    }
    resp = await client.get("/v1/audio/speech")
    error = (await resp.json())["error"]
    assert resp.status == 405 and (error["code"], error["type"]) == ("method_not_allowed", "invalid_request_error")
    resp = await client.get("/v1/audio/transcriptions", headers={"xi-api-key": KEY})
    detail = (await resp.json())["detail"]
    assert resp.status == 404 and detail["status"] == detail["code"] == "not_found"
    assert detail["request_id"] == resp.headers["request-id"] and "param" not in detail


async def token_without_scope(auth: Authenticator) -> str:
    """A live token minted by ``KEY`` with no scope: a full key (or an open server) is the only other kind."""
    token, _ = await auth.mint_token(60, scope="", parent=await auth.verify(KEY))
    return token


async def test_one_access_check_for_http_and_the_realtime_socket(aiohttp_client, redis_url, data_dir, keys_table):
    """A token without the ``tts`` scope is refused by the same check on a token route over HTTP and on the socket
    after it authenticates in band: the same code, ``insufficient_scope``."""
    settings = make_settings(redis_url, data_dir, auth_api_key=KEY, auth_keys_table=keys_table)
    client = await aiohttp_client(create_app(settings))
    token = await token_without_scope(client.server.app[AUTHENTICATOR])
    resp = await client.get("/v1/voices", headers={"xi-api-key": token})
    detail = (await resp.json())["detail"]
    assert resp.status == 401 and detail["code"] == "insufficient_scope"
    for url, first in (
        ("/v1/text-to-speech/v/stream-input?authorization=" + quote(f"Bearer {token}"), {"text": " "}),
        ("/v1/text-to-speech/v/stream-input", {"text": " ", "xi_api_key": token}),
        ("/v1/text-to-speech/v/multi-stream-input", {"text": " ", "xi_api_key": token}),
    ):
        ws = await client.ws_connect(url)
        await ws.send_json(first)
        got = await collect(ws)
        assert [frame["error"] for frame in got.errors] == ["insufficient_scope"], url
        assert got.close_code == 1008 and got.audio() == b""


async def test_one_access_check_for_the_avatar_control_socket(aiohttp_client, redis_url, data_dir, keys_table):
    """The avatar's stream routes (its control socket included) are token routes: a token without scope is refused
    there with the same code."""
    settings = make_settings(redis_url, data_dir, auth_api_keys=(KEY,), auth_keys_table=keys_table)
    client = await aiohttp_client(create_avatar_app(settings))
    token = await token_without_scope(client.server.app[AUTHENTICATOR])
    for resp in (
        await client.get(f"/control/some-session?session_token={token}"),
        await client.post("/connect", json={}, headers={"X-Api-Key": token}),
    ):
        body = await resp.json()
        assert resp.status == 401 and body["code"] == "insufficient_scope", body
