"""Every typed key stored on the application, declared once."""

from __future__ import annotations

import weakref
from typing import Final

from aiohttp import web
from redis.asyncio import Redis

from .auth import Authenticator, Credential
from .config import Settings
from .dispatch import Dispatcher

SETTINGS: Final = web.AppKey("settings", Settings)
REDIS: Final = web.AppKey("redis", Redis)
DISPATCHER: Final = web.AppKey("dispatcher", Dispatcher)
AUTHENTICATOR: Final = web.AppKey("authenticator", Authenticator)
# Open realtime sockets, closed with GOING_AWAY when the front shuts down.
WS_REGISTRY: Final = web.AppKey("ws_registry", weakref.WeakSet[web.WebSocketResponse])

# Per-request values.
REQUEST_ID: Final = web.RequestKey("request_id", str)
CREDENTIAL: Final = web.RequestKey("credential", Credential)
