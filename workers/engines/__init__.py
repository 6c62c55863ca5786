"""Synthesis engines. :func:`load_engine` builds the one the settings name, inside the worker process.

Each engine module has a ``load(settings)`` function; the engine's profile (:mod:`zsynth.core.engines`) names it, so a
new engine is its module and its profile.
"""

from __future__ import annotations

import importlib

from zsynth.core.config import Settings
from zsynth.core.engines import profile

from .base import Engine, EngineChunk, MarkedText, VoiceSpec

__all__ = ["Engine", "EngineChunk", "VoiceSpec", "load_engine"]


def load_engine(settings: Settings) -> Engine:
    """Load the configured engine through its profile's loader (heavy imports happen there), wrapped to honour the
    front's markers."""
    found = profile(settings.engine)
    module_name, _, function = found.loader.partition(":")
    load = getattr(importlib.import_module(module_name), function)
    engine: Engine = load(settings)
    return MarkedText(engine, phonemes=found.phoneme_dictionaries)
