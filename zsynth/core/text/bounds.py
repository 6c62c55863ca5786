"""Output bounds per request: how much pause its break tags ask for, and how much audio its text stands for.

Both are read off the text as the text stage leaves it (markers in, :mod:`zsynth.core.text.marks`), before any job
is queued, so a request that would make an hour of audio (10,000 digits read one by one, a page of break tags) is
refused with a clear 400 instead of holding a worker for minutes. The text stage (:mod:`zsynth.core.text.prepare`)
checks every job's text, and a transport that cuts one request into several jobs (a dialogue's inputs, a socket
message, a Wyoming stream) has the request's texts checked together first.

The estimate counts the text in words, whatever the normalization setting: a text the stage did not normalize is
read through the normalization rules for the count (:func:`zsynth.core.text.normalize.normalize_text`), so numbers
and symbols count as the words they are read as, and a digit run read one by one counts one word per digit. Without
this, ``"9" * 10_000`` under ``auto`` or ``off`` counted as 10,000 characters (400 s, under the bound), where the
same text normalized counts as 50,000. The words are read at :data:`CHARS_PER_SECOND`, faster than any engine here
speaks ordinary text, so the estimate never refuses ordinary text that fits; the worker enforces a hard bound of
twice the limit on the audio it really makes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from zsynth.core.codes import ApiCode, CodedError

from .marks import MARK
from .normalize import normalize_text

# Characters of words per second of a brisk reader. Piper's joe voice (measured on normalized text: prose, numbers
# and currency, digits read one by one) reads 17.6-19.8 of them a second at its default speed and at most 22.1 at
# its fastest (speed 1.2): 25 keeps a margin over both.
CHARS_PER_SECOND: Final = 25.0


class OutputTooLong(CodedError, ValueError):
    """A request whose pauses or audio pass the bounds; ``code`` and the message are safe to show."""


@dataclass(frozen=True, slots=True)
class OutputLimits:
    """The bounds of one request: ZSYNTH_MAX_PAUSE and ZSYNTH_MAX_AUDIO, in seconds."""

    max_pause_s: float
    max_audio_s: float


#: No bounds: for the tools that measure the text stage itself (``scripts/bench_text*.py``), never for a request.
UNBOUNDED: Final = OutputLimits(math.inf, math.inf)


@dataclass(frozen=True, slots=True)
class OutputEstimate:
    """What a prepared text asks of the engine (estimates of several texts add up)."""

    pause_s: float = 0.0
    audio_s: float = 0.0

    def __add__(self, other: OutputEstimate) -> OutputEstimate:
        return OutputEstimate(self.pause_s + other.pause_s, self.audio_s + other.audio_s)


def estimate(text: str, *, normalized: bool) -> OutputEstimate:
    """The pauses of ``text``'s break markers, and its audio: its words at a brisk pace plus the pauses.

    ``normalized``: the text stage normalized ``text`` already; otherwise it is read through the normalization
    rules for the count, so its numbers and symbols count as their words (the engine, espeak for Piper, reads them
    out too) and a long digit run as one word per digit.
    """
    pause_ms = 0
    for match in MARK.finditer(text):
        if match.group(1) == "b":
            pause_ms += int(match.group(2) or "0")
    spoken = MARK.sub(" ", text)
    if not normalized:
        spoken = normalize_text(spoken)
    pause_s = pause_ms / 1000
    return OutputEstimate(pause_s, len(spoken.strip()) / CHARS_PER_SECOND + pause_s)


def check(found: OutputEstimate, limits: OutputLimits) -> OutputEstimate:
    """``found``; OutputTooLong when its pauses or its audio pass ``limits``."""
    if found.pause_s > limits.max_pause_s:
        raise OutputTooLong(
            ApiCode.PAUSE_LIMIT_EXCEEDED,
            f"The break tags ask for {found.pause_s:g} s of pauses; at most {limits.max_pause_s:g} s per request.",
        )
    if found.audio_s > limits.max_audio_s:
        raise OutputTooLong(
            ApiCode.AUDIO_LIMIT_EXCEEDED,
            f"This text stands for about {found.audio_s:.0f} s of audio as it will be spoken (numbers and symbols "
            f"read out in words, digits read one by one as one word each); at most {limits.max_audio_s:g} s per "
            "request. Split it into several requests.",
        )
    return found
