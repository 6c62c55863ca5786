"""Ephemeral tokens: ``POST /v1/tokens/ephemeral`` mints a short-lived ``zsk_temp_`` token with a full key."""

from __future__ import annotations

import logging
from typing import Annotated, Literal

import pydantic
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from zsynth.kit.endpoints import Access, Endpoints, refusal
from zsynth.kit.errors import ApiError
from zsynth.services.auth import AUTHENTICATOR, CREDENTIAL, TTL_DEFAULT, TTL_SCHEMA, AuthError, clamp_ttl
from zsynth.services.keys import REQUEST_ID
from zsynth.speech.schemas.apidoc import json_body

logger = logging.getLogger(__name__)

routes = Endpoints()

_BAD_BODY = "The request body must be a JSON object, optionally with an integer 'ttl_seconds'."


class TokenRequest(BaseModel):
    """The body of ``POST /v1/tokens/ephemeral`` (optional: no body means the defaults)."""

    # The validator runs on the default too, so a validated request always holds the clamped lifetime.
    ttl_seconds: Annotated[int, pydantic.WithJsonSchema(TTL_SCHEMA)] = Field(
        default=None,
        validate_default=True,
        description="Lifetime in seconds (default 300, clamped to 30-600).",
        json_schema_extra={"default": TTL_DEFAULT},
    )

    @pydantic.field_validator("ttl_seconds", mode="before")
    @classmethod
    def _ttl(cls, value: object) -> int:
        try:
            return clamp_ttl(value)
        except ValueError as err:
            raise refusal("invalid_parameters", str(err)) from None


class TokenResponse(BaseModel):
    """A new token."""

    model_config = ConfigDict(extra="forbid")

    token: str = Field(pattern="^zsk_temp_")
    expires_at: int = Field(description="Unix time the token stops working.")
    scope: Literal["tts"]


# A full key must never reach a browser, so the route that needs one is not offered to browsers at all.
@routes.post(
    "/v1/tokens/ephemeral",
    access=Access.FULL,
    cors=False,
    body=TokenRequest,
    body_required=False,
    bad_json=_BAD_BODY,
    operationId="mint_token",
    tags=["tokens"],
    summary="Mint an ephemeral token a browser may use to synthesize and read voices.",
    responses={200: json_body("The new token (Cache-Control: no-store).", TokenResponse)},
    errors=(400, 413, 422, 501),
)
async def mint(request: web.Request, body: TokenRequest) -> web.Response:
    """Mint a token valid for ``ttl_seconds`` (default 300, clamped to 30-600) for a browser to use."""
    ttl = body.ttl_seconds
    try:
        token, expires_at = await request.app[AUTHENTICATOR].mint_token(ttl, parent=request[CREDENTIAL])
    except AuthError as err:
        raise ApiError(err.http_status, err.status, err.message) from err
    logger.info("request %s: minted a %d s token", request[REQUEST_ID], ttl)
    return web.json_response(
        {"token": token, "expires_at": expires_at, "scope": "tts"}, headers={"Cache-Control": "no-store"}
    )
