"""A worker's part in the voice library: keep the box's voice cache current, and find each job's voice or refuse.

The worker runs a :class:`~zsynth.core.voices.library.VoiceLibrary` in its event loop: announcements of new, edited and
removed voices are applied to the box's disk and make the engine forget what it kept about the voice. The engine
thread asks :meth:`WorkerVoices.spec` for a job's voice; a cloned voice missing from the disk is fetched from the
bucket (at most ``ZSYNTH_VOICES_FETCH_WAIT``), and one that cannot be had fails the job with
:class:`VoiceUnavailable`, as does one whose reference clip fails the upload checks (read from its header: channels,
rate, length), so no engine ever decodes a clip an upload could not have made. Another voice is never substituted:
the swap-out voice is the front's decision, made only for ids that are neither clone ids nor built-in ids.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter as CountBy

from zsynth.core.codes import CodedError
from zsynth.core.config import Settings
from zsynth.core.protocol import ErrorCode
from zsynth.core.voices import StoredVoice, VoiceStore, is_clone_id
from zsynth.core.voices.bucket import VoiceRefused
from zsynth.core.voices.clips import ADVICE, ClipError, clip_header
from zsynth.core.voices.library import StorageUnavailable, VoiceLibrary

from .engines import Engine, VoiceSpec

logger = logging.getLogger(__name__)


class VoiceUnavailable(CodedError, RuntimeError):
    """A job's voice cannot be loaded; ``code`` (an :class:`~zsynth.core.protocol.ErrorCode`) is the error code its
    client gets."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(code, message)
        self.code: ErrorCode = code


class WorkerVoices:
    """The voices of one worker: the box's store, the library that keeps it current, and the engine to tell."""

    def __init__(self, settings: Settings, engine: Engine) -> None:
        self.settings = settings
        self.store = VoiceStore(settings.voices_dir)
        self.library = VoiceLibrary.from_settings(settings, self.store, role="worker", on_change=engine.forget_voice)
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Voices jobs asked for, by result (builtin, hit, fetched, missing): the worker's metrics read them.
        self.lookups: CountBy[str] = CountBy()

    async def start(self) -> None:
        """Catch up with the library and follow its announcements (in this event loop)."""
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self.store.ensure)
        await self.library.start()

    async def close(self) -> None:
        """Stop following."""
        await self.library.close()

    def spec(self, voice_id: str) -> VoiceSpec:
        """In the engine thread: the job's voice with its saved settings, or VoiceUnavailable."""
        if not is_clone_id(voice_id):
            self.lookups["builtin"] += 1
            return VoiceSpec(voice_id, saved_settings=self.store.builtin_settings(voice_id)[1])
        stored = self.store.get(voice_id)
        if stored is None:
            try:
                stored = self._fetch(voice_id)
            except VoiceUnavailable:
                self.lookups["missing"] += 1
                raise
            self.lookups["fetched"] += 1
        else:
            self.lookups["hit"] += 1
        self._check_clip(stored)
        return VoiceSpec(voice_id, str(stored.path), stored.meta, dict(stored.meta.get("settings") or {}))

    @staticmethod
    def _check_clip(stored: StoredVoice) -> None:
        """The upload checks on the clip an engine is about to read (its header only; a bomb is never decoded)."""
        try:
            clip_header(stored.reference, stored.reference.name)
        except (ClipError, ValueError) as err:
            reason = err.message.removesuffix(ADVICE).strip(" .") if isinstance(err, ClipError) else str(err)
            raise VoiceUnavailable(
                ErrorCode.VOICE_NOT_FOUND,
                f"The voice {stored.voice_id} cannot be used: its reference clip is refused ({reason}); "
                "no other voice was used.",
            ) from err

    def _fetch(self, voice_id: str) -> StoredVoice:
        if self._loop is None:
            raise VoiceUnavailable(ErrorCode.VOICE_NOT_FOUND, f"The voice {voice_id} is not on this box.")
        future = asyncio.run_coroutine_threadsafe(self.library.ensure(voice_id), self._loop)
        try:
            found = future.result(timeout=self.settings.voices.fetch_wait_s + 5.0)
        except VoiceRefused as err:
            raise VoiceUnavailable(
                ErrorCode.VOICE_NOT_FOUND,
                f"The voice {voice_id} cannot be used: the voice library holds it in a form that is refused ({err}); "
                "no other voice was used.",
            ) from err
        except (StorageUnavailable, TimeoutError) as err:
            future.cancel()
            # The storage's own words name its endpoint, bucket and object keys: the log gets them, the caller not.
            logger.warning("voice %s: the voice library's storage did not answer: %s", voice_id, err)
            raise VoiceUnavailable(
                ErrorCode.VOICE_STORAGE_UNAVAILABLE,
                f"The voice {voice_id} is not on this box and the voice library's storage did not answer; "
                "no other voice was used. Try again shortly.",
            ) from err
        stored = self.store.get(voice_id) if found else None
        if stored is None:
            raise VoiceUnavailable(
                ErrorCode.VOICE_NOT_FOUND,
                f"The voice {voice_id} is not in the voice library (removed, or never cloned); "
                "no other voice was used.",
            )
        return stored
