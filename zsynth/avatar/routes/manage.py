"""Management routes (full key only): the avatars on offer, and the live sessions, which can be closed."""

from __future__ import annotations

from typing import Literal

import pydantic
from aiohttp import web

from zsynth.avatar.bodies import documented
from zsynth.avatar.renderers.base import AVATARS
from zsynth.avatar.sessions import AVATAR_SESSIONS
from zsynth.kit.endpoints import Access, Endpoints
from zsynth.services.auth import CREDENTIAL, workspace_of

routes = Endpoints()

_SESSION_ID = {"session_id": "A live session's id (from POST /connect)."}


class Avatar(pydantic.BaseModel):
    """An avatar this server can stream."""

    model_config = pydantic.ConfigDict(extra="forbid")

    avatar_id: str
    name: str
    renderer: str
    width: int = pydantic.Field(ge=1)
    height: int = pydantic.Field(ge=1)
    fps: int = pydantic.Field(ge=1)
    description: str


class AvatarList(pydantic.BaseModel):
    """The avatars on offer."""

    data: list[Avatar]


class Session(pydantic.BaseModel):
    """A live session."""

    model_config = pydantic.ConfigDict(extra="forbid")

    session_id: str
    avatar_id: str
    voice_id: str
    state: Literal["connecting", "connected", "closing"]
    created_at: int = pydantic.Field(description="Unix time the session was created.")
    control_attached: bool
    talking_task_id: str | None
    queued_tasks: int = pydantic.Field(ge=0)
    idle_s: float = pydantic.Field(ge=0)
    audio_frames_sent: int = pydantic.Field(ge=0)
    video_frames_sent: int = pydantic.Field(ge=0)


class SessionList(pydantic.BaseModel):
    """The live sessions of this box and its limit."""

    model_config = pydantic.ConfigDict(extra="forbid")

    data: list[Session]
    limit: int = pydantic.Field(description="ZSYNTH_AVATAR_MAX_SESSIONS of this box.")


class SessionData(pydantic.BaseModel):
    """One live session."""

    data: Session


class ClosedSession(pydantic.BaseModel):
    """A session closed by the API."""

    model_config = pydantic.ConfigDict(extra="forbid")

    session_id: str
    closed: Literal[True]


class ClosedSessionData(pydantic.BaseModel):
    """The answer of ``DELETE /v1/sessions/{session_id}``."""

    data: ClosedSession


@routes.get(
    "/v1/avatars",
    access=Access.FULL,
    operationId="list_avatars",
    tags=["avatars"],
    summary="Every avatar this server can stream.",
    responses={"200": documented("The avatars.", AvatarList)},
)
async def list_avatars(request: web.Request) -> web.Response:
    """Every avatar this server can stream."""
    return web.json_response({"data": [r.info.as_json() for r in request.app[AVATARS].values()]})


@routes.get(
    "/v1/sessions",
    access=Access.FULL,
    operationId="list_sessions",
    tags=["sessions"],
    summary="Live sessions on this box and the limit.",
    responses={"200": documented("The live sessions of this box.", SessionList)},
)
async def list_sessions(request: web.Request) -> web.Response:
    """Live sessions on this box and the limit."""
    registry = request.app[AVATAR_SESSIONS]
    sessions = [s.describe() for s in registry.listed(workspace_of(request.get(CREDENTIAL)))]
    return web.json_response({"data": sessions, "limit": registry.settings.avatar.max_sessions})


@routes.get(
    "/v1/sessions/{session_id}",
    access=Access.FULL,
    operationId="get_session",
    tags=["sessions"],
    summary="One live session.",
    path_params=_SESSION_ID,
    responses={"200": documented("The session.", SessionData)},
    errors=(404,),
)
async def get_session(request: web.Request) -> web.Response:
    """One live session."""
    session = request.app[AVATAR_SESSIONS].get(request.match_info["session_id"], workspace_of(request.get(CREDENTIAL)))
    return web.json_response({"data": session.describe()})


@routes.delete(
    "/v1/sessions/{session_id}",
    access=Access.FULL,
    operationId="close_session",
    tags=["sessions"],
    summary="Close a live session: its stream ends and its control socket is closed.",
    path_params=_SESSION_ID,
    responses={"200": documented("The session is closed.", ClosedSessionData)},
    errors=(404,),
)
async def close_session(request: web.Request) -> web.Response:
    """Close a live session: its stream ends and its control socket is closed."""
    session = request.app[AVATAR_SESSIONS].get(request.match_info["session_id"], workspace_of(request.get(CREDENTIAL)))
    await session.close("closed_by_api")
    answer = ClosedSessionData(data=ClosedSession(session_id=session.session_id, closed=True))
    return web.json_response(answer.model_dump())
