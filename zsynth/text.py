"""Text helpers shared by the front and the workers: sentence splitting that never cuts a word."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

# The longest sentence the engines speak in one go (Piper's sentences, Turbo's pieces): longer ones are cut at clauses.
SENTENCE_MAX_CHARS: Final = 300

# A sentence ends at . ! ? … (optionally followed by closing quotes/brackets) and then white space.
_SENTENCE_END: Final = re.compile(r"(?<=[.!?…])[\"'”’)\]]*\s+")
_SOFT_BREAK: Final = re.compile(r"(?<=[,;:—–])\s+")


def _split_long(piece: str, max_chars: int) -> list[str]:
    """Split one over-long sentence at clause marks, then at spaces; never inside a word."""
    parts: list[str] = []
    current = ""
    for clause in _SOFT_BREAK.split(piece):
        for word in clause.split(" "):
            if not word:
                continue
            candidate = f"{current} {word}" if current else word
            if len(candidate) > max_chars and current:
                parts.append(current)
                current = word
            else:
                current = candidate
        # Prefer a clause boundary as the cut when the running piece is already long.
        if len(current) >= max_chars // 2:
            parts.append(current)
            current = ""
    if current:
        parts.append(current)
    return parts


def split_sentences(text: str, max_chars: int = SENTENCE_MAX_CHARS) -> list[str]:
    """Split ``text`` into sentences of at most ``max_chars`` (a single longer word stays whole)."""
    pieces: list[str] = []
    for sentence in _SENTENCE_END.split(text.strip()):
        sentence = " ".join(sentence.split())
        if not sentence:
            continue
        if len(sentence) <= max_chars:
            pieces.append(sentence)
        else:
            pieces.extend(_split_long(sentence, max_chars))
    return pieces


def pack_sentences(sentences: Iterable[str], max_chars: int) -> list[str]:
    """Consecutive sentences joined by a space into pieces of at most ``max_chars``; a longer one is a piece alone."""
    pieces: list[str] = []
    for sentence in sentences:
        if pieces and len(pieces[-1]) + 1 + len(sentence) <= max_chars:
            pieces[-1] = f"{pieces[-1]} {sentence}"
        else:
            pieces.append(sentence)
    return pieces
