"""``POST /connect``: WebRTC signalling. The browser offers, the server answers in one round trip (no trickle)."""

from __future__ import annotations

import logging
import re

from aiohttp import web

from ...keys import SETTINGS
from ..access import authorize, watch_session
from ..errors import AvatarError
from ..renderers.base import AVATARS
from ..sessions import AVATAR_SESSIONS
from .tokens import read_json_object

logger = logging.getLogger(__name__)

_MEDIA = re.compile(r"^m=(audio|video) ", re.MULTILINE)


def _optional_str(body: dict[str, object], name: str) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise AvatarError(400, "invalid_parameters", f"Field '{name}' must be a non-empty string.")
    return value.strip()


async def connect(request: web.Request) -> web.Response:
    """Answer an SDP offer with a new session streaming the chosen avatar."""
    credential = await authorize(request, stream_route=True)
    body = await read_json_object(request, required=True)
    sdp, kind = body.get("sdp"), body.get("type", "offer")
    if not isinstance(sdp, str) or kind != "offer":
        raise AvatarError(400, "invalid_sdp", 'Send {"sdp": <offer SDP>, "type": "offer"}.')
    if set(_MEDIA.findall(sdp)) != {"audio", "video"}:
        raise AvatarError(400, "invalid_sdp", "The offer must receive one audio and one video track.")
    avatars = request.app[AVATARS]
    avatar_id = _optional_str(body, "avatar_id") or next(iter(avatars))
    renderer = avatars.get(avatar_id)
    if renderer is None:
        raise AvatarError(404, "avatar_not_found", f"No avatar '{avatar_id}'; GET /v1/avatars lists them.")
    voice_id = _optional_str(body, "voice_id") or request.app[SETTINGS].avatar_voice_id
    registry = request.app[AVATAR_SESSIONS]
    session = registry.create(renderer, voice_id, credential.fingerprint, per_owner=not credential.is_full)
    watch_session(request, credential, session)
    try:
        answer = await session.answer(sdp)
    except BaseException:
        await session.close("signalling_failed")
        raise
    return web.json_response(
        {
            "sdp": answer,
            "type": "answer",
            "session_id": session.session_id,
            "avatar_id": avatar_id,
            "voice_id": voice_id,
            "control_url": f"/control/{session.session_id}",
        }
    )


def setup(app: web.Application) -> None:
    """Register the signalling route."""
    app.router.add_post("/connect", connect)
