"""Every typed key stored on the application, declared once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from aiohttp import web
from redis.asyncio import Redis

from .auth import Authenticator, Credential
from .config import Settings
from .dispatch import Dispatcher

if TYPE_CHECKING:
    from .avatar.renderers import AvatarRenderer
    from .avatar.sessions import SessionRegistry

SETTINGS: Final = web.AppKey("settings", Settings)
REDIS: Final = web.AppKey("redis", Redis)
DISPATCHER: Final = web.AppKey("dispatcher", Dispatcher)
AUTHENTICATOR: Final = web.AppKey("authenticator", Authenticator)

# Per-request values.
REQUEST_ID: Final = web.RequestKey("request_id", str)
CREDENTIAL: Final = web.RequestKey("credential", Credential)

# The avatar server (zsynth.avatar); its types are imported for type checking only, to keep imports acyclic.
AVATAR_SESSIONS: Final[web.AppKey[SessionRegistry]] = web.AppKey("avatar_sessions")
AVATARS: Final[web.AppKey[dict[str, AvatarRenderer]]] = web.AppKey("avatars")
