"""The engine interface every synthesis engine implements."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np


@dataclass(slots=True)
class EngineChunk:
    """A piece of speech: mono float32 PCM in -1..1 at the engine's sample rate, and the text it speaks."""

    pcm: np.ndarray
    text: str
    # Engine timing where it has it: (unit, n_samples) pairs in speaking order (Piper: phonemes).
    timing: list[tuple[str, int]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class VoiceSpec:
    """What an engine needs to know about the voice of a job."""

    voice_id: str
    # Directory of a cloned voice (reference clip, metadata, cached conditioning); None for built-in voices.
    path: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    # The voice's saved settings (``POST /v1/voices/{id}/settings/edit``): the defaults under a job's own settings.
    saved_settings: Mapping[str, Any] = field(default_factory=dict)


def job_settings(voice: VoiceSpec, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings a job speaks with: the voice's saved ones, overridden field by field by the request's."""
    return {**voice.saved_settings, **{k: v for k, v in settings.items() if v is not None}}


class Engine(Protocol):
    """Loads once per process, states its sample rate, and turns text into a stream of PCM chunks."""

    name: str
    sample_rate: int

    def warm_up(self) -> None:
        """Run a short synthesis so the first real job does not pay for lazy initialisation."""

    def synthesize(
        self,
        text: str,
        voice: VoiceSpec,
        settings: Mapping[str, Any],
        should_stop: Callable[[], bool],
        seed: int | None = None,
    ) -> Iterator[EngineChunk]:
        """Yield chunks sentence by sentence (or finer); stop early when ``should_stop()`` turns true."""
        ...

    def forget_voice(self, voice_id: str) -> None:
        """Drop whatever the engine keeps about a cloned voice (it was edited or removed); called from any thread."""


def clamp_setting(value: Any, low: float, high: float, default: float) -> float:
    """A voice setting as a number within [low, high]; ``default`` when it is missing or not a finite number.

    The realtime sockets pass voice settings through unchecked, so anything a client can put in JSON arrives here.
    """
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer too large for a float
        return default
    if not math.isfinite(number):
        return default
    return min(high, max(low, number))
