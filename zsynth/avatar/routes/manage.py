"""Management routes (full key only): the avatars on offer, and the live sessions, which can be closed."""

from __future__ import annotations

from aiohttp import web

from ..access import authorize
from ..renderers.base import AVATARS
from ..sessions import AVATAR_SESSIONS


async def list_avatars(request: web.Request) -> web.Response:
    """Every avatar this server can stream."""
    await authorize(request, stream_route=False)
    return web.json_response({"data": [r.info.as_json() for r in request.app[AVATARS].values()]})


async def list_sessions(request: web.Request) -> web.Response:
    """Live sessions on this box and the limit."""
    await authorize(request, stream_route=False)
    registry = request.app[AVATAR_SESSIONS]
    sessions = [s.describe() for s in registry.sessions.values()]
    return web.json_response({"data": sessions, "limit": registry.settings.avatar_max_sessions})


async def get_session(request: web.Request) -> web.Response:
    """One live session."""
    await authorize(request, stream_route=False)
    session = request.app[AVATAR_SESSIONS].get(request.match_info["session_id"])
    return web.json_response({"data": session.describe()})


async def close_session(request: web.Request) -> web.Response:
    """Close a live session: its stream ends and its control socket is closed."""
    await authorize(request, stream_route=False)
    session = request.app[AVATAR_SESSIONS].get(request.match_info["session_id"])
    await session.close("closed_by_api")
    return web.json_response({"data": {"session_id": session.session_id, "closed": True}})


def setup(app: web.Application) -> None:
    """Register the management routes."""
    app.router.add_get("/v1/avatars", list_avatars)
    app.router.add_get("/v1/sessions", list_sessions)
    app.router.add_get("/v1/sessions/{session_id}", get_session)
    app.router.add_delete("/v1/sessions/{session_id}", close_session)
