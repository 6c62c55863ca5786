"""Synthesis engines. :func:`load_engine` builds the one the settings name, inside the worker process."""

from __future__ import annotations

from zsynth.config import Settings

from .base import Engine, EngineChunk, VoiceSpec

__all__ = ["Engine", "EngineChunk", "VoiceSpec", "load_engine"]


def load_engine(settings: Settings) -> Engine:
    """Load the configured engine (heavy imports happen here, never at import time)."""
    if settings.engine == "piper":
        from .piper import PiperEngine

        return PiperEngine(threads=settings.engine_threads)
    if settings.engine == "turbo":
        from .turbo import TurboEngine

        return TurboEngine(settings)
    raise ValueError(f"ZSYNTH_ENGINE={settings.engine!r} is not available in this build")
