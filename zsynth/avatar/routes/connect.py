"""``POST /connect``: WebRTC signalling. The browser offers, the server answers in one round trip (no trickle)."""

from __future__ import annotations

import logging
from typing import Any, Literal

import pydantic
from aiohttp import web

from zsynth.avatar.access import watch_session
from zsynth.avatar.bodies import documented
from zsynth.avatar.errors import AvatarError
from zsynth.avatar.renderers.base import AVATARS
from zsynth.avatar.sdp import OfferLimits, check_offer
from zsynth.avatar.sessions import AVATAR_SESSIONS
from zsynth.core.codes import ApiCode
from zsynth.kit.endpoints import Access, Endpoints, refusal
from zsynth.services.auth import CREDENTIAL
from zsynth.services.keys import SETTINGS
from zsynth.services.synthesis import queue_owner

logger = logging.getLogger(__name__)

routes = Endpoints()


class ConnectRequest(pydantic.BaseModel):
    """The browser's SDP offer, and what the new session streams."""

    sdp: str = pydantic.Field(
        description=(
            "The browser's offer: it must receive one audio and one video, be at most ZSYNTH_AVATAR_MAX_SDP_BYTES "
            "(32 KiB) and list at most ZSYNTH_AVATAR_MAX_REMOTE_CANDIDATES (16) ICE candidates."
        )
    )
    type: Literal["offer"] = "offer"
    avatar_id: str | None = pydantic.Field(
        default=None, pattern=r"\S", description="The avatar to stream (default: the first of GET /v1/avatars)."
    )
    voice_id: str | None = pydantic.Field(
        default=None, pattern=r"\S", description="The voice that speaks (default: ZSYNTH_AVATAR_VOICE_ID)."
    )

    @pydantic.model_validator(mode="before")
    @classmethod
    def _offer(cls, data: Any) -> Any:
        sdp, kind = data.get("sdp"), data.get("type", "offer")
        if not isinstance(sdp, str) or kind != "offer":
            raise refusal(ApiCode.INVALID_SDP, 'Send {"sdp": <offer SDP>, "type": "offer"}.', 400)
        return data  # its size, media and candidates are checked by sdp.check_offer, in that order

    @pydantic.field_validator("avatar_id", "voice_id", mode="before")
    @classmethod
    def _name(cls, value: object, info: pydantic.ValidationInfo) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise refusal(ApiCode.INVALID_PARAMETERS, f"Field '{info.field_name}' must be a non-empty string.", 400)
        return value.strip()


class ConnectAnswer(pydantic.BaseModel):
    """The SDP answer and the new session."""

    model_config = pydantic.ConfigDict(extra="forbid")

    sdp: str = pydantic.Field(description="The answer, with every ICE candidate (no trickle).")
    type: Literal["answer"]
    session_id: str
    avatar_id: str
    voice_id: str
    control_url: str = pydantic.Field(
        pattern="^/control/", description="The control WebSocket of this session (same credential)."
    )


@routes.post(
    "/connect",
    access=Access.TOKEN,
    body=ConnectRequest,
    operationId="connect",
    tags=["sessions"],
    summary="Answer an SDP offer with a new session streaming an avatar.",
    responses={"200": documented("The SDP answer and the new session.", ConnectAnswer)},
    errors=(400, 404, 413, 500),
)
async def connect(request: web.Request, body: ConnectRequest) -> web.Response:
    """Answer an SDP offer with a new session streaming the chosen avatar."""
    credential = request[CREDENTIAL]
    settings = request.app[SETTINGS]
    # Before anything else: aiortc's cost grows with the square of the candidates listed.
    checked = check_offer(body.sdp, OfferLimits.from_settings(settings))
    avatars = request.app[AVATARS]
    avatar_id = body.avatar_id or next(iter(avatars))
    renderer = avatars.get(avatar_id)
    if renderer is None:
        raise AvatarError(404, ApiCode.AVATAR_NOT_FOUND, f"No avatar '{avatar_id}'; GET /v1/avatars lists them.")
    voice_id = body.voice_id or settings.avatar.voice_id
    registry = request.app[AVATAR_SESSIONS]
    session = registry.create(
        renderer,
        voice_id,
        credential.fingerprint,
        per_owner=not credential.is_full,
        share_owner=queue_owner(credential),
        workspace=credential.workspace,
    )
    watch_session(request, credential, session)
    if checked.dropped:
        logger.info(
            "session %s: %d offered ICE candidates dropped (not public), %d kept",
            session.session_id,
            checked.dropped,
            checked.kept,
        )
    try:
        sdp = await session.answer(checked.sdp)
    except BaseException:
        await session.close(ApiCode.SIGNALLING_FAILED)
        raise
    answer = ConnectAnswer(
        sdp=sdp,
        type="answer",
        session_id=session.session_id,
        avatar_id=avatar_id,
        voice_id=voice_id,
        control_url=f"/control/{session.session_id}",
    )
    return web.json_response(answer.model_dump())
