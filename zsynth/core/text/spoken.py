"""What a job speaks, built from the caller's text, and the way back from its alignment to the caller's characters.

A :class:`Spoken` is the caller's text cut into segments that cover it in order. A segment either keeps its
characters (spoken as written) or replaces them (a number read out, an alias, a pause marker). Rewrites only ever
touch segments still as written, so a dictionary's alias is never normalized again and a break tag never parsed twice.

The worker aligns the text it was given (the spoken text). :class:`AlignmentMapper` walks those characters against
the spoken text and gives each of the caller's characters a time: a kept character its own, the characters of a
replaced segment an even share of the span their replacement was spoken in.

A space put into a long word (:meth:`Spoken.cut_words`) is a segment of its own that covers none of the caller's
characters, so the characters on either side of it keep their own times.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from zsynth.core.text.sentences import word_cuts

# Characters never spoken: the markers' private-use range (a caller cannot forge a marker) and control characters
# other than white space (espeak refuses a NUL outright).
_UNSPOKEN = re.compile("[\ue000-\ue001\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# How far ahead in the spoken text a character the worker reports is looked for before it counts as a substitution.
_LOOKAHEAD = 48


class Segment(NamedTuple):
    """Characters ``[start, end)`` of the caller's text and what is spoken for them (a tuple: a long text makes
    thousands, and a tuple is made several times faster than a frozen dataclass)."""

    start: int
    end: int
    out: str
    kept: bool


class Spoken:
    """The caller's text as segments; :attr:`text` is what the engine is given."""

    def __init__(self, original: str) -> None:
        self.original = original
        clean = _UNSPOKEN.sub(" ", original)
        self.segments = [Segment(0, len(original), clean, True)] if original else []

    @property
    def text(self) -> str:
        """The text the engine speaks."""
        return "".join(segment.out for segment in self.segments)

    @property
    def changed(self) -> bool:
        """Whether anything was replaced."""
        return any(not segment.kept for segment in self.segments) or self.text != self.original

    def rewrite(self, pattern: re.Pattern[str], replace: Callable[[re.Match[str]], str | None]) -> None:
        """Replace each match of ``pattern`` inside kept segments by ``replace(match)`` (None: leave it)."""

        def spans(out: str) -> Iterator[tuple[int, int, str]]:
            for match in pattern.finditer(out):
                if match.end() > match.start() and (spoken := replace(match)) is not None:
                    yield match.start(), match.end(), spoken

        self.substitute(spans)

    def substitute(self, find: Callable[[str], Iterable[tuple[int, int, str]]]) -> None:
        """Replace stretches of kept segments: ``find(out)`` gives ``(start, end, spoken)`` for each stretch of a kept
        segment's text to replace, in order and not overlapping (one call per kept segment, one walk over them all)."""
        result: list[Segment] = []
        for segment in self.segments:
            if not segment.kept:
                result.append(segment)
                continue
            pos = 0
            for start, end, spoken in find(segment.out):
                if start > pos:
                    result.append(Segment(segment.start + pos, segment.start + start, segment.out[pos:start], True))
                result.append(Segment(segment.start + start, segment.start + end, spoken, False))
                pos = end
            if pos == 0:
                result.append(segment)
            elif pos < len(segment.out):
                result.append(Segment(segment.start + pos, segment.end, segment.out[pos:], True))
        self.segments = result

    def cut_words(self, bound: int) -> None:
        """Put a space into every run of the spoken text longer than ``bound`` without one (see :func:`word_cuts`).

        A cut inside kept characters becomes a zero-width segment between them; one inside a replacement goes into
        what is spoken for it.
        """
        cuts = word_cuts(self.text, bound)
        if not cuts:
            return
        result: list[Segment] = []
        offset = 0  # where the current segment starts in the spoken text
        index = 0  # next cut
        for segment in self.segments:
            length = len(segment.out)
            inside: list[int] = []  # cuts in this segment, relative to its start
            while index < len(cuts) and cuts[index] < offset + length:
                inside.append(cuts[index] - offset)
                index += 1
            offset += length
            if inside and inside[0] == 0:  # at the boundary with the segment before: a space of its own
                result.append(Segment(segment.start, segment.start, " ", False))
                inside.pop(0)
            if not inside:
                result.append(segment)
            elif segment.kept:
                result.extend(_split_kept(segment, inside))
            else:
                bounds = zip([0, *inside], [*inside, length], strict=True)
                out = " ".join(segment.out[a:b] for a, b in bounds)
                result.append(Segment(segment.start, segment.end, out, False))
        self.segments = result


def _split_kept(segment: Segment, cuts: list[int]) -> list[Segment]:
    """A kept segment cut at ``cuts`` (inside it): its pieces, kept, with a zero-width space between each two."""
    pieces: list[Segment] = []
    for a, b in zip([0, *cuts], [*cuts, len(segment.out)], strict=True):
        if pieces:
            pieces.append(Segment(segment.start + a, segment.start + a, " ", False))
        pieces.append(Segment(segment.start + a, segment.start + b, segment.out[a:b], True))
    return pieces


class AlignmentMapper:
    """Maps the worker's characters and times (any unit, absolute) back onto the caller's characters, as they come."""

    def __init__(self, spoken: Spoken) -> None:
        self._spoken = spoken
        self._text = spoken.text
        self._end = len(self._text.rstrip())  # past it only white space is left to match
        # For each spoken character: its segment's index.
        self._owner: list[int] = []
        self._first: list[int] = []  # index of each segment's first spoken character
        for index, segment in enumerate(spoken.segments):
            self._first.append(len(self._owner))
            self._owner.extend([index] * len(segment.out))
        self._times: list[tuple[float, float] | None] = [None] * len(self._text)
        self._cursor = 0  # next spoken character to match
        self._emitted = 0  # segments fully handed out
        self._emitted_char = 0  # characters of the current (kept) segment handed out
        self._last = 0.0

    def _place(self, index: int, start: float, end: float) -> None:
        self._times[index] = (start, end)
        self._last = max(self._last, end)

    def _match(self, char: str, start: float, end: float) -> None:
        text = self._text
        if self._cursor < len(text) and text[self._cursor] == char:
            self._place(self._cursor, start, end)
            self._cursor += 1
            return
        if char.isspace():
            return  # white space the engine put between sentences
        ahead = text.find(char, self._cursor, self._cursor + _LOOKAHEAD)
        if ahead >= 0:
            for skipped in range(self._cursor, ahead):
                self._place(skipped, start, start)
            self._place(ahead, start, end)
            self._cursor = ahead + 1
        elif self._cursor < len(text):
            self._place(self._cursor, start, end)  # the engine spelled it differently: take it as this character
            self._cursor += 1

    def feed(
        self, chars: list[str], starts: list[float], ends: list[float], *, final: bool = False
    ) -> tuple[list[str], list[float], list[float]]:
        """Take the next characters the worker aligned; return the caller's characters that are now complete."""
        for char, start, end in zip(chars, starts, ends, strict=True):
            self._match(char, start, end)
        if final or self._cursor >= self._end:
            self._cursor = len(self._text)
        return self._emit()

    def _span(self, first: int, last: int) -> tuple[float, float]:
        known = [t for t in self._times[first:last] if t is not None]
        if not known:
            return self._last, self._last
        return min(t[0] for t in known), max(t[1] for t in known)

    def _emit(self) -> tuple[list[str], list[float], list[float]]:
        chars: list[str] = []
        starts: list[float] = []
        ends: list[float] = []
        original = self._spoken.original
        segments = self._spoken.segments
        floor = 0.0
        while self._emitted < len(segments):
            segment = segments[self._emitted]
            first = self._first[self._emitted]
            if segment.kept:
                while self._emitted_char < len(segment.out) and first + self._emitted_char < self._cursor:
                    offset = self._emitted_char
                    start, end = self._times[first + offset] or (self._last, self._last)
                    chars.append(original[segment.start + offset])
                    starts.append(start)
                    ends.append(end)
                    self._emitted_char += 1
                if self._emitted_char < len(segment.out):
                    break
            else:
                if first + len(segment.out) > self._cursor:
                    break
                start, end = self._span(first, first + len(segment.out))
                count = segment.end - segment.start
                for offset in range(count):
                    chars.append(original[segment.start + offset])
                    starts.append(start + (end - start) * offset / count)
                    ends.append(start + (end - start) * (offset + 1) / count)
            self._emitted += 1
            self._emitted_char = 0
        # Times never run backwards, whatever the engine did.
        for index in range(len(starts)):
            floor = max(floor, starts[index])
            starts[index] = floor
            ends[index] = max(ends[index], floor)
        return chars, starts, ends
