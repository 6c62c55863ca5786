"""``POST /v1/streaming.create_token``: a full key mints a short-lived session token for a browser."""

from __future__ import annotations

from typing import Annotated, Literal

import pydantic
from aiohttp import web

from zsynth.avatar.access import auth_error
from zsynth.avatar.bodies import documented
from zsynth.core.codes import ApiCode
from zsynth.kit.endpoints import Access, Endpoints, refusal
from zsynth.services.auth import (
    AUTHENTICATOR,
    AVATAR_SERVER,
    CREDENTIAL,
    SPEECH_SCOPE,
    TTL_DEFAULT,
    TTL_SCHEMA,
    AuthError,
    clamp_ttl,
)

routes = Endpoints()


class SessionTokenRequest(pydantic.BaseModel):
    """The optional body of ``POST /v1/streaming.create_token``."""

    # Null is the default: the validator clamps it too, so a validated request always holds the lifetime.
    ttl_seconds: Annotated[int, pydantic.WithJsonSchema(TTL_SCHEMA)] = pydantic.Field(
        default=TTL_DEFAULT, description="Lifetime in seconds (default 300, clamped to 30-600)."
    )

    @pydantic.field_validator("ttl_seconds", mode="before")
    @classmethod
    def _clamped(cls, value: object) -> int:
        # The speech API's rule (zsynth.services.auth.clamp_ttl): null is the default, "300" and true are refused.
        try:
            return clamp_ttl(value)
        except ValueError:
            raise refusal(
                ApiCode.INVALID_PARAMETERS, "Field 'ttl_seconds' must be an integer number of seconds.", 400
            ) from None


class SessionToken(pydantic.BaseModel):
    """A new session token."""

    model_config = pydantic.ConfigDict(extra="forbid")

    token: str = pydantic.Field(pattern="^zsk_temp_")
    expires_at: int = pydantic.Field(description="Unix time the token stops working.")
    scope: Literal["tts"] = pydantic.Field(
        description="Always tts (the spec's value); session tokens still work on this server only."
    )


class SessionTokenData(pydantic.BaseModel):
    """The answer of ``POST /v1/streaming.create_token``."""

    data: SessionToken


@routes.post(
    "/v1/streaming.create_token",
    access=Access.FULL,
    # Not offered to pages (only to origins ZSYNTH_CORS_ORIGINS names): a full key belongs in a backend.
    cors=False,
    body=SessionTokenRequest,
    body_required=False,
    operationId="create_session_token",
    tags=["tokens"],
    summary="Mint a session token a browser may use on /connect and the control socket.",
    responses={"200": documented("The new session token.", SessionTokenData)},
    errors=(400, 413, 501),
)
async def create_token(request: web.Request, body: SessionTokenRequest) -> web.Response:
    """Mint a session token living ``ttl_seconds``, clamped to 30-600 s: scope ``tts`` as the spec says, and its
    record names this server, the only one it works on."""
    try:
        # The minting key is the token's parent, as on the speech API: audited, and a token cannot mint tokens.
        token, expires_at = await request.app[AUTHENTICATOR].mint_token(
            body.ttl_seconds, server=AVATAR_SERVER, parent=request[CREDENTIAL]
        )
    except AuthError as err:
        raise auth_error(err) from err
    answer = SessionTokenData(data=SessionToken(token=token, expires_at=expires_at, scope=SPEECH_SCOPE))
    return web.json_response(answer.model_dump(), headers={"Cache-Control": "no-store"})
