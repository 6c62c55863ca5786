"""``POST /v1/streaming.create_token``: a full key mints a short-lived session token for a browser."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from ...auth import AuthError, clamp_ttl
from ...keys import AUTHENTICATOR
from ..access import auth_error, authorize
from ..errors import AvatarError


async def read_json_object(request: web.Request, *, required: bool) -> dict[str, Any]:
    """The JSON object body; an empty body is ``{}`` unless ``required``."""
    raw = await request.text()
    if not raw.strip():
        if required:
            raise AvatarError(400, "invalid_json", "The request body must be a JSON object.")
        return {}
    try:
        body = json.loads(raw)
    except json.JSONDecodeError as err:
        raise AvatarError(400, "invalid_json", f"The request body is not valid JSON: {err.msg}.") from err
    if not isinstance(body, dict):
        raise AvatarError(400, "invalid_json", "The request body must be a JSON object.")
    return body


async def create_token(request: web.Request) -> web.Response:
    """Mint a session token (scope ``tts``) living ``ttl_seconds``, clamped to 30-600 s."""
    await authorize(request, stream_route=False)
    body = await read_json_object(request, required=False)
    try:
        ttl = clamp_ttl(body.get("ttl_seconds"))  # the speech API's rule: default 300, clamped to 30-600
    except ValueError as err:
        raise AvatarError(
            400, "invalid_parameters", "Field 'ttl_seconds' must be an integer number of seconds."
        ) from err
    try:
        token, expires_at = await request.app[AUTHENTICATOR].mint_token(ttl, scope="tts")
    except AuthError as err:
        raise auth_error(err) from err
    return web.json_response({"data": {"token": token, "expires_at": int(expires_at), "scope": "tts"}})


def setup(app: web.Application) -> None:
    """Register the token route."""
    app.router.add_post("/v1/streaming.create_token", create_token)
