"""The speech front's voice library lifecycle: :func:`voices_context` opens the store, the catalog and the library.

The app factory registers it (``zsynth.speech.routes.setup_services``); the voice routes, the synthesis service and the
realtime sockets read what it sets: ``app[VOICES]`` (the catalog) and ``app[VOICE_LIBRARY]``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from aiohttp import web

from zsynth.core import protocol
from zsynth.core.aws import client_config
from zsynth.core.supervise import Supervisor
from zsynth.core.voices.bucket import VoiceBucket
from zsynth.core.voices.library import VoiceLibrary
from zsynth.core.voices.store import VoiceStore
from zsynth.services.keys import REDIS, SETTINGS, VOICE_LIBRARY
from zsynth.services.metrics import METRICS
from zsynth.services.voices import VOICES, VoiceCatalog, VoiceConfigError

logger = logging.getLogger(__name__)


async def voices_context(app: web.Application) -> AsyncIterator[None]:
    """Open the store and the voice library (catching up with the bucket and the log), check the swap-out pin.

    A swap-out pin that names no voice (:class:`VoiceConfigError`) is logged as critical and fails the start-up.
    Needs ``app[REDIS]`` (the ``redis_client`` context before it) and ``app[METRICS]``.
    """
    settings = app[SETTINGS]
    store = VoiceStore(settings.voices_dir)
    await asyncio.to_thread(store.ensure)
    catalog = VoiceCatalog(store, settings.engine, settings.swapout_default_voice)

    async def count_failure() -> None:
        await app[REDIS].incr(protocol.VOICE_MIRROR_FAILURES)

    bucket = (
        VoiceBucket(
            settings.voices_bucket,
            settings.voices_prefix,
            client_config(settings),
            clip_max_bytes=settings.voice_clip_max_bytes,
        )
        if settings.voices_bucket
        else None
    )
    library = VoiceLibrary(
        store,
        settings.redis_url,
        bucket,
        role="front",
        fetch_wait_s=settings.voices_fetch_wait_s,
        resync_s=settings.voices_resync_s,
        on_failure=count_failure,
        start_wait_s=settings.voices_start_wait_s,
        supervisor=Supervisor(on_restart=app[METRICS].count_restart),
        missing_ttl_s=settings.voices_missing_ttl_s,
        missing_max=settings.voices_missing_max,
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
    yield
    await library.close()
