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

Bounds (the socket faces the internet): text with no white space is released once ``max_word_chars`` of it are
buffered, so the buffer never holds more than that plus one schedule step; no segment is longer than
``max_segment_chars`` (ZSYNTH_MAX_TEXT_CHARS: longer ones are cut, at white space where there is some); and the
work per message is proportional to that message: only the new text is scanned for white space.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

DEFAULT_SCHEDULE: Final = (120, 160, 250, 290)
SCHEDULE_MIN: Final = 50
SCHEDULE_MAX: Final = 500
# Upstream ignores try_trigger_generation below about 50 characters; so does zsynth.
TRIGGER_MIN_CHARS: Final = 50
# Defaults of ZSYNTH_WS_MAX_WORD_CHARS and ZSYNTH_MAX_TEXT_CHARS (the servers pass their settings in).
MAX_WORD_CHARS: Final = 1000
MAX_SEGMENT_CHARS: Final = 10_000
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

    def __init__(
        self,
        schedule: Sequence[int] = DEFAULT_SCHEDULE,
        auto_mode: bool = False,
        *,
        max_word_chars: int = MAX_WORD_CHARS,
        max_segment_chars: int = MAX_SEGMENT_CHARS,
    ) -> None:
        self.schedule = tuple(schedule) or DEFAULT_SCHEDULE
        self.auto_mode = auto_mode
        self.max_word_chars = max(1, max_word_chars)
        self.max_segment_chars = max(1, max_segment_chars)
        self._text = ""
        self._whole = 0  # index just past the buffer's last white space: everything before it is whole words
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
        before = len(self._text)
        self._text = join_messages(self._text, text)
        # Only the new text (and a space join_messages put in) can hold white space the buffer did not have.
        for i in range(len(self._text) - 1, before - 1, -1):
            if self._text[i].isspace():
                self._whole = i + 1
                break
        if flush:
            return self.drain()
        whole = self._whole
        if whole == 0:
            return self._release_long_word()
        # Thresholds count every buffered character (as upstream does); only the whole words are released.
        if len(self._text) >= self.threshold or (try_trigger and len(self._text) >= TRIGGER_MIN_CHARS):
            return [*self._release(whole), *self._release_long_word()]
        return []

    def drain(self) -> list[str]:
        """Everything buffered, as one segment (flush and end of input), cut where it is longer than a job."""
        return self._release(len(self._text))

    def clear(self) -> None:
        """Drop whatever is buffered (the context was closed)."""
        self._text = ""
        self._whole = 0

    def _release_long_word(self) -> list[str]:
        """Text with no white space at the word bound: released in pieces of ``max_word_chars``."""
        if self._whole or len(self._text) < self.max_word_chars:
            return []
        end = len(self._text) - len(self._text) % self.max_word_chars
        return self._release(end, self.max_word_chars)

    def _release(self, end: int, piece: int | None = None) -> list[str]:
        segment, self._text = self._text[:end], self._text[end:]
        self._whole = max(0, self._whole - end)
        return self._segment(segment, piece)

    def _segment(self, text: str, piece: int | None = None) -> list[str]:
        text = text.strip()
        if not text:
            return []
        self._released += 1
        return split_text(text, min(piece or self.max_segment_chars, self.max_segment_chars))


def split_text(text: str, limit: int) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters, cut at white space in each piece's second half if any."""
    pieces: list[str] = []
    start = 0
    while len(text) - start > limit:
        end = start + limit
        cut = end
        for i in range(end, start + limit // 2, -1):
            if text[i].isspace():
                cut = i
                break
        piece = text[start:cut].strip()
        if piece:
            pieces.append(piece)
        start = cut
    rest = text[start:].strip()
    if rest:
        pieces.append(rest)
    return pieces
