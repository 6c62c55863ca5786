"""Text buffering for the realtime sockets: when buffered text becomes a segment to speak.

Rules (ElevenLabs ``chunk_length_schedule`` semantics):

* Text accumulates. The n-th segment is released once the buffer holds at least ``schedule[n]`` characters
  (the last entry repeats).
* ``try_trigger_generation`` releases the whole words early once at least :data:`TRIGGER_MIN_CHARS` are buffered.
* ``flush`` (and the end of input) releases everything, however short.
* ``auto_mode`` turns the schedule and all buffering off: every message is a segment of its own, spoken whole as
  it arrives (clients in this mode send whole sentences or phrases). Nothing is ever joined to the next message.

Without ``auto_mode`` a segment never ends inside a word: text after the last white space may be the start of a
word whose rest has not arrived yet, so it stays buffered until white space follows it or a flush forces it out.
Two messages are joined with the white space the client put between them; where it put none, a message that ends
a sentence (``.``, ``!``, ``?``, ``…`` after a letter, optionally closed by a quote or bracket) and a message that
starts a new one (a capital letter or an opening quote) are joined with one space, so "morning." and "Is there"
become "morning. Is there", never "morning.Is there". Decimals and lower-case continuations ("3." + "14",
"example." + "com") are joined as sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

DEFAULT_SCHEDULE: Final = (120, 160, 250, 290)
SCHEDULE_MIN: Final = 50
SCHEDULE_MAX: Final = 500
# Upstream ignores try_trigger_generation below about 50 characters; so does zsynth.
TRIGGER_MIN_CHARS: Final = 50
SENTENCE_END: Final = frozenset(".!?…。！？")
CLOSERS: Final = frozenset("\"')]}”’»")
OPENERS: Final = frozenset("\"'([{“‘«¿¡")


def ends_sentence(text: str) -> bool:
    """``text`` ends with sentence punctuation after a letter (closing quotes and brackets allowed after it)."""
    end = len(text)
    while end > 0 and text[end - 1] in CLOSERS:
        end -= 1
    if end < 2 or text[end - 1] not in SENTENCE_END:
        return False
    before = text[end - 2]
    return before.isalpha() or before in SENTENCE_END or before in CLOSERS


def starts_sentence(text: str) -> bool:
    """``text`` starts like a new sentence: a capital letter or an opening quote or bracket."""
    return bool(text) and (text[0].isupper() or text[0] in OPENERS)


def join_messages(before: str, after: str) -> str:
    """Two messages' text as one: a space between them when a sentence ends and the next starts without one."""
    if before and after and not before[-1].isspace() and not after[0].isspace():
        if ends_sentence(before) and starts_sentence(after):
            return before + " " + after
    return before + after


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
        """Append one message's ``text``; return the segments that are ready now (possibly none)."""
        if self.auto_mode:
            # Each message is its own segment; anything still buffered (there is none in this mode) goes first.
            return [*self.drain(), *self._segment(text)]
        self._text = join_messages(self._text, text)
        if flush:
            return self.drain()
        whole = self._whole_words_end()
        if whole == 0:
            return []
        # Thresholds count every buffered character (as upstream does); only the whole words are released.
        if len(self._text) >= self.threshold:
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
        return self._segment(segment)

    def _segment(self, text: str) -> list[str]:
        if not text.strip():
            return []
        self._released += 1
        return [text.strip()]
