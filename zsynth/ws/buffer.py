"""Text buffering for the realtime sockets: when buffered text becomes a segment to speak.

Rules (ElevenLabs ``chunk_length_schedule`` semantics):

* Text accumulates. The n-th segment is released once the buffer holds at least ``schedule[n]`` characters
  (the last entry repeats).
* ``try_trigger_generation`` releases the whole words early once at least :data:`TRIGGER_MIN_CHARS` are buffered.
* ``flush`` (and the end of input) releases everything, however short.
* ``auto_mode`` turns the schedule off: every message's whole words are released at once.

A segment never ends inside a word: text after the last white space may be the start of a word whose rest has
not arrived yet, so it stays buffered until white space follows it or a flush forces it out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

DEFAULT_SCHEDULE: Final = (120, 160, 250, 290)
SCHEDULE_MIN: Final = 50
SCHEDULE_MAX: Final = 500
# Upstream ignores try_trigger_generation below about 50 characters; so does zsynth.
TRIGGER_MIN_CHARS: Final = 50


class ScheduleError(ValueError):
    """A chunk_length_schedule that is not a list of integers in 50..500."""


def parse_schedule(value: object) -> tuple[int, ...]:
    """Validate a client's ``generation_config.chunk_length_schedule``; None means the default."""
    if value is None:
        return DEFAULT_SCHEDULE
    if not isinstance(value, list) or not value:
        raise ScheduleError("chunk_length_schedule must be a non-empty list of integers.")
    schedule: list[int] = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int | float) or int(item) != item:
            raise ScheduleError("chunk_length_schedule must be a non-empty list of integers.")
        if not SCHEDULE_MIN <= item <= SCHEDULE_MAX:
            raise ScheduleError(f"Each chunk_length_schedule entry must lie in {SCHEDULE_MIN}..{SCHEDULE_MAX}.")
        schedule.append(int(item))
    return tuple(schedule)


class TextBuffer:
    """Accumulates a context's text and hands out segments (strings to speak, in order)."""

    def __init__(self, schedule: Sequence[int] = DEFAULT_SCHEDULE, auto_mode: bool = False) -> None:
        self.schedule = tuple(schedule) or DEFAULT_SCHEDULE
        self.auto_mode = auto_mode
        self._text = ""
        self._released = 0  # segments released by the schedule so far (index into it)

    def __len__(self) -> int:
        return len(self._text)

    @property
    def threshold(self) -> int:
        """Characters the next scheduled segment waits for."""
        return self.schedule[min(self._released, len(self.schedule) - 1)]

    def add(self, text: str, *, try_trigger: bool = False, flush: bool = False) -> list[str]:
        """Append ``text``; return the segments that are ready now (possibly none)."""
        self._text += text
        if flush:
            return self.drain()
        whole = self._whole_words_end()
        if whole == 0:
            return []
        # Thresholds count every buffered character (as upstream does); only the whole words are released.
        if self.auto_mode or len(self._text) >= self.threshold:
            return self._release(whole)
        if try_trigger and len(self._text) >= TRIGGER_MIN_CHARS:
            return self._release(whole)
        return []

    def drain(self) -> list[str]:
        """Everything buffered, as one segment (flush and end of input)."""
        return self._release(len(self._text))

    def clear(self) -> None:
        """Drop whatever is buffered (the context was closed)."""
        self._text = ""

    def _whole_words_end(self) -> int:
        """Index just past the last white space: everything before it is whole words."""
        for i in range(len(self._text) - 1, -1, -1):
            if self._text[i].isspace():
                return i + 1
        return 0

    def _release(self, end: int) -> list[str]:
        segment, self._text = self._text[:end], self._text[end:]
        if not segment.strip():
            return []
        self._released += 1
        return [segment.strip()]
