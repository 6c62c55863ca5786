"""What the voice library raises: the bucket did not answer, a voice is gone, a caller's voice id cannot be used."""

from __future__ import annotations


class StorageUnavailable(RuntimeError):
    """The bucket could not be reached; nothing was changed. Try again later."""


class VoiceGone(LookupError):
    """The voice is not in the library (never was, or was removed)."""


class VoiceMissing(LookupError):
    """A cloned voice a caller asked for that this box neither has nor can fetch: answered 404 ``voice_not_found``
    (with ``message``), never spoken by another voice."""

    def __init__(self, voice_id: str, message: str) -> None:
        super().__init__(message)
        self.voice_id = voice_id
        self.message = message


def not_found(voice_id: str) -> str:
    """The message of a voice id the caller cannot use: unknown, and another workspace's, alike."""
    return f"A voice with the voice_id {voice_id} was not found."
