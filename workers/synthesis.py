"""What a worker says about each chunk besides its audio (the ``meta`` of a chunk event)."""

from __future__ import annotations

from typing import Any

from zsynth.alignment import Timeline, char_alignment
from zsynth.audio import OutputFormat

from .engines import EngineChunk


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

    def __init__(self, fmt: OutputFormat, sample_rate: int, alignment: bool) -> None:
        self.fmt = fmt
        self.sample_rate = sample_rate
        self.alignment = alignment
        self._timeline = Timeline()

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
