"""Text helpers shared by the front and the workers: bounded words, and sentence splitting that cuts only long words.

A run of characters with no white space (a "word") costs an engine more than its length: Piper speaks a word as one
unit, and its time and memory grow faster than the word's length. So no engine is ever given a word longer than a
bound: the front cuts every word at its engine's bound (:func:`word_bound`, ZSYNTH_MAX_WORD_CHARS)
before the job is queued, and :func:`split_sentences`, which the workers cut their jobs with, cuts again at its own
bound in case a job comes from elsewhere. A cut is a space put into the word: after punctuation or where letters turn
into digits when there is such a place in the word's last half, else at the bound itself; never inside a marker
(:mod:`zsynth.core.text.marks`) or before a combining mark.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable
from typing import Final

from zsynth.core.engines import SENTENCE_MAX_CHARS, profile
from zsynth.core.text.marks import CLOSE, OPEN

__all__ = ["SENTENCE_MAX_CHARS"]  # the longest sentence the engines speak in one go, re-exported for them
# Where a long word is best cut: after one of these.
_SOFT_AFTER: Final = frozenset("-‐–—/\\_.,;:!?)]}>\"'”’|+*&=~")

# A sentence ends at . ! ? … (optionally followed by closing quotes/brackets) and then white space.
_SENTENCE_END: Final = re.compile(r"(?<=[.!?…])[\"'”’)\]]*\s+")
_SOFT_BREAK: Final = re.compile(r"(?<=[,;:—–])\s+")


def word_bound(engine: str, setting: int | None = None) -> int:
    """The longest word ``engine`` is given: ``setting`` (ZSYNTH_MAX_WORD_CHARS) when set, else its profile's."""
    if setting is not None:
        return max(1, setting)
    return profile(engine).word_chars


@functools.lru_cache(maxsize=16)
def _long_word(bound: int) -> re.Pattern[str]:
    # Anchored at a word's start, so a long word is scanned once, not again from each of its characters.
    return re.compile(rf"(?<!\S)\S{{{bound + 1},}}")


def _marker_around(text: str, pos: int, floor: int) -> tuple[int, int] | None:
    """The marker ``pos`` falls inside (its start and end), looking back no further than ``floor``."""
    opened = text.rfind(OPEN, floor, pos)
    if opened < 0 or text.rfind(CLOSE, opened, pos) >= 0:
        return None
    closed = text.find(CLOSE, pos)
    return opened, (len(text) if closed < 0 else closed + 1)


def _joins(char: str) -> bool:
    """Whether ``char`` belongs to the character before it (a combining mark, a zero-width joiner)."""
    return char == "\u200d" or unicodedata.category(char).startswith("M")


def _cut_at(text: str, start: int, bound: int) -> int:
    """Where the word piece starting at ``start`` ends: at most ``bound`` characters on, at a soft place if any."""
    end = start + bound
    for pos in range(end, start + bound // 2, -1):
        before, after = text[pos - 1], text[pos]
        if before in _SOFT_AFTER or (before.isalpha() and after.isdigit()):
            end = pos
            break
    else:
        # A hard cut: not between a character and the marks (or joiner) that belong to it.
        while end > start + 1 and _joins(text[end]):
            end -= 1
    marker = _marker_around(text, end, start)
    if marker is not None:
        end = marker[0] if marker[0] > start else marker[1]
    return end


def word_cuts(text: str, bound: int) -> list[int]:
    """The positions in ``text`` where a space goes so that no word is longer than ``bound`` (markers stay whole)."""
    bound = max(1, bound)
    cuts: list[int] = []
    if max(map(len, text.split()), default=0) <= bound:
        return cuts  # the usual case, found in a fraction of the scan below
    for match in _long_word(bound).finditer(text):
        start, stop = match.start(), match.end()
        while stop - start > bound:
            cut = _cut_at(text, start, bound)
            if cut >= stop:
                break  # a marker runs to the word's end: it stays whole
            cuts.append(cut)
            start = cut
    return cuts


def bound_words(text: str, bound: int) -> str:
    """``text`` with a space put into every word longer than ``bound`` (see :func:`word_cuts`)."""
    cuts = word_cuts(text, bound)
    if not cuts:
        return text
    parts = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    return " ".join(parts)


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


def split_sentences(text: str, max_chars: int = SENTENCE_MAX_CHARS, max_word_chars: int | None = None) -> list[str]:
    """Split ``text`` into sentences of at most ``max_chars``, cutting any word longer than ``max_word_chars``.

    ``max_word_chars`` defaults to ``max_chars`` and is never more, so no piece is longer than ``max_chars`` (but for
    a marker longer than that, which stays whole).
    """
    bound = min(max_chars, max_word_chars or max_chars)
    pieces: list[str] = []
    for sentence in _SENTENCE_END.split(bound_words(text, bound).strip()):
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


# ----- the first piece: a job's first sentence cut short, so its first audio is a shorter engine call ---------------
# Measured with scripts/first_piece_quality.py (docs/scaling.md "A clause-sized first piece"): a Piper call costs a
# fixed part plus a part per phoneme, so cutting pays only on a sentence long enough that the head is much shorter.
FIRST_PIECE_CLAUSE_CHARS: Final = 32  # a sentence at least this long may end its first piece at a clause mark
FIRST_PIECE_WORD_CHARS: Final = 60  # ... and, with no clause mark early on, at a word boundary
FIRST_PIECE_MAX_WORDS: Final = 8  # a clause mark further on than this many words is too late to pay
FIRST_PIECE_WORDS: Final = (3, 6)  # a word-boundary cut leaves the head this many words (fewest, most)
FIRST_PIECE_REST_WORDS: Final = 3  # the rest of the sentence keeps at least this many words
# While a worker's slot is shared (docs/scheduling.md): a shorter head, so that the turns due together wait less.
FIRST_PIECE_SHORT_MAX_WORDS: Final = 4
FIRST_PIECE_SHORT_WORDS: Final = (2, 3)
# A clause mark (closing quotes or brackets may follow it) at a word's end.
_CLAUSE_END: Final = re.compile(r"[,;:][\"'”’)\]]*$")
# Words a phrase starts with: a word-boundary cut goes before one of these when it can (the head then ends a phrase).
_PHRASE_STARTS: Final = frozenset(
    "and or but so yet with without to of in on at for from by about into over under after before while when where "
    "which who whose that because if than as until unless since through during".split()
)
# Words that lean on the next one (articles, possessives, prepositions, conjunctions): a head never ends on one.
_LEANS_ON_NEXT: Final = _PHRASE_STARTS | frozenset("a an the my your his her its our their this these those".split())
_PLAIN_WORD: Final = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")


def _plain(word: str) -> bool:
    """Whether ``word`` is letters only (an apostrophe or hyphen inside): no digit, abbreviation or marker."""
    return _PLAIN_WORD.fullmatch(word) is not None


def _clause_cut_ok(word: str, after: str) -> bool:
    """Whether a clause mark ending ``word`` may end the first piece, ``after`` being the next word."""
    core = _CLAUSE_END.sub("", word)
    if not core or OPEN in word or OPEN in after or "." in core:
        return False  # a marker, an abbreviation ("e.g.,") or a bare mark
    # "1, 000": digits on both sides may be one number written with a spaced separator.
    return not (core[-1].isdigit() and after[:1].isdigit())


def first_piece_cut(text: str, *, short: bool = False) -> int | None:
    """Where the first piece of ``text`` ends (the rest starts after the white space there); None: speak it whole.

    Only the first sentence is cut, and only when it is long enough for a shorter first call to pay
    (:data:`FIRST_PIECE_CLAUSE_CHARS`, :data:`FIRST_PIECE_WORD_CHARS`). The cut is the first clause mark (comma,
    semicolon, colon) within :data:`FIRST_PIECE_MAX_WORDS` words that leaves two words before it; failing that, a
    word boundary after 3 to 6 words, before a word that starts a phrase ("and", "with", "to"...) when there is one,
    between two plain words (never next to a number, an abbreviation or a marker, and never after a word that leans
    on the next one: "the", "my", "at"...). The rest keeps at least :data:`FIRST_PIECE_REST_WORDS` words.

    ``short`` (a worker whose slot is shared): a clause mark within :data:`FIRST_PIECE_SHORT_MAX_WORDS` words, else a
    word boundary after 2 or 3 words (:data:`FIRST_PIECE_SHORT_WORDS`).
    """
    end = _SENTENCE_END.search(text)
    sentence = text[: end.start()] if end else text
    words = [(m.group(0), m.end()) for m in re.finditer(r"\S+", sentence)]
    if len(" ".join(w for w, _ in words)) < FIRST_PIECE_CLAUSE_CHARS:
        return None
    last = len(words) - FIRST_PIECE_REST_WORDS  # the head ends after word index < last
    for index in range(1, min(FIRST_PIECE_SHORT_MAX_WORDS if short else FIRST_PIECE_MAX_WORDS, last)):
        word, stop = words[index]
        if _CLAUSE_END.search(word) and _clause_cut_ok(word, words[index + 1][0]):
            return stop
    if len(sentence.strip()) < FIRST_PIECE_WORD_CHARS:
        return None
    fewest, most = FIRST_PIECE_SHORT_WORDS if short else FIRST_PIECE_WORDS
    options = [
        index
        for index in range(fewest - 1, min(most, last))
        if _plain(words[index][0]) and _plain(words[index + 1][0]) and words[index][0].lower() not in _LEANS_ON_NEXT
    ]
    if not options:
        return None
    # Before a word that starts a phrase (the head then ends one), else in the middle of the reach.
    phrase = [i for i in options if words[i + 1][0].lower() in _PHRASE_STARTS]
    return words[phrase[0] if phrase else options[len(options) // 2]][1]


# ----- the rest cut again: a first sentence's rest spoken in two calls while the worker's slot is shared -----------
# docs/scheduling.md "Piper's grain while the slot is shared": another stream's next turn waits for the call under
# way, so while the slot is shared the rest of a job's first sentence is cut once more, at its middle phrase boundary.
REST_CUT_MIN_CHARS: Final = FIRST_PIECE_CLAUSE_CHARS  # a shorter rest is one short call already
REST_CUT_WORDS: Final = 3  # each side of the cut keeps at least this many words


def rest_cut(text: str) -> int | None:
    """Where the first sentence of ``text`` (the rest of a cut sentence) may be cut once more; None: speak it whole.

    The cut is nearest the sentence's middle: at a clause mark when there is one, else before a word that starts a
    phrase, else (when the sentence has at least :data:`FIRST_PIECE_WORD_CHARS` characters) between two plain
    words. Each side keeps at least :data:`REST_CUT_WORDS` words; later sentences are never cut (the engine speaks
    them one call each).
    """
    end = _SENTENCE_END.search(text)
    sentence = text[: end.start()] if end else text
    words = [(m.group(0), m.end()) for m in re.finditer(r"\S+", sentence)]
    if len(sentence.strip()) < REST_CUT_MIN_CHARS or len(words) < 2 * REST_CUT_WORDS:
        return None
    reach = range(REST_CUT_WORDS - 1, len(words) - REST_CUT_WORDS)  # the cut follows word index i
    middle = (len(words) - 1) / 2
    clause = [i for i in reach if _CLAUSE_END.search(words[i][0]) and _clause_cut_ok(words[i][0], words[i + 1][0])]
    plain = [
        i
        for i in reach
        if _plain(words[i][0]) and _plain(words[i + 1][0]) and words[i][0].lower() not in _LEANS_ON_NEXT
    ]
    phrase = [i for i in plain if words[i + 1][0].lower() in _PHRASE_STARTS]
    if len(sentence.strip()) < FIRST_PIECE_WORD_CHARS:
        plain = []
    for options in (clause, phrase, plain):
        if options:
            return words[min(options, key=lambda i: abs(i - middle))][1]
    return None
