"""Every voice the API knows, built-in and cloned, in the ElevenLabs ``Voice`` shape; lookup, the swap-out rule and
the workspace rule (:mod:`zsynth.core.workspaces`): a caller sees the built-in voices, the swap-out voice and its own
workspace's clones, and another workspace's clone is to it an id that never existed. Every listing goes through
:meth:`VoiceCatalog.all` and :meth:`VoiceCatalog.get`, every voice id a caller names through :func:`require_voice`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final

from aiohttp import web

from zsynth.core import workspaces
from zsynth.core.engines import BuiltinVoice, profile
from zsynth.core.voices.errors import VoiceMissing, not_found
from zsynth.core.voices.library import VoiceLibrary
from zsynth.core.voices.store import StoredVoice, VoiceStore, is_clone_id, new_voice_id

DEFAULT_SETTINGS: Final[Mapping[str, Any]] = {
    "stability": 0.5,
    "similarity_boost": 0.75,
    "style": 0.0,
    "use_speaker_boost": True,
    "speed": 1.0,
}


class VoiceConfigError(RuntimeError):
    """The voice configuration cannot work (a pinned swap-out voice that does not exist); start-up stops."""


def builtin_voices(engine: str) -> tuple[BuiltinVoice, ...]:
    """The built-in voices of ``engine`` (its profile's)."""
    return profile(engine).builtin_voices


def _voice_object(
    voice_id: str,
    name: str,
    category: str,
    *,
    description: str | None,
    labels: Mapping[str, str],
    created_at_unix: int,
    samples: list[dict[str, Any]] | None,
    settings: Mapping[str, Any],
) -> dict[str, Any]:
    """A voice with every field of the SDK's ``Voice`` model, required or not, so strict clients parse it."""
    return {
        "voice_id": voice_id,
        "name": name,
        "samples": samples,
        "category": category,
        "fine_tuning": {
            "is_allowed_to_fine_tune": False,
            "state": {},
            "verification_failures": [],
            "verification_attempts_count": 0,
            "manual_verification_requested": False,
        },
        "labels": dict(labels),
        "description": description,
        "preview_url": None,
        "available_for_tiers": [],
        "settings": dict(settings),
        "sharing": None,
        "high_quality_base_model_ids": [],
        "verified_languages": [
            {
                "language": "en",
                "model_id": "zsynth",
                "accent": labels.get("accent"),
                "locale": None,
                "preview_url": None,
            }
        ],
        "collection_ids": None,
        "safety_control": None,
        "voice_verification": {
            "requires_verification": False,
            "is_verified": False,
            "verification_failures": [],
            "verification_attempts_count": 0,
        },
        "permission_on_resource": None,
        "is_owner": category == "cloned",
        "is_legacy": False,
        "is_mixed": False,
        "favorited_at_unix": None,
        "created_at_unix": created_at_unix,
        "is_bookmarked": None,
        "recording_quality": None,
        "labelling_status": None,
        "recording_quality_reason": None,
    }


def builtin_object(voice: BuiltinVoice, saved: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The API object of a built-in voice (created_at_unix 0: it ships with the engine), with its saved settings."""
    return _voice_object(
        voice.voice_id,
        voice.name,
        "premade",
        description=voice.description,
        labels=voice.labels,
        created_at_unix=0,
        samples=None,
        settings={**DEFAULT_SETTINGS, **dict(saved or {})},
    )


def clone_object(voice: StoredVoice) -> dict[str, Any]:
    """The API object of a cloned voice, from its stored metadata."""
    meta = voice.meta
    return _voice_object(
        voice.voice_id,
        str(meta.get("name", voice.voice_id)),
        "cloned",
        description=meta.get("description"),
        labels={str(k): str(v) for k, v in dict(meta.get("labels") or {}).items()},
        created_at_unix=int(meta.get("created_at_unix", 0)),
        samples=list(meta.get("samples") or []),
        settings={**DEFAULT_SETTINGS, **dict(meta.get("settings") or {})},
    )


def new_clone_meta(
    name: str,
    description: str | None,
    labels: Mapping[str, str],
    samples: list[dict[str, Any]],
    seconds: float,
    *,
    workspace: str,
) -> dict[str, Any]:
    """The meta.json of a fresh clone, owned by ``workspace``."""
    return {
        "format": 1,
        "voice_id": new_voice_id(),
        workspaces.FIELD: workspace,
        "name": name,
        "description": description,
        "labels": dict(labels),
        "created_at_unix": int(time.time()),
        "samples": samples,
        "settings": dict(DEFAULT_SETTINGS),
        "revision": 0,
        "reference": "reference.wav",
        "reference_seconds": round(seconds, 3),
    }


class VoiceCatalog:
    """Built-in voices of the running engine plus the clones in the store."""

    def __init__(self, store: VoiceStore, engine: str, swapout_id: str | None = None) -> None:
        self.store = store
        self.builtins = {v.voice_id: v for v in builtin_voices(engine)}
        self.swapout_id = swapout_id

    def check_swapout(self) -> None:
        """Fail start-up when ZSYNTH_SWAPOUT_DEFAULT_VOICE names a voice this box does not have."""
        if self.swapout_id is not None and not self.exists(self.swapout_id):
            known = ", ".join(list(self.builtins) + sorted(self.store.all()))
            raise VoiceConfigError(
                f"ZSYNTH_SWAPOUT_DEFAULT_VOICE={self.swapout_id!r} is not a voice on this box "
                f"(known voices: {known}); set it to one of them or unset it to use the first built-in voice."
            )

    def exists(self, voice_id: str) -> bool:
        """True for a built-in voice or a stored clone (from the store's cached listing: this runs per request)."""
        return voice_id in self.builtins or self.store.has(voice_id)

    def _sees(self, voice: StoredVoice, workspace: str | None) -> bool:
        # None: every workspace's (operators' tools); the pinned swap-out voice is every workspace's.
        return workspace is None or voice.voice_id == self.swapout_id or workspaces.visible(voice.meta, workspace)

    def get(self, voice_id: str, workspace: str) -> dict[str, Any] | None:
        """One voice object as a caller in ``workspace`` sees it, or None (unknown, or another workspace's clone)."""
        builtin = self.builtins.get(voice_id)
        if builtin is not None:
            return builtin_object(builtin, self.store.builtin_settings(voice_id)[1])
        stored = self.store.get(voice_id)
        return clone_object(stored) if stored is not None and self._sees(stored, workspace) else None

    def all(self, workspace: str | None) -> list[dict[str, Any]]:
        """Built-in voices first, then the clones ``workspace`` sees (None: every clone), oldest first."""
        clones = sorted(
            (v for v in self.store.all().values() if self._sees(v, workspace)),
            key=lambda v: (int(v.meta.get("created_at_unix", 0)), v.voice_id),
        )
        builtins = [builtin_object(v, self.store.builtin_settings(v.voice_id)[1]) for v in self.builtins.values()]
        return builtins + [clone_object(v) for v in clones]

    def owner(self, voice_id: str) -> str | None:
        """The workspace of a clone on this box (None: not a clone here)."""
        stored = self.store.get(voice_id)
        return workspaces.owner_of(stored.meta) if stored is not None else None

    def clone_count(self, workspace: str) -> int:
        """How many cloned voices of ``workspace`` this box has."""
        return sum(1 for v in self.store.all().values() if workspaces.visible(v.meta, workspace))

    def swapout(self) -> str:
        """The voice that serves unknown ids: the pinned one while it exists, else the first built-in."""
        if self.swapout_id is not None and self.exists(self.swapout_id):
            return self.swapout_id
        return next(iter(self.builtins))

    def resolve(self, voice_id: str) -> str:
        """The voice id synthesis will actually use for ``voice_id``.

        A cloned voice's id is never swapped: the synthesis service fetches it from the library before the job is
        queued (:meth:`~zsynth.core.voices.library.VoiceLibrary.require`) and a worker that still cannot load it fails
        the job. Only ids that are neither
        clone ids nor built-in ids get the swap-out voice.
        """
        if voice_id in self.builtins or is_clone_id(voice_id):
            return voice_id
        return self.swapout()  # the routes log both ids with the job


async def require_voice(
    library: VoiceLibrary | None, catalog: VoiceCatalog | None, voice_id: str, workspace: str
) -> None:
    """The one check of a voice id a caller acting in ``workspace`` named, for every transport (the voice routes,
    synthesis over HTTP, the sockets, Wyoming, dialogue, Vapi, the avatar): a clone this box lacks is fetched, and
    :class:`~zsynth.core.voices.library.VoiceMissing` is raised for an unknown clone id and for another workspace's
    clone alike (the pinned swap-out voice is every workspace's). Built-in ids and other ids pass (the catalog gives
    unknown ones the swap-out voice)."""
    shared = catalog.swapout_id if catalog is not None else None
    if library is not None:
        await library.require(voice_id, workspace, shared=shared)
    elif catalog is not None and voice_id != shared and catalog.owner(voice_id) not in (None, workspace):
        raise VoiceMissing(voice_id, not_found(voice_id))  # no library (a bare service): the same rule


VOICES: Final = web.AppKey("voices", VoiceCatalog)
