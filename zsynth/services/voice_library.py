"""The speech front's voice library lifecycle: :func:`voices_context` opens the store, the catalog and the library.

The app factory registers it (``zsynth.speech.routes.setup_services``); the voice routes, the synthesis service and the
realtime sockets read what it sets: ``app[VOICES]`` (the catalog) and ``app[VOICE_LIBRARY]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Literal

from aiohttp import web

from zsynth.core import protocol
from zsynth.core.supervise import Supervisor
from zsynth.core.voices.library import VoiceLibrary
from zsynth.core.voices.store import VoiceStore
from zsynth.services.keys import REDIS, SETTINGS, VOICE_LIBRARY
from zsynth.services.metrics import METRICS
from zsynth.services.voices import VOICES, VoiceCatalog, VoiceConfigError

logger = logging.getLogger(__name__)


async def voices_context(app: web.Application) -> AsyncIterator[None]:
    """The speech front's voice library: it announces the box and reconciles what its API changed (role ``front``)."""
    async with _opened(app, "front"):
        yield


async def follower_voices_context(app: web.Application) -> AsyncIterator[None]:
    """The avatar server's voice library: it only follows (role ``worker``), so its sessions speak clones too."""
    async with _opened(app, "worker"):
        yield


@contextlib.asynccontextmanager
async def _opened(app: web.Application, role: Literal["front", "worker"]) -> AsyncIterator[None]:
    """Open the store and the voice library (catching up with the bucket and the log), check the swap-out pin.

    A swap-out pin that names no voice (:class:`VoiceConfigError`) is logged as critical and fails the start-up.
    Needs ``app[REDIS]`` (the ``redis_client`` context before it) and ``app[METRICS]``.
    """
    settings = app[SETTINGS]
    store = VoiceStore(settings.voices_dir)
    await asyncio.to_thread(store.ensure)
    catalog = VoiceCatalog(store, settings.engine, settings.voices.swapout_default_voice)

    async def count_failure() -> None:
        await app[REDIS].incr(protocol.VOICE_MIRROR_FAILURES)

    library = VoiceLibrary.from_settings(
        settings,
        store,
        role=role,
        on_failure=count_failure,
        supervisor=Supervisor(on_restart=app[METRICS].count_restart),
    )
    await library.start()
    try:
        catalog.check_swapout()
    except VoiceConfigError as err:
        logger.critical("%s", err)
        await library.close()
        raise
    app[VOICES] = catalog
    app[VOICE_LIBRARY] = library
    try:
        yield
    finally:
        await library.close()
