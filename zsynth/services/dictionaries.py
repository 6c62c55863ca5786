"""The speech front's dictionary store lifecycle: :func:`dictionaries_context` sets ``app[DICTIONARIES]``.

The app factory registers it (``zsynth.speech.routes.setup_services``); the dictionary routes, the synthesis service and
the realtime sockets read the store it sets.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from zsynth.core.aws import client_config
from zsynth.core.text.dictionaries.store import BucketBackend, DictionaryStore, DirectoryBackend
from zsynth.services.keys import DICTIONARIES, SETTINGS


async def dictionaries_context(app: web.Application) -> AsyncIterator[None]:
    """The dictionary store: the voices' bucket when set, else the data directory."""
    settings = app[SETTINGS]
    backend: BucketBackend | DirectoryBackend
    if settings.voices.bucket:
        backend = BucketBackend(settings.voices.bucket, settings.voices.dictionaries_prefix, client_config(settings))
        await backend.open()
    else:
        backend = DirectoryBackend(settings.data_dir / "dictionaries")
    app[DICTIONARIES] = DictionaryStore(backend, settings.voices.dictionary_cache_bytes)
    yield
    await app[DICTIONARIES].close()
