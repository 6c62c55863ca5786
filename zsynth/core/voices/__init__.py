"""Cloned voices as the kernel holds them: the on-disk store (:mod:`.store`), the bucket that is the truth
(:mod:`.bucket`), the library that keeps a box in step with it through Redis announcements (:mod:`.library`) and
the reference clip checks (:mod:`.clips`). The front's catalog of built-in and cloned voices is
:mod:`zsynth.services.voices`.
"""

from __future__ import annotations

from zsynth.core.voices.store import StoredVoice, VoiceStore, is_clone_id

__all__ = ["StoredVoice", "VoiceStore", "is_clone_id"]
