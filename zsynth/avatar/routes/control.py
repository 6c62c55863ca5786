"""The control WebSocket, ``GET /control/{session_id}``: speak, interrupt, keep alive and stop one session.

Client to server, JSON text messages with a ``type``:
``{"type": "speak", "text": ..., "id"?: ..., "voice_id"?: ...}``, ``{"type": "interrupt"}``,
``{"type": "keep_alive"}`` (or ``ping``), ``{"type": "stop"}``.
Server to client: ``session.state``, ``session.ready``, ``speak.accepted``, ``avatar.start_talking``,
``avatar.stop_talking`` (``duration_ms``, ``interrupted``), ``speak.cancelled``, ``pong``, ``error`` (``code``,
``message``); each carries a ``seq``. Closing the socket ends the session.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import WSMsgType, web

from zsynth.avatar.access import watch_session
from zsynth.avatar.bodies import avatar_error
from zsynth.avatar.errors import AvatarError
from zsynth.avatar.messages import ControlMessage, SpeakCommand
from zsynth.avatar.session import AvatarSession
from zsynth.avatar.sessions import AVATAR_SESSIONS
from zsynth.core.codes import ApiCode
from zsynth.kit import jsonbody
from zsynth.kit.endpoints import MAX_TEXT_CHARS, Access, Endpoints, validate
from zsynth.services.auth import CREDENTIAL
from zsynth.services.keys import SETTINGS

logger = logging.getLogger(__name__)

routes = Endpoints()


def _client_id(message: dict[str, Any]) -> str | None:
    value = message.get("id")
    return None if value is None else str(value)[:128]


def _speak(session: AvatarSession, message: dict[str, Any], max_chars: int) -> None:
    client_id = _client_id(message)
    try:
        command = validate(SpeakCommand, message, avatar_error, {MAX_TEXT_CHARS: max_chars})
    except AvatarError as err:
        # Every refusal carries the command's id, so a client can match it to what it sent.
        session.emit("error", code=err.code, message=err.message, id=client_id)
        return
    session.speak(command.text, client_id, command.voice_id)


async def handle_message(session: AvatarSession, raw: str, max_chars: int) -> bool:
    """Apply one command; False when the session should end."""
    session.touch()
    try:
        # Strict and total: deep nesting or a 5000-digit number is a refused message, not the end of the session.
        message = jsonbody.loads(raw)
    except jsonbody.BadJson:
        message = None
    try:
        if not isinstance(message, dict):
            raise AvatarError(400, ApiCode.INVALID_MESSAGE, "Send JSON objects with a string 'type'.")
        kind = validate(ControlMessage, message, avatar_error).type
    except AvatarError as err:
        session.emit("error", code=err.code, message=err.message)
        return True
    if kind == "speak":
        _speak(session, message, max_chars)
    elif kind == "interrupt":
        count = session.interrupt()
        logger.info("session %s: interrupt (%d tasks)", session.session_id, count)
    elif kind in ("keep_alive", "ping"):
        session.emit("pong")
    elif kind == "stop":
        return False
    else:
        session.emit("error", code=ApiCode.UNKNOWN_COMMAND, message=f"Unknown command type '{kind[:40]}'.")
    return True


@routes.get("/control/{session_id}", access=Access.TOKEN, websocket=True)
async def control(request: web.Request) -> web.WebSocketResponse:
    """Attach the control socket to a session and serve its commands until either side closes."""
    credential = request[CREDENTIAL]
    # Another workspace's session is one that does not exist, even to a full key.
    session = request.app[AVATAR_SESSIONS].get(request.match_info["session_id"], credential.workspace)
    if not credential.is_full and credential.fingerprint != session.owner:
        # A session token drives only the session it created; say "not found" rather than reveal others.
        raise AvatarError(404, ApiCode.SESSION_NOT_FOUND, f"No live session with id '{session.session_id}'.")
    if session.ws is not None:
        raise AvatarError(409, ApiCode.ALREADY_ATTACHED, "This session already has a control socket.")
    ws = web.WebSocketResponse(heartbeat=30.0, max_msg_size=256 * 1024)
    await ws.prepare(request)
    session.attach(ws)
    if credential.fingerprint != session.owner:  # the owner's credential is re-checked since the session began
        watch_session(request, credential, session)
    reason = "control_closed"
    max_chars = request.app[SETTINGS].limits.max_text_chars
    try:
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                if not await handle_message(session, msg.data, max_chars):
                    reason = "stopped"
                    break
            elif msg.type == WSMsgType.BINARY:
                session.emit("error", code=ApiCode.INVALID_MESSAGE, message="Binary messages are not supported.")
    finally:
        # Shielded inside close(): a dropped connection cancels this handler, never the teardown.
        await session.close(reason)
    return ws
