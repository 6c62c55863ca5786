"""Streamed text into pieces to speak: whole sentences as soon as each is complete.

Home Assistant sends an LLM's raw deltas as ``synthesize-chunk`` events: a piece may end inside a word, a number or
a sentence. A sentence is complete once its end (``.``, ``!``, ``?``, ``…``, optionally closed by quotes or brackets)
is followed by white space and the first character of the next sentence (a capital letter, a digit or an opening
quote), so "3." + "14", "e.g. the" and a piece that ends right after the full stop never cut too early. A title such
as "Dr." or an initial ("J.") before a name is no sentence end. A blank line ends a piece too.

The first piece follows the realtime sockets' first step (:data:`~zsynth.speech.ws.buffer.DEFAULT_SCHEDULE`): a first
sentence still unfinished at 120 characters is released at its last clause break (``,;:``) or white space, so a long
first sentence does not hold back the first audio; later pieces wait for their sentence up to
:data:`~zsynth.core.text.sentences.SENTENCE_MAX_CHARS`. Markdown emphasis (``*``) is dropped, as wyoming-piper does.
"""

from __future__ import annotations

import re
from typing import Final

from zsynth.core.text.sentences import SENTENCE_MAX_CHARS
from zsynth.speech.ws.buffer import DEFAULT_SCHEDULE, join_messages

FIRST_PIECE_CHARS: Final = DEFAULT_SCHEDULE[0]
_END: Final = re.compile(r"[.!?…。！？]+[\"'”’)\]}»]*(\s+)(?=[\"'“‘(\[«¿¡\d\w])")
_BLANK_LINE: Final = re.compile(r"\n[ \t]*\n\s*")
_CLAUSE: Final = re.compile(r"[,;:—–]\s+")
_TITLES: Final = frozenset(
    {"mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "mt", "ft", "no", "vs", "etc", "inc", "ltd", "co", "gen"}
)
_ASTERISKS: Final = re.compile(r"\*+")


def _is_title(text: str, dot: int) -> bool:
    """The word before the full stop at ``dot`` is a title or an initial, not a sentence's last word."""
    start = dot
    while start > 0 and text[start - 1].isalpha():
        start -= 1
    word = text[start:dot]
    return text[dot] == "." and (len(word) == 1 or word.lower() in _TITLES)


def _starts_sentence(text: str) -> bool:
    char = text[:1]
    return bool(char) and (char.isupper() or char.isdigit() or not char.isalnum())


def plain_text(text: str) -> str:
    """A plain request's text as it is spoken: emphasis marks dropped, lines joined."""
    return " ".join(_ASTERISKS.sub("", text).split())


class SentenceStream:
    """Pieces of a streamed text in, pieces to speak out, in order."""

    def __init__(self, first_piece_chars: int = FIRST_PIECE_CHARS, max_chars: int = SENTENCE_MAX_CHARS) -> None:
        self.first_piece_chars = first_piece_chars
        self.max_chars = max_chars
        self._text = ""
        self._released = 0

    def feed(self, piece: str) -> list[str]:
        """Add one piece of text; return the pieces ready to speak now (possibly none)."""
        self._text = join_messages(self._text, piece)
        out: list[str] = []
        while True:
            end = self._boundary()
            if end is None:
                break
            out.extend(self._take(end))
        limit = self.first_piece_chars if self._released == 0 and not out else self.max_chars
        if len(self._text) >= limit:
            out.extend(self._take(self._cut(limit)))
        return out

    def finish(self) -> list[str]:
        """The rest, at the end of the stream."""
        return self._take(len(self._text))

    def _boundary(self) -> int | None:
        """Where the first complete sentence (or paragraph) of the buffer ends, if one does."""
        best: int | None = None
        for match in _END.finditer(self._text):
            dot = match.start()
            if _is_title(self._text, dot) or not _starts_sentence(self._text[match.end() :]):
                continue
            best = match.end()
            break
        blank = _BLANK_LINE.search(self._text)
        if blank is not None and blank.end() < len(self._text) and (best is None or blank.end() < best):
            best = blank.end()
        return best

    def _cut(self, limit: int) -> int:
        """Where an unfinished sentence of ``limit`` characters or more is cut: after whole words only."""
        whole = max((m.end() for m in re.finditer(r"\s+", self._text)), default=0)
        if whole == 0:
            # One unbroken run: only a run past the sentence bound is cut (the engine's word bound cuts it again).
            return len(self._text) if len(self._text) >= self.max_chars else 0
        clauses = [m.end() for m in _CLAUSE.finditer(self._text, 0, whole)]
        return clauses[-1] if clauses and clauses[-1] >= limit // 3 else whole

    def _take(self, end: int) -> list[str]:
        piece, self._text = self._text[:end], self._text[end:]
        spoken = _ASTERISKS.sub("", piece).strip()
        if not spoken:
            return []
        self._released += 1
        return [spoken]
