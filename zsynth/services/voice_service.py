"""The voice use cases, for every transport: lookup, listing, cloning, edits, saved settings and removal.

The routes parse a request and shape the answer; what a change means is decided here: which voices may be edited or
removed (built-in voices are the engine's, the pinned swap-out voice serves unknown ids), the workspace rule (a caller
sees and changes only its own workspace's clones, :func:`~zsynth.services.voices.require_voice`; a built-in voice's
saved settings are every workspace's, so only the default workspace may change them), the reference clip's checks
and the library calls that make a change durable before it is answered.

Errors: :class:`VoiceMissing` (unknown, or another workspace's), :class:`StorageUnavailable` (the library's bucket did
not answer; nothing changed), :class:`ClipError` (a reference clip refused, with its code) and :class:`VoiceRefused`
(a change the rules forbid, with its code). The routes map each to the API's envelope.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from zsynth.core import workspaces
from zsynth.core.codes import ApiCode, CodedError
from zsynth.core.voices.clips import ADVICE, STORE_RATE, Clip, ClipError, decode_clips, encode_wav
from zsynth.core.voices.errors import StorageUnavailable, VoiceGone, VoiceMissing, not_found
from zsynth.core.voices.library import VoiceLibrary
from zsynth.core.voices.store import StoredVoice, reference_name, revision
from zsynth.services.keys import SETTINGS, VOICE_LIBRARY
from zsynth.services.voices import VOICES, VoiceCatalog, new_clone_meta, require_voice

__all__ = [
    "ADVICE",
    "ClipError",
    "StorageUnavailable",
    "StoredVoice",
    "VoiceMissing",
    "VoiceRefused",
    "VoiceService",
    "voice_service",
]


class VoiceRefused(CodedError):
    """A change the voice rules forbid (a built-in or the pinned swap-out voice); ``code`` says which rule."""


@dataclass(frozen=True, slots=True)
class Arriving:
    """The start-up is still catching up with the bucket: the clones it lists that this box has not fetched yet."""

    voice_ids: list[str]


class VoiceService:
    """The voice use cases over the catalog (what a workspace sees) and the library (where a change is made)."""

    def __init__(self, catalog: VoiceCatalog, library: VoiceLibrary | None, *, clip_limit: int) -> None:
        self.catalog = catalog
        self.library = library
        self.clip_limit = clip_limit

    def _library(self) -> VoiceLibrary:
        if self.library is None:
            raise RuntimeError("this server has no voice library: voices cannot be changed here")
        return self.library

    # ----- reading ---------------------------------------------------------------------------------------------------

    def listing(self, workspace: str) -> list[dict[str, Any]]:
        """Every voice ``workspace`` sees: the built-in voices first, then its clones, oldest first."""
        return self.catalog.all(workspace)

    def arriving(self, *, one_workspace: bool) -> Arriving | None:
        """While the start-up is still catching up with the bucket, the clones it lists that this box lacks (None once
        caught up). The bucket's listing names ids, not their workspaces, so the ids are given only on a server with
        one workspace (``one_workspace``): otherwise the list is empty, or it would name other workspaces' clones."""
        if self.library is None or not self.library.catching_up:
            return None
        return Arriving(sorted(self.library.arriving) if one_workspace else [])

    async def lookup(self, voice_id: str, workspace: str) -> dict[str, Any]:
        """The voice object of ``voice_id`` as ``workspace`` sees it; a cloned voice this box lacks is fetched from the
        library first (waiting at most ``ZSYNTH_VOICES_FETCH_WAIT``). :class:`VoiceMissing` when there is no such
        voice here or in the bucket (or the bucket holds it in a form no box takes, or it is another workspace's),
        :class:`StorageUnavailable` when the bucket does not answer; never the swap-out voice."""
        await require_voice(self.library, self.catalog, voice_id, workspace)
        voice = self.catalog.get(voice_id, workspace)
        if voice is None:
            raise VoiceMissing(voice_id, not_found(voice_id))
        return voice

    # ----- changes ---------------------------------------------------------------------------------------------------

    async def _reference(self, files: list[tuple[str, bytes]]) -> tuple[list[Clip], Any]:
        # In a thread: a minute of MP3 takes a while. Every file's header is read and the lengths summed before any
        # file is decoded, so clips over 60 s in total are refused for the cost of their headers.
        return await asyncio.to_thread(decode_clips, files, self.clip_limit)

    async def clone(
        self,
        name: str,
        description: str | None,
        labels: Mapping[str, str],
        files: list[tuple[str, bytes]],
        workspace: str,
    ) -> StoredVoice:
        """A new clone owned by ``workspace`` from its reference clips (checked, then joined into one reference),
        added to the library (the bucket first, when there is one)."""
        clips, pcm = await self._reference(files)
        samples, seconds = [clip.sample() for clip in clips], len(pcm) / STORE_RATE
        meta = new_clone_meta(name, description, labels, samples, seconds, workspace=workspace)
        return await self._library().add(meta, await asyncio.to_thread(encode_wav, pcm))

    async def check_editable(self, voice_id: str, workspace: str) -> None:
        """Refuse an edit of a built-in voice (their settings may be saved, :meth:`save_settings`), then look the
        voice up as ``workspace`` sees it."""
        if voice_id in self.catalog.builtins:
            raise VoiceRefused(
                ApiCode.VOICE_NOT_EDITABLE, f"{voice_id} is a built-in voice and cannot be renamed or edited."
            )
        await self.lookup(voice_id, workspace)

    async def edit(
        self, voice_id: str, workspace: str, changes: Mapping[str, Any], files: list[tuple[str, bytes]]
    ) -> list[str]:
        """Save ``changes`` (name, description, labels) over a clone's metadata; new ``files`` replace its reference
        (and so its conditioning on every box). Answers the names of the fields changed."""
        saved = dict(changes)
        reference: bytes | None = None
        if files:
            clips, pcm = await self._reference(files)
            saved["samples"] = [clip.sample() for clip in clips]
            saved["reference_seconds"] = round(len(pcm) / STORE_RATE, 3)
            reference = await asyncio.to_thread(encode_wav, pcm)
        await self._save_edit(voice_id, workspace, saved, reference)
        return sorted(saved)

    async def _save_edit(
        self, voice_id: str, workspace: str, changes: Mapping[str, Any], reference: bytes | None
    ) -> None:
        library = self._library()
        try:
            current = await library.current_meta(voice_id, workspace)
            rev = revision(current) + 1
            meta = {**current, **changes, "revision": rev}
            old_reference = reference_name(current)
            if reference is not None:
                meta["reference"] = f"reference-{rev}.wav"
            await library.edit(meta, reference, old_reference if reference is not None else None)
        except VoiceGone as err:
            raise VoiceMissing(voice_id, not_found(voice_id)) from err

    async def save_settings(
        self, voice_id: str, workspace: str, current: Mapping[str, Any], sent: Mapping[str, Any]
    ) -> bool:
        """Save ``sent`` over a voice's ``current`` settings; jobs for the voice start from them. A built-in voice's
        saved settings are every workspace's: only the default workspace may change them. Answers whether the voice
        is a built-in one."""
        saved = {**dict(current), **sent}
        builtin = voice_id in self.catalog.builtins
        if builtin and workspace != workspaces.DEFAULT:
            raise VoiceRefused(
                ApiCode.VOICE_NOT_EDITABLE,
                f"{voice_id} is a built-in voice shared by every workspace; only keys of the default workspace may "
                "save its settings. Send voice_settings with each request instead.",
            )
        if builtin:
            await self._library().save_builtin_settings(voice_id, saved)
        else:
            await self._save_edit(voice_id, workspace, {"settings": saved}, None)
        return builtin

    async def delete(self, voice_id: str, workspace: str) -> None:
        """Remove a clone of ``workspace`` on every box (the bucket keeps a tombstone). Built-in voices and the pinned
        swap-out voice (ZSYNTH_SWAPOUT_DEFAULT_VOICE) cannot be removed."""
        if voice_id in self.catalog.builtins:
            raise VoiceRefused(ApiCode.VOICE_NOT_DELETABLE, f"{voice_id} is a built-in voice and cannot be removed.")
        if voice_id == self.catalog.swapout_id:
            raise VoiceRefused(
                ApiCode.VOICE_NOT_DELETABLE,
                f"{voice_id} is the pinned swap-out voice (ZSYNTH_SWAPOUT_DEFAULT_VOICE).",
            )
        await self.lookup(voice_id, workspace)
        await self._library().remove(voice_id)


def voice_service(app: web.Application) -> VoiceService:
    """The voice service over an application's catalog and library (set by
    :func:`~zsynth.services.voice_library.voices_context`)."""
    return VoiceService(app[VOICES], app.get(VOICE_LIBRARY), clip_limit=app[SETTINGS].voices.clip_max_bytes)
