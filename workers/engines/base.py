"""The engine interface every synthesis engine implements."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from zsynth.core.text import marks


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
        timing: bool = True,
    ) -> Iterator[EngineChunk]:
        """Yield chunks sentence by sentence (or finer); stop early when ``should_stop()`` turns true.

        ``timing``: whether the caller needs each chunk's ``timing`` (a job that sends an alignment); an engine that
        pays for computing it may leave it out (None) when not.
        """
        ...

    def forget_voice(self, voice_id: str) -> None:
        """Drop whatever the engine keeps about a cloned voice (it was edited or removed); called from any thread."""


def clamp_setting(value: Any, low: float, high: float, default: float) -> float:
    """A voice setting as a number within [low, high]; ``default`` when it is missing or not a finite number.

    Every transport of the front checks voice settings (:mod:`zsynth.core.voice_settings`), but a job queued by other
    means may still carry anything JSON can.
    """
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer too large for a float
        return default
    if not math.isfinite(number):
        return default
    return min(high, max(low, number))


class MarkedText:
    """Wraps an engine so that the front's markers (:mod:`zsynth.core.text.marks`) in a job's text are honoured.

    A pause marker becomes that much silence, a chunk of its own whose text is the marker (so the alignment keeps
    counting through it); the text between pauses goes to the engine as usual. Phoneme markers are left to engines
    that speak them (``phonemes``: the profile's ``phoneme_dictionaries``); for the others they are removed.
    Everything else is the wrapped engine's.
    """

    def __init__(self, engine: Engine, *, phonemes: bool = False) -> None:
        self.engine = engine
        self.phonemes = phonemes
        self.name = engine.name
        self.sample_rate = engine.sample_rate

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    def synthesize(
        self,
        text: str,
        voice: VoiceSpec,
        settings: Mapping[str, Any],
        should_stop: Callable[[], bool],
        seed: int | None = None,
        timing: bool = True,
        **extra: Any,
    ) -> Iterator[EngineChunk]:
        """The engine's chunks for the text between pauses, and a silent chunk for each pause."""
        if marks.OPEN not in text:
            yield from self.engine.synthesize(text, voice, settings, should_stop, seed, timing=timing, **extra)
            return
        phonemes = self.phonemes
        run = ""
        for piece in [*marks.pieces(text), marks.Piece(pause_ms=-1)]:
            if piece.pause_ms is None:
                run += piece.marker if (piece.phonemes is not None and phonemes) else piece.text
                continue
            if run.strip():
                yield from self.engine.synthesize(run, voice, settings, should_stop, seed, timing=timing, **extra)
            run = ""
            if should_stop() or piece.pause_ms < 0:
                continue
            samples = round(self.sample_rate * piece.pause_ms / 1000.0)
            if samples > 0:
                yield EngineChunk(pcm=np.zeros(samples, dtype=np.float32), text=piece.marker, timing=None)
