"""Every typed key stored on the application, declared once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from aiohttp import web
from redis.asyncio import Redis

from .config import Settings

if TYPE_CHECKING:
    from .dispatch import Dispatcher

SETTINGS: Final = web.AppKey("settings", Settings)
REDIS: Final = web.AppKey("redis", Redis)
DISPATCHER: Final = web.AppKey("dispatcher", "Dispatcher")

# Per-request values.
REQUEST_ID: Final = web.RequestKey("request_id", str)
