"""Ephemeral tokens: ``POST /v1/tokens/ephemeral`` mints a short-lived ``zsk_temp_`` token with a full key."""

from __future__ import annotations

import logging

from aiohttp import web

from ..auth import AUTHENTICATOR, CREDENTIAL, AuthError, clamp_ttl
from ..endpoints import Access, Endpoints
from ..errors import ApiError
from ..jsonbody import BadJson, loads
from ..keys import REQUEST_ID

logger = logging.getLogger(__name__)

routes = Endpoints()

_BAD_BODY = "The request body must be a JSON object, optionally with an integer 'ttl_seconds'."


@routes.post("/v1/tokens/ephemeral", access=Access.FULL, cors=False)
async def mint(request: web.Request) -> web.Response:
    """Mint a token valid for ``ttl_seconds`` (default 300, clamped to 30-600) for a browser to use."""
    body: object = {}
    if request.body_exists:
        raw = await request.read()
        if raw.strip():
            try:
                # Fix (hostile input): json.loads let deep nesting and 5000-digit numbers through as 500s.
                body = loads(raw)
            except BadJson as err:
                raise ApiError(400, "invalid_json", _BAD_BODY) from err
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", _BAD_BODY)
    try:
        ttl = clamp_ttl(body.get("ttl_seconds"))
    except ValueError as err:
        raise ApiError(422, "invalid_parameters", str(err), param="ttl_seconds") from err
    try:
        token, expires_at = await request.app[AUTHENTICATOR].mint_token(ttl, parent=request[CREDENTIAL])
    except AuthError as err:
        raise ApiError(err.http_status, err.status, err.message) from err
    logger.info("request %s: minted a %d s token", request[REQUEST_ID], ttl)
    return web.json_response(
        {"token": token, "expires_at": expires_at, "scope": "tts"}, headers={"Cache-Control": "no-store"}
    )
