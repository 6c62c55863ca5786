"""``POST /v1/streaming.create_token``: a full key mints a short-lived session token for a browser."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ... import jsonbody
from ...auth import AUTHENTICATOR, AuthError, clamp_ttl
from ..access import auth_error, authorize
from ..errors import AvatarError


async def read_json_object(request: web.Request, *, required: bool) -> dict[str, Any]:
    """The JSON object body, read as strict JSON like the speech API's; an empty body is ``{}`` unless ``required``."""
    raw = await request.read()
    if not raw.strip():
        if required:
            raise AvatarError(400, "invalid_json", "The request body must be a JSON object.")
        return {}
    try:
        body = jsonbody.loads(raw)  # deep nesting, huge numbers, NaN and bad UTF-8 too: a 400, never a 500
    except jsonbody.BadJson as err:
        raise AvatarError(400, "invalid_json", f"The request body is not valid JSON: {err}.") from err
    if not isinstance(body, dict):
        raise AvatarError(400, "invalid_json", "The request body must be a JSON object.")
    return body


async def create_token(request: web.Request) -> web.Response:
    """Mint a session token (scope ``tts``) living ``ttl_seconds``, clamped to 30-600 s."""
    credential = await authorize(request, stream_route=False)
    body = await read_json_object(request, required=False)
    try:
        ttl = clamp_ttl(body.get("ttl_seconds"))  # the speech API's rule: default 300, clamped to 30-600
    except ValueError as err:
        raise AvatarError(
            400, "invalid_parameters", "Field 'ttl_seconds' must be an integer number of seconds."
        ) from err
    try:
        # The minting key is the token's parent, as on the speech API: audited, and a token cannot mint tokens.
        token, expires_at = await request.app[AUTHENTICATOR].mint_token(ttl, scope="tts", parent=credential)
    except AuthError as err:
        raise auth_error(err) from err
    return web.json_response(
        {"data": {"token": token, "expires_at": expires_at, "scope": "tts"}}, headers={"Cache-Control": "no-store"}
    )


def setup(app: web.Application) -> None:
    """Register the token route."""
    app.router.add_post("/v1/streaming.create_token", create_token)
