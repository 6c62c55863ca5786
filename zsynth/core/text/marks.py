"""Markers the front puts into a job's text for the engines: a pause, or a word spoken from given phonemes.

A marker is one run of characters from Unicode's private use area, digits and phoneme symbols, with no white space
and no sentence punctuation followed by white space, so no sentence or piece splitting (``zsynth.core.text.sentences``)
ever cuts one. Engines that know a marker act on it (see ``workers/engines/base.py``); a caller's own text cannot
contain one (the front removes private-use characters from the text before it adds markers).

* pause: ``\\ue000b<ms>\\ue001`` (``<ms>`` whole milliseconds, at most :data:`MAX_BREAK_MS`);
* phonemes: ``\\ue000p<alphabet><phonemes>\\ue001``, ``<alphabet>`` ``i`` (IPA) or ``c`` (CMU ARPAbet), white space
  inside the phonemes written as ``_``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

OPEN: Final = "\ue000"
CLOSE: Final = "\ue001"
MAX_BREAK_MS: Final = 3000
MARK: Final = re.compile("\ue000([bp])([^\ue000\ue001]*)\ue001")
PRIVATE: Final = re.compile("[\ue000-\ue001]")
ALPHABETS: Final = {"ipa": "i", "cmu-arpabet": "c"}


def pause(ms: int) -> str:
    """The marker of a pause of ``ms`` milliseconds (clamped to 0..MAX_BREAK_MS)."""
    return f"{OPEN}b{max(0, min(MAX_BREAK_MS, ms))}{CLOSE}"


def phonemes(alphabet: str, spelled: str) -> str:
    """The marker of a word spoken as ``spelled`` in ``alphabet`` (``ipa`` or ``cmu-arpabet``)."""
    return f"{OPEN}p{ALPHABETS[alphabet]}{'_'.join(spelled.split())}{CLOSE}"


@dataclass(frozen=True, slots=True)
class Piece:
    """A run of a job's text: plain ``text``, a pause of ``pause_ms``, or ``phonemes`` in ``alphabet``."""

    text: str = ""
    pause_ms: int | None = None
    phonemes: str | None = None
    alphabet: str | None = None
    marker: str = ""


def pieces(text: str) -> list[Piece]:
    """``text`` cut at its markers, in order (text without markers is one plain piece)."""
    out: list[Piece] = []
    pos = 0
    for match in MARK.finditer(text):
        if match.start() > pos:
            out.append(Piece(text=text[pos : match.start()]))
        kind, body = match.group(1), match.group(2)
        if kind == "b":
            out.append(Piece(pause_ms=min(MAX_BREAK_MS, int(body or "0")), marker=match.group(0)))
        else:
            alphabet = "cmu-arpabet" if body[:1] == "c" else "ipa"
            out.append(Piece(phonemes=body[1:].replace("_", " "), alphabet=alphabet, marker=match.group(0)))
        pos = match.end()
    if pos < len(text):
        out.append(Piece(text=text[pos:]))
    return out


def strip(text: str) -> str:
    """``text`` with every marker removed (what an alignment shows as the normalized text)."""
    return MARK.sub("", text)
