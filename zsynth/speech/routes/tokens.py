"""Tokens a backend mints for a browser, with a full key.

* ``POST /v1/tokens/ephemeral``: a short-lived ``zsk_temp_`` token (scope ``tts``), used as a key until it expires.
* ``POST /v1/single-use-token/tts_websocket``: ElevenLabs' single-use ``sutkn_`` token, which opens one realtime
  socket (``?single_use_token=``) within 15 minutes (:mod:`zsynth.services.single_use`).
"""

from __future__ import annotations

import logging
from typing import Annotated, Literal

import pydantic
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from zsynth.core.codes import ApiCode
from zsynth.kit.endpoints import Access, Endpoints, refusal
from zsynth.kit.errors import ApiError
from zsynth.services import single_use
from zsynth.services.auth import AUTHENTICATOR, CREDENTIAL, TTL_DEFAULT, TTL_SCHEMA, AuthError, clamp_ttl
from zsynth.services.keys import REDIS, REQUEST_ID, SETTINGS
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
            raise refusal(ApiCode.INVALID_PARAMETERS, str(err)) from None


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
        raise ApiError(err.http_status, err.code, err.message) from err
    logger.info("request %s: minted a %d s token", request[REQUEST_ID], ttl)
    return web.json_response(
        {"token": token, "expires_at": expires_at, "scope": "tts"}, headers={"Cache-Control": "no-store"}
    )


class SingleUseToken(BaseModel):
    """A new single-use token (ElevenLabs' ``SingleUseTokenResponseModel``)."""

    model_config = ConfigDict(extra="forbid")

    token: str = Field(
        pattern=f"^{single_use.TOKEN_PREFIX}",
        description="Valid for 15 minutes; consumed by the first socket that presents it as ?single_use_token=.",
    )


@routes.post(
    "/v1/single-use-token/{token_type}",
    access=Access.FULL,
    cors=False,
    operationId="create_single_use_token",
    tags=["tokens"],
    summary="Mint an ElevenLabs single-use token for one realtime socket (type tts_websocket).",
    path_params={"token_type": "tts_websocket (ElevenLabs' realtime_scribe and batch_scribe are not served: 400)."},
    responses={200: json_body("The new token (Cache-Control: no-store).", SingleUseToken)},
    errors=(400, 422, 429, 503),
)
async def mint_single_use(request: web.Request) -> web.Response:
    """Mint a token that opens one TTS or dialogue socket within 15 minutes, counted against the minting key (429
    ``rate_limit_exceeded`` once the key holds ZSYNTH_SINGLE_USE_MAX_UNSPENT unspent ones)."""
    token_type = request.match_info["token_type"]
    if token_type not in single_use.TOKEN_TYPES:
        if token_type in single_use.ELEVENLABS_TYPES:
            raise ApiError(
                400,
                ApiCode.UNSUPPORTED_TOKEN_TYPE,
                f"Token type '{token_type}' is for speech to text, which this server does not serve; use "
                "'tts_websocket'.",
                param="token_type",
            )
        shown = token_type if len(token_type) <= 32 else token_type[:32] + "..."
        raise ApiError(
            422, ApiCode.INVALID_PARAMETERS, f"Unknown token type '{shown}': use 'tts_websocket'.", param="token_type"
        )
    try:
        token = await single_use.mint(
            request.app[REDIS],
            token_type,
            request[CREDENTIAL],
            max_unspent=request.app[SETTINGS].auth.single_use_max_unspent,
        )
    except single_use.TooManyUnspent as err:
        raise ApiError(429, err.code, err.message, headers={"Retry-After": str(err.retry_after_s)}) from err
    except AuthError as err:
        raise ApiError(err.http_status, err.code, err.message) from err
    logger.info("request %s: minted a single-use %s token", request[REQUEST_ID], token_type)
    return web.json_response({"token": token}, headers={"Cache-Control": "no-store"})
