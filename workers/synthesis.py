"""What a worker says about each chunk besides its audio (the ``meta`` of a chunk event)."""

from __future__ import annotations

from typing import Any

from .engines import EngineChunk


def chunk_meta(chunk: EngineChunk, sample_rate: int, offset: int, alignment: bool) -> dict[str, Any]:
    """Sample count, position and text of a chunk; the engine's timing too when the job asked for alignment."""
    meta: dict[str, Any] = {"samples": len(chunk.pcm), "offset": offset, "text": chunk.text}
    if alignment and chunk.timing:
        meta["timing"] = chunk.timing
    return meta
