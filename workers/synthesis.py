"""How a worker cuts a job into pieces, and what it says about each chunk besides its audio (a chunk's ``meta``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

import numpy as np

from zsynth.core.alignment import Timeline, char_alignment
from zsynth.core.audio import OutputFormat
from zsynth.core.text.sentences import (
    SENTENCE_MAX_CHARS,
    first_piece_cut,
    pack_sentences,
    rest_cut,
    split_sentences,
)

from .engines import EngineChunk

# Codecs whose streams join seamlessly when a remainder is encoded by a fresh encoder on another worker: raw samples
# and whole MP3 frames. An Ogg Opus or WAV file is one container from its first byte to its last, so a job in those
# formats keeps its slot to the end.
YIELDING_CODECS = frozenset({"pcm", "ulaw", "alaw", "mp3"})


def text_pieces(text: str, max_chars: int) -> list[str]:
    """Whole sentences packed into pieces of at most ``max_chars``; a longer sentence is a piece of its own.

    A worker speaks one piece before it may yield its slot. A sentence is never cut for the piece limit (that would
    change its intonation): the engine gets the sentences the whole text would have given it, as it cuts them from
    the same split (at most :data:`~zsynth.core.text.sentences.SENTENCE_MAX_CHARS` each).
    """
    return pack_sentences(split_sentences(text, SENTENCE_MAX_CHARS), max_chars) or [text]


# ----- the first piece (docs/scaling.md "A clause-sized first piece") -----------------------------------------------
# A sample below this (about -50 dBFS) is silence at a seam: Piper's pauses measure about 1e-5 to 1e-4.
SEAM_SILENCE: Final = 0.003
# The most silence a seam keeps. At a clause mark the two calls' own pauses (the head's trailing one and the rest's
# leading one) come to about what a comma inside the sentence gets (measured: 240-300 ms against 220-350 ms); a
# word-boundary cut would leave 180-190 ms where the sentence had a 40-60 ms gap between words.
SEAM_CLAUSE_MAX_MS: Final = 350.0
SEAM_WORD_MS: Final = 60.0
SEAM_FADE_MS: Final = 2.0  # a trimmed edge is faded over this much, so it meets the other side at zero


def first_piece(text: str, enabled: bool, short: bool = False) -> tuple[str, str] | None:
    """A job's text cut into its first piece and the rest (:func:`first_piece_cut`; ``short``: the shorter head of
    a shared slot); None: speak it whole."""
    cut = first_piece_cut(text, short=short) if enabled else None
    if cut is None:
        return None
    return text[:cut].strip(), text[cut:].strip()


def _silent_run(pcm: np.ndarray, from_end: bool) -> int:
    """How many samples at the start (or end) of ``pcm`` are silence."""
    loud = np.flatnonzero(np.abs(pcm[::-1] if from_end else pcm) >= SEAM_SILENCE)
    return int(loud[0]) if loud.size else len(pcm)


def _trim_timing(timing: list[tuple[str, int]] | None, samples: int, from_end: bool) -> list[tuple[str, int]] | None:
    """Engine timing with ``samples`` taken off its leading (or trailing) units, so it still sums to the audio."""
    if timing is None or samples <= 0:
        return timing
    units = list(reversed(timing)) if from_end else list(timing)
    for i, (unit, count) in enumerate(units):
        taken = min(count, samples)
        units[i] = (unit, count - taken)
        samples -= taken
        if samples <= 0:
            break
    return list(reversed(units)) if from_end else units


def _fade(pcm: np.ndarray, samples: int, from_end: bool) -> np.ndarray:
    """``pcm`` faded to zero over its last (or from zero over its first) ``samples``."""
    samples = min(samples, len(pcm))
    if samples <= 0:
        return pcm
    ramp = np.linspace(0.0, 1.0, samples, endpoint=False, dtype=np.float32)
    out = pcm.copy()
    if from_end:
        out[len(out) - samples :] *= ramp[::-1]
    else:
        out[:samples] *= ramp
    return out


def _trim(chunk: EngineChunk, samples: int, fade: int, from_end: bool) -> EngineChunk:
    """``chunk`` with ``samples`` of silence taken off its end (or start), the new edge faded."""
    if samples <= 0:
        return chunk
    pcm = chunk.pcm[: len(chunk.pcm) - samples] if from_end else chunk.pcm[samples:]
    timing = _trim_timing(chunk.timing, samples, from_end)
    return EngineChunk(pcm=_fade(pcm, fade, from_end), text=chunk.text, timing=timing, extra=chunk.extra)


def _seam_ms(head_text: str) -> float:
    """The most silence the seam after ``head_text`` keeps: a clause mark's pause, or a gap between words."""
    clause = head_text.rstrip("\"'”’)]")[-1:] in (",", ";", ":")
    return SEAM_CLAUSE_MAX_MS if clause else SEAM_WORD_MS


def seam_head(chunk: EngineChunk, seam_ms: float, sample_rate: int) -> tuple[EngineChunk, int]:
    """The first piece's last chunk with its trailing silence cut to two thirds of the seam; and what it kept.

    It is cut before the rest is spoken (it is the job's first audio), so it cannot wait to see the rest's
    leading silence: the rest keeps the seam's remainder (:func:`seam_rest`). Silence is cut only where it is
    silence, the new edge faded.
    """
    keep = round(sample_rate * seam_ms / 1000.0)
    trail = _silent_run(chunk.pcm, from_end=True)
    kept = min(trail, keep - keep // 3)  # most of the pause goes after the head, as it does inside a sentence
    return _trim(chunk, trail - kept, round(sample_rate * SEAM_FADE_MS / 1000.0), from_end=True), kept


def seam_rest(chunk: EngineChunk, room: int, sample_rate: int) -> EngineChunk:
    """The rest's first chunk with its leading silence cut to ``room`` samples (what the seam has left)."""
    lead = _silent_run(chunk.pcm, from_end=False)
    return _trim(chunk, lead - min(lead, max(0, room)), round(sample_rate * SEAM_FADE_MS / 1000.0), from_end=False)


def speak_cut(
    synthesize: Callable[[str], Iterable[EngineChunk]],
    text: str,
    cut: tuple[str, str] | None,
    sample_rate: int,
    recut: Callable[[str], tuple[str, str] | None] = lambda _: None,
) -> Iterator[EngineChunk]:
    """The engine's chunks of ``text``; with ``cut``, of its first piece and then of the rest, joined at the seam.

    The first piece's last chunk goes out as soon as its trailing silence is trimmed, the rest's first chunk with
    its leading silence trimmed to match (:func:`seam_head`, :func:`seam_rest`), so the seam is the pause of the
    clause mark, or a gap between words. Each chunk keeps its own text, so the alignment places the rest right
    after the first piece (with the white space between them, as between two sentences).

    ``recut`` is asked, when the rest is about to be spoken (not before: the generator is lazy), whether to cut it
    once more (:func:`rest_piece`); each further seam is joined the same way.
    """
    if cut is None:
        yield from synthesize(text)
        return
    piece = cut[0]
    rest: str | None = cut[1]  # None: this piece is the last
    room: int | None = None  # what the seam before this piece has left; None: the job's first piece
    while True:
        last: EngineChunk | None = None
        for chunk in synthesize(piece):
            if room is not None:
                chunk = seam_rest(chunk, room, sample_rate)
                room = None
            if rest is None:
                yield chunk
                continue
            if last is not None:
                yield last
            last = chunk
        if rest is None:
            return
        seam_ms = _seam_ms(piece)
        room = round(sample_rate * seam_ms / 1000.0)
        if last is not None:
            last, kept = seam_head(last, seam_ms, sample_rate)
            room -= kept
            yield last
        again = recut(rest)
        piece, rest = again if again is not None else (rest, None)


def rest_piece(text: str) -> tuple[str, str] | None:
    """The rest of a cut sentence cut once more (:func:`rest_cut`); None: speak it whole."""
    at = rest_cut(text)
    if at is None:
        return None
    return text[:at].strip(), text[at:].strip()


def encoded_ms(fmt: OutputFormat, audio: bytes, engine_ms: float) -> float:
    """How much audio ``audio`` holds, in ms: exact for PCM and G.711, CBR arithmetic for MP3.

    Ogg Opus (page-granular) and WAV (all at the end) fall back to the engine's own duration for the chunk.
    """
    if fmt.codec == "pcm":
        return len(audio) / 2 / fmt.sample_rate * 1000.0
    if fmt.codec in ("ulaw", "alaw"):
        return len(audio) / fmt.sample_rate * 1000.0
    if fmt.codec == "mp3" and fmt.bitrate_kbps:
        return len(audio) * 8 / fmt.bitrate_kbps
    return engine_ms


class ChunkMeta:
    """Builds each chunk's meta; with ``alignment``, the characters spoken in the audio sent with that chunk.

    The alignment is computed here, next to the engine timing it comes from, so the front only forwards it.
    """

    def __init__(self, fmt: OutputFormat, sample_rate: int, alignment: bool, continues: bool = False) -> None:
        self.fmt = fmt
        self.sample_rate = sample_rate
        self.alignment = alignment
        # A remainder's characters follow the previous part's: the white space between them is owed to the client.
        self._timeline = Timeline(continues)

    def chunk(self, chunk: EngineChunk, audio: bytes, offset: int) -> dict[str, Any]:
        """Sample count, position and text of an engine chunk whose encoded audio is ``audio``.

        With alignment: ``alignment`` (characters starting in this chunk's audio, ms relative to it) and
        ``span_ms``, how much of the job's audio this chunk's bytes carry.
        """
        meta: dict[str, Any] = {"samples": len(chunk.pcm), "offset": offset, "text": chunk.text}
        if self.alignment:
            self._timeline.add(char_alignment(chunk.text, chunk.timing, len(chunk.pcm), self.sample_rate))
            engine_ms = len(chunk.pcm) / self.sample_rate * 1000.0
            span, span_ms = self._timeline.take(encoded_ms(self.fmt, audio, engine_ms))
            meta["alignment"] = span.to_meta() if span is not None else None
            meta["span_ms"] = round(span_ms, 3)
        return meta

    def tail(self, audio: bytes) -> dict[str, Any] | None:
        """Meta of the encoder's final flush; None when there is neither audio nor alignment left to send."""
        meta: dict[str, Any] = {"tail": True}
        if self.alignment:
            span, span_ms = self._timeline.take(encoded_ms(self.fmt, audio, 0.0), final=True)
            meta["span_ms"] = round(span_ms, 3)
            if span is not None:
                meta["alignment"] = span.to_meta()
        return meta if audio or "alignment" in meta else None
