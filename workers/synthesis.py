"""How a worker cuts a job into pieces, and what it says about each chunk besides its audio (a chunk's ``meta``)."""

from __future__ import annotations

from typing import Any

from zsynth.core.alignment import Timeline, char_alignment
from zsynth.core.audio import OutputFormat
from zsynth.core.text.sentences import SENTENCE_MAX_CHARS, pack_sentences, split_sentences

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
