"""The box's live avatar sessions: creation under the per-box limit, lookup, and closing them all."""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import Final

from aiohttp import web

from zsynth.avatar.errors import AvatarError
from zsynth.avatar.renderers.base import AvatarRenderer
from zsynth.avatar.session import AvatarSession
from zsynth.core import workspaces
from zsynth.core.codes import ApiCode
from zsynth.core.config import Settings
from zsynth.services.synthesis import SynthesisService

logger = logging.getLogger(__name__)


class SessionRegistry:
    """Live sessions by id; at most ``settings.avatar.max_sessions`` at once."""

    def __init__(self, settings: Settings, synthesis: SynthesisService) -> None:
        self.settings = settings
        self.synthesis = synthesis  # the server's one service: clones, the swap-out voice, the owners' shares
        self.sessions: dict[str, AvatarSession] = {}

    def create(
        self,
        renderer: AvatarRenderer,
        voice_id: str,
        owner: str,
        *,
        per_owner: bool,
        share_owner: str | None = None,
        workspace: str = workspaces.DEFAULT,
    ) -> AvatarSession:
        """A new session, counted against the limits at once (before signalling awaits anything).

        With ``per_owner`` (a session token, which a browser holds), the owner may hold at most
        ``avatar_sessions_per_token`` live sessions, so one token cannot take every slot by reconnecting.
        ``share_owner``: whose share of the queue the session's speech counts against (a token's minting key);
        ``workspace``: the one its speech acts in (whose clones it may speak: the credential's).
        """
        own_limit = self.settings.avatar.sessions_per_token
        if per_owner and sum(1 for s in self.sessions.values() if s.owner == owner) >= own_limit:
            raise AvatarError(
                429,
                ApiCode.TOO_MANY_SESSIONS,
                f"This token already holds {own_limit} live avatar sessions; close one (or wait for it to end).",
                {"Retry-After": "5"},
            )
        limit = self.settings.avatar.max_sessions
        if len(self.sessions) >= limit:
            raise AvatarError(
                503,
                ApiCode.CAPACITY,
                f"This server already runs its limit of {limit} live avatar sessions; try again later.",
                {"Retry-After": "5"},
            )
        session_id = secrets.token_hex(12)
        session = AvatarSession(
            session_id,
            self.settings,
            self.synthesis,
            renderer,
            voice_id,
            owner,
            on_closed=self._forget,
            share_owner=share_owner,
            workspace=workspace,
        )
        self.sessions[session_id] = session
        logger.info("session %s: created (avatar %s, %d live)", session_id, renderer.info.avatar_id, len(self.sessions))
        return session

    def get(self, session_id: str, workspace: str) -> AvatarSession:
        """The live session with this id in ``workspace`` (the caller's), or a 404 error: another workspace's session
        is one that does not exist."""
        session = self.sessions.get(session_id)
        if session is None or session.closing or session.workspace != workspace:
            raise AvatarError(404, ApiCode.SESSION_NOT_FOUND, f"No live session with id '{session_id}'.")
        return session

    def listed(self, workspace: str) -> list[AvatarSession]:
        """The live sessions of ``workspace``."""
        return [s for s in self.sessions.values() if s.workspace == workspace]

    def _forget(self, session: AvatarSession) -> None:
        self.sessions.pop(session.session_id, None)

    async def close_all(self, reason: str) -> None:
        """Close every session (server shutdown)."""
        await asyncio.gather(*(s.close(reason) for s in list(self.sessions.values())), return_exceptions=True)


AVATAR_SESSIONS: Final = web.AppKey("avatar_sessions", SessionRegistry)
