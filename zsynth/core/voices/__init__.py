"""Cloned voices as the kernel holds them: the on-disk store (:mod:`.store`), the bucket that is the truth
(:mod:`.bucket`), the library that keeps a box in step with it (:mod:`.library`, over :mod:`.mirror`, this disk
against the bucket; :mod:`.announce`, the Redis announcements and the catch-up; :mod:`.catalogue`, owner-aware lookup
and fetching on demand; :mod:`.errors`) and the reference clip checks (:mod:`.clips`). The front's catalog of
built-in and cloned voices is :mod:`zsynth.services.voices`, its voice use cases :mod:`zsynth.services.voice_service`.
"""

from __future__ import annotations

from zsynth.core.voices.store import StoredVoice, VoiceStore, is_clone_id

__all__ = ["StoredVoice", "VoiceStore", "is_clone_id"]
