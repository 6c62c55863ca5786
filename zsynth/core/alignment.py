"""Character alignment: when each character of a chunk's text is spoken, in integer milliseconds from the chunk start.

Source of the times, best first:

1. **Engine timing.** Piper reports how many samples each phoneme lasts (``[(phoneme, n_samples), ...]``, with ``^``
   for the leading pause, ``$`` for the trailing one and ``" "`` between words). When the text has as many words as
   the phoneme stream, each word gets exactly its phonemes' span, the space phoneme's time goes to the space
   character, a trailing punctuation phoneme's pause goes to the punctuation characters, and the letters share the
   rest evenly.
2. **Estimate.** Otherwise (no engine timing, or espeak expanded "$30" into more words than the text has) the
   spoken span is shared among the characters by weight: letters and digits 1, spaces 0.5, clause punctuation 2,
   sentence punctuation 3, anything else 0.5. Piper's leading/trailing pauses are still honoured when known.

Either way the result is a partition of the chunk: the first character starts at 0, every character starts where
the previous one ends (times are monotone), and the last one ends at the chunk's duration.

Encoders hold a little audio back (a resampler's filter delay, an MP3 frame), so the bytes sent with a chunk are
not exactly the chunk the engine made. :class:`Timeline` therefore places every character on the job's absolute
clock and cuts it into the spans of the audio actually sent with each chunk, the job's tail included (the worker's
side: :meth:`Timeline.add` and :meth:`Timeline.take`). A receiver of those chunks puts each one back at the offset
where its audio starts (:meth:`Timeline.place`, for the HTTP routes' times in seconds).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

_WORD: Final = re.compile(r"\S+|\s+")
_PUNCT_PHONEMES: Final = frozenset(",.;:!?…—–-\"'()")
_CLAUSE: Final = frozenset(",;:—–")
_SENTENCE: Final = frozenset(".!?…")
_TRAILING_PUNCT: Final = ",.;:!?…—–-\"'()”’"


@dataclass(frozen=True, slots=True)
class CharAlignment:
    """Characters of a chunk with their start times and durations in integer ms, relative to the chunk."""

    chars: list[str]
    start_ms: list[int]
    dur_ms: list[int]

    def to_meta(self) -> dict[str, Any]:
        """Compact JSON form carried in a chunk event's meta."""
        return {"chars": self.chars, "start_ms": self.start_ms, "dur_ms": self.dur_ms}

    @classmethod
    def from_meta(cls, meta: Any) -> CharAlignment | None:
        """Inverse of :meth:`to_meta`; None when the chunk carries no alignment."""
        if not isinstance(meta, dict):
            return None
        return cls(list(meta["chars"]), [int(v) for v in meta["start_ms"]], [int(v) for v in meta["dur_ms"]])

    @property
    def end_ms(self) -> int:
        """Where the last character ends (the chunk's duration in ms)."""
        return self.start_ms[-1] + self.dur_ms[-1] if self.chars else 0

    def websocket(self) -> dict[str, list[Any]]:
        """The stream-input shape: ``chars``, ``charStartTimesMs``, ``charDurationsMs``."""
        return {"chars": self.chars, "charStartTimesMs": self.start_ms, "charDurationsMs": self.dur_ms}


def _weight(char: str) -> float:
    if char.isalnum():
        return 1.0
    if char.isspace():
        return 0.5
    if char in _SENTENCE:
        return 3.0
    if char in _CLAUSE:
        return 2.0
    return 0.5


def _spread(chars: str, begin: float, end: float, weights: Sequence[float] | None = None) -> list[float]:
    """Boundaries (len(chars)+1 of them, in samples) sharing [begin, end] among ``chars`` by weight."""
    w = list(weights) if weights is not None else [1.0] * len(chars)
    total = sum(w) or 1.0
    bounds = [begin]
    acc = 0.0
    for value in w:
        acc += value
        bounds.append(begin + (end - begin) * acc / total)
    bounds[-1] = end
    return bounds


def _phoneme_words(timing: Sequence[tuple[str, int]]) -> tuple[float, float, list[tuple[float, float, float]]]:
    """Split engine timing into (lead, trail, words); each word is (start, end, samples of trailing punctuation)."""
    lead = trail = 0.0
    words: list[tuple[float, float, float]] = []
    current: list[tuple[str, float, float]] = []

    def close() -> None:
        if current:
            punct = 0.0
            for phoneme, start, end in reversed(current):
                if phoneme not in _PUNCT_PHONEMES:
                    break
                punct += end - start
            words.append((current[0][1], current[-1][2], punct))
            current.clear()

    pos = 0.0
    for phoneme, samples in timing:
        start, pos = pos, pos + samples
        if phoneme == "^" and not words and not current:
            lead += samples
        elif phoneme == "$":
            close()
            trail += samples
        elif phoneme == " ":
            close()
        else:
            current.append((phoneme, start, pos))
    close()
    return lead, trail, words


def _from_timing(text: str, timing: Sequence[tuple[str, int]], total: float) -> list[float] | None:
    """Character boundaries from the engine's phoneme timing, or None when the words do not line up."""
    _, _, words = _phoneme_words(timing)
    tokens = _WORD.findall(text)
    if not words or sum(1 for t in tokens if not t.isspace()) != len(words):
        return None
    bounds: list[float] = []
    index = 0
    for token in tokens:
        if token.isspace():
            # A space runs from the end of the previous word to the start of the next (the space phoneme's time).
            begin = words[index - 1][1] if index > 0 else 0.0
            bounds.extend(_spread(token, begin, words[index][0] if index < len(words) else total)[:-1])
            continue
        start, end, punct = words[index]
        split = end - punct
        if index == 0:
            start = 0.0  # the leading pause belongs to the first character, so the chunk is covered from 0
        if index == len(words) - 1:
            end = total  # and the trailing pause to the last one
        core = token.rstrip(_TRAILING_PUNCT)
        tail = token[len(core) :]
        if core and tail and punct > 0:
            split = max(start, min(end, split))
            bounds.extend(_spread(core, start, split)[:-1])
            bounds.extend(_spread(tail, split, end)[:-1])
        else:
            bounds.extend(_spread(token, start, end)[:-1])
        index += 1
    bounds.append(total)
    return bounds


def _estimate(text: str, timing: Sequence[tuple[str, int]] | None, total: float) -> list[float]:
    """Weighted estimate over the spoken span (inside Piper's leading/trailing pauses when known)."""
    lead = trail = 0.0
    if timing:
        lead, trail, _ = _phoneme_words(timing)
    if lead + trail >= total:
        lead = trail = 0.0
    bounds = _spread(text, lead, total - trail, [_weight(c) for c in text])
    bounds[0] = 0.0
    bounds[-1] = total
    return bounds


def char_alignment(
    text: str, timing: Sequence[tuple[str, int]] | None, n_samples: int, sample_rate: int
) -> CharAlignment:
    """Align ``text`` (the chunk's text) to its ``n_samples`` of audio; see the module docstring for the method."""
    if not text or n_samples <= 0:
        return CharAlignment([], [], [])
    total = float(n_samples)
    bounds = None
    if timing and sum(n for _, n in timing) == n_samples:
        bounds = _from_timing(text, timing, total)
    if bounds is None:
        bounds = _estimate(text, timing, total)
    # Rounding the boundaries (not the durations) keeps the ms times monotone and summing to the chunk length.
    ms = [round(b * 1000.0 / sample_rate) for b in bounds]
    for i in range(1, len(ms)):
        ms[i] = max(ms[i], ms[i - 1])
    return CharAlignment(list(text), ms[:-1], [b - a for a, b in zip(ms, ms[1:], strict=False)])


class Timeline:
    """The characters of one job on an absolute clock (ms), handed out per span of encoded audio sent."""

    def __init__(self, continues: bool = False) -> None:
        """``continues``: this job speaks the rest of a text whose start an earlier job spoke, so the white space
        between the two is owed before its first character."""
        self._owes_space = continues
        self._chars: list[str] = []
        self._bounds: list[float] = [0.0]  # len(chars) + 1 absolute boundaries, monotone
        self._next = 0  # first character not handed out yet
        self._sent_ms = 0.0  # audio handed out so far
        #: Audio placed so far, in seconds (summed in seconds, as the offsets are).
        self.placed_s = 0.0

    def add(self, alignment: CharAlignment) -> None:
        """Append an engine chunk's alignment after the previous chunks."""
        if not alignment.chars:
            return
        base = self._bounds[-1]
        after_word = not self._chars[-1].isspace() if self._chars else self._owes_space
        if after_word and not alignment.chars[0].isspace():
            # The engine drops the white space between sentences (and between the parts of a text split over
            # jobs); put one back (zero length), so the characters spell the text with its white space collapsed.
            self._chars.append(" ")
            self._bounds.append(base)
        for char, start, dur in zip(alignment.chars, alignment.start_ms, alignment.dur_ms, strict=True):
            self._chars.append(char)
            self._bounds[-1] = max(self._bounds[-1], base + start)
            self._bounds.append(base + start + dur)

    def take(self, duration_ms: float, final: bool = False) -> tuple[CharAlignment | None, float]:
        """The characters that start within the next ``duration_ms`` of audio (all the rest when ``final``).

        The first one is re-based to start at 0 and the last one ends with the span, so each span is covered.
        Returns them (None when no character starts in the span) and the span's length in ms.
        """
        begin = self._sent_ms
        end = max(begin + duration_ms, self._bounds[-1]) if final else begin + duration_ms
        self._sent_ms = end
        first = self._next
        last = len(self._chars) if final else first
        while last < len(self._chars) and self._bounds[last] < end:
            last += 1
        self._next = last
        if last == first or end <= begin:
            return None, end - begin
        rel = [0.0, *(self._bounds[i] - begin for i in range(first + 1, last)), end - begin]
        ms = [round(v) for v in rel]
        for i in range(1, len(ms)):
            ms[i] = max(ms[i], ms[i - 1])
        durations = [b - a for a, b in zip(ms, ms[1:], strict=False)]
        return CharAlignment(self._chars[first:last], ms[:-1], durations), end - begin

    def place(self, meta: Mapping[str, Any]) -> tuple[float, CharAlignment] | None:
        """A received chunk (its event ``meta``): its alignment, already cut to the chunk by :meth:`take`, at the
        offset in seconds where its audio starts (None without an alignment); the clock moves past its ``span_ms``."""
        offset = self.placed_s
        self.placed_s += float(meta.get("span_ms", 0.0)) / 1000.0
        alignment = CharAlignment.from_meta(meta.get("alignment"))
        if alignment is None:
            return None
        return offset, alignment


def join_chunks(parts: Sequence[tuple[float, CharAlignment]]) -> tuple[list[str], list[float], list[float]]:
    """Concatenate chunk alignments at their offsets (seconds) into absolute (chars, starts, ends) in seconds."""
    chars: list[str] = []
    starts: list[float] = []
    ends: list[float] = []
    for offset, part in parts:
        for char, start, dur in zip(part.chars, part.start_ms, part.dur_ms, strict=True):
            chars.append(char)
            starts.append(round(offset + start / 1000.0, 3))
            ends.append(round(offset + (start + dur) / 1000.0, 3))
    return chars, starts, ends
