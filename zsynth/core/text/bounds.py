"""Output bounds per request: how much pause its break tags ask for, and how much audio its text stands for.

Both are read off the text as it will be spoken (markers in, :mod:`zsynth.core.text.marks`), before any job is
queued, so a request that would make an hour of audio (10,000 digits read one by one, a page of break tags) is
refused with a clear 400 instead of holding a worker for minutes. The audio estimate reads briskly
(:data:`CHARS_PER_SECOND`, faster than any engine here speaks), so it never refuses a text that fits; the worker
enforces a hard bound of twice the limit on the audio it really makes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .marks import MARK

# Characters per second of a brisk reader: Piper's joe voice speaks about 14 at its default speed.
CHARS_PER_SECOND: Final = 20.0


class OutputTooLong(ValueError):
    """A request whose pauses or audio pass the bounds; ``code`` and the message are safe to show."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class OutputEstimate:
    """What a prepared text asks of the engine."""

    pause_s: float
    audio_s: float


def estimate(text: str) -> OutputEstimate:
    """The pauses of ``text``'s break markers, and its audio: spoken characters at a brisk pace plus the pauses."""
    pause_ms = 0
    for match in MARK.finditer(text):
        if match.group(1) == "b":
            pause_ms += int(match.group(2) or "0")
    spoken = len(MARK.sub(" ", text).strip())
    pause_s = pause_ms / 1000
    return OutputEstimate(pause_s, spoken / CHARS_PER_SECOND + pause_s)


def check(text: str, max_pause_s: float, max_audio_s: float) -> OutputEstimate:
    """``text``'s estimate; OutputTooLong when its pauses or its audio pass the bounds."""
    found = estimate(text)
    if found.pause_s > max_pause_s:
        raise OutputTooLong(
            "pause_limit_exceeded",
            f"The break tags ask for {found.pause_s:g} s of pauses; at most {max_pause_s:g} s per request.",
        )
    if found.audio_s > max_audio_s:
        raise OutputTooLong(
            "audio_limit_exceeded",
            f"This text stands for about {found.audio_s:.0f} s of audio as it will be spoken (numbers and symbols "
            f"read out in words); at most {max_audio_s:g} s per request. Split it into several requests.",
        )
    return found
