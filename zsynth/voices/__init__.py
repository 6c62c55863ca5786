"""Voices: the on-disk store of clones, the catalog with built-in voices and the swap-out rule, and the voice library
shared by several boxes (``.library``: the bucket in ``.bucket`` is the truth, Redis carries the announcements).

Importing this package pulls in aiohttp's web module (the catalog's app key) but not aioboto3; import ``.library`` or
``.bucket`` for that. ``.lifecycle`` opens the speech front's catalog and library.
"""

from __future__ import annotations

from .catalog import DEFAULT_SETTINGS, VoiceCatalog, VoiceConfigError, builtin_voices
from .store import StoredVoice, VoiceStore, is_clone_id

__all__ = [
    "DEFAULT_SETTINGS",
    "StoredVoice",
    "VoiceCatalog",
    "VoiceConfigError",
    "VoiceStore",
    "builtin_voices",
    "is_clone_id",
]
