"""Synthesis engines. :func:`load_engine` builds the one the settings name, inside the worker process."""

from __future__ import annotations

from zsynth.core.config import Settings

from .base import Engine, EngineChunk, MarkedText, VoiceSpec

__all__ = ["Engine", "EngineChunk", "VoiceSpec", "load_engine"]


def load_engine(settings: Settings) -> Engine:
    """Load the configured engine (heavy imports happen here), wrapped to honour the front's markers."""
    return MarkedText(_load(settings))


def _load(settings: Settings) -> Engine:
    if settings.engine == "piper":
        from ..cores import CoreShare
        from .piper import PiperEngine

        threads = settings.engine_thread_count
        # The box's workers share one directory of busy marks (the data directory is per box).
        share = CoreShare(settings.data_dir / "cores", settings.worker_id) if threads > 1 else None
        return PiperEngine(threads=threads, share=share)
    if settings.engine == "simulated":
        if not settings.load_test_only:
            raise ValueError(
                "ZSYNTH_ENGINE=simulated is the load-test stand-in and makes no speech; "
                "set ZSYNTH_LOAD_TEST_ONLY=1 as well if that is really what you want"
            )
        from .simulated import SimulatedEngine

        return SimulatedEngine(settings.sim_chunk_hold_s, settings.sim_chunk_audio_s)
    if settings.engine == "turbo":
        from .turbo import TurboEngine

        return TurboEngine(settings)
    raise ValueError(f"ZSYNTH_ENGINE={settings.engine!r} is not available in this build")
