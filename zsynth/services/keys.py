"""The application's own keys: settings, Redis and per-request values. A leaf: it imports none of the services.

Each service declares its key next to its class (``dispatch.DISPATCHER``, ``auth.AUTHENTICATOR``,
``auth.CREDENTIAL``, ``metrics.METRICS``, ``voices.catalog.VOICES``, ``voices.library.VOICE_LIBRARY``,
``dictionaries.store.DICTIONARIES``, ``avatar.sessions.AVATAR_SESSIONS``, ``avatar.renderers.base.AVATARS``,
``demo.backend.DEMO_BACKEND``), so importing a key never pulls in a service the importer does not use.
"""

from __future__ import annotations

import collections
import weakref
from typing import Final

from aiohttp import web
from redis.asyncio import Redis

from zsynth.core.config import Settings
from zsynth.core.redis_link import MasterWatch
from zsynth.core.text.dictionaries.store import DictionaryStore
from zsynth.core.tracing import Tracing
from zsynth.core.voices.library import VoiceLibrary

SETTINGS: Final = web.AppKey("settings", Settings)
REDIS: Final = web.AppKey("redis", Redis)
# Which Redis master this server uses, and the promotions it saw (zsynth.core.redis_link).
REDIS_MASTER: Final = web.AppKey("redis_master", MasterWatch)
# Open realtime sockets, closed with GOING_AWAY when the front shuts down.
WS_REGISTRY: Final = web.AppKey("ws_registry", weakref.WeakSet[web.WebSocketResponse])
# Open realtime sockets per credential owner on this front, a token counting as the key that minted it
# (ZSYNTH_WS_MAX_SOCKETS_PER_CREDENTIAL).
WS_PER_CREDENTIAL: Final = web.AppKey("ws_per_credential", collections.Counter[str])
# Realtime sockets on this front that have not authenticated yet: all of them under the key "" (ZSYNTH_WS_MAX_
# UNAUTHENTICATED), and those of each client address under that address (ZSYNTH_WS_MAX_UNAUTHENTICATED_PER_ADDRESS).
WS_UNAUTHENTICATED: Final = web.AppKey("ws_unauthenticated", collections.Counter[str])

# This process's OpenTelemetry tracing, present only when ZSYNTH_OTLP_ENDPOINT is set (zsynth.core.tracing).
TRACING: Final = web.AppKey("tracing", Tracing)

# Per-request values.
REQUEST_ID: Final = web.RequestKey("request_id", str)
# The request's trace id (x-trace-id): the caller's traceparent's, else the request id.
TRACE_ID: Final = web.RequestKey("trace_id", str)

# The kernel's services, under the keys the fronts find them by (the kernel itself does not import aiohttp).
VOICE_LIBRARY: Final = web.AppKey("voice_library", VoiceLibrary)
DICTIONARIES: Final = web.AppKey("dictionaries", DictionaryStore)
