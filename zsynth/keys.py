"""Every typed key stored on the application, declared once."""

from __future__ import annotations

import collections
import weakref
from typing import TYPE_CHECKING, Final

from aiohttp import web
from redis.asyncio import Redis

from .auth import Authenticator, Credential
from .config import Settings
from .dictionaries.store import DictionaryStore
from .dispatch import Dispatcher
from .metrics import Metrics
from .voices import VoiceCatalog
from .voices.library import VoiceLibrary

if TYPE_CHECKING:
    from .avatar.renderers import AvatarRenderer
    from .avatar.sessions import SessionRegistry
    from .demo.backend import DemoBackend

SETTINGS: Final = web.AppKey("settings", Settings)
REDIS: Final = web.AppKey("redis", Redis)
DISPATCHER: Final = web.AppKey("dispatcher", Dispatcher)
AUTHENTICATOR: Final = web.AppKey("authenticator", Authenticator)
METRICS: Final = web.AppKey("metrics", Metrics)
VOICES: Final = web.AppKey("voices", VoiceCatalog)
DICTIONARIES: Final = web.AppKey("dictionaries", DictionaryStore)  # pronunciation dictionaries, shared by every front
VOICE_LIBRARY: Final = web.AppKey("voice_library", VoiceLibrary)  # the voice library across boxes
# Open realtime sockets, closed with GOING_AWAY when the front shuts down.
WS_REGISTRY: Final = web.AppKey("ws_registry", weakref.WeakSet[web.WebSocketResponse])
# Open realtime sockets per credential fingerprint on this front (ZSYNTH_WS_MAX_SOCKETS_PER_CREDENTIAL).
WS_PER_CREDENTIAL: Final = web.AppKey("ws_per_credential", collections.Counter[str])
# Realtime sockets on this front that have not authenticated yet, under the key "" (ZSYNTH_WS_MAX_UNAUTHENTICATED).
WS_UNAUTHENTICATED: Final = web.AppKey("ws_unauthenticated", collections.Counter[str])

# Per-request values.
REQUEST_ID: Final = web.RequestKey("request_id", str)
CREDENTIAL: Final = web.RequestKey("credential", Credential)

# The avatar server (zsynth.avatar); its types are imported for type checking only, to keep imports acyclic.
AVATAR_SESSIONS: Final[web.AppKey[SessionRegistry]] = web.AppKey("avatar_sessions")
AVATARS: Final[web.AppKey[dict[str, AvatarRenderer]]] = web.AppKey("avatars")

# The demo server (zsynth.demo): the backend that holds the full key and mints the page's tokens.
DEMO_BACKEND: Final[web.AppKey[DemoBackend]] = web.AppKey("demo_backend")
