"""A stand-in engine for LOAD TESTS ONLY: it holds the worker's slot for a set time per chunk and emits real PCM.

It lets one small box stand in for a host with many GPUs (dozens of lightweight workers). It cannot be chosen by
accident: ``ZSYNTH_ENGINE=simulated`` is refused unless ``ZSYNTH_LOAD_TEST_ONLY=1`` is also set, and a worker
running it says so in every heartbeat (engine ``simulated``) and in its start-up log.

The audio is a buzz with a syllable-rate envelope (a 120 Hz harmonic series, 4 Hz amplitude modulation): real
samples that encode, resample and decode like speech, at about 2.5 words per second of text.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from zsynth.core.config import Settings

from .base import EngineChunk, VoiceSpec

SAMPLE_RATE = 24000
WORDS_PER_SECOND = 2.5


class SimulatedEngine:
    """Sleeps ``chunk_hold_s`` per chunk of ``chunk_audio_s`` seconds of synthetic audio."""

    name = "simulated"
    sample_rate = SAMPLE_RATE

    def __init__(self, chunk_hold_s: float, chunk_audio_s: float) -> None:
        self.chunk_hold_s = chunk_hold_s
        self.chunk_audio_s = chunk_audio_s
        n = int(round(chunk_audio_s * SAMPLE_RATE))
        t = np.arange(n, dtype=np.float32) / SAMPLE_RATE
        tone = sum(np.sin(2 * math.pi * 120 * k * t) / k for k in range(1, 6))
        envelope = 0.5 * (1 - np.cos(2 * math.pi * 4 * t)) * 0.25
        self._chunk = (tone * envelope).astype(np.float32)

    def warm_up(self) -> None:
        """Nothing to warm."""

    def forget_voice(self, voice_id: str) -> None:
        """Nothing is kept about voices."""

    def synthesize(
        self,
        text: str,
        voice: VoiceSpec,
        settings: Mapping[str, Any],
        should_stop: Callable[[], bool],
        seed: int | None = None,
        timing: bool = True,  # noqa: ARG002  # its timing costs nothing: always given
    ) -> Iterator[EngineChunk]:
        """Yield ceil(audio / chunk) chunks, each after holding the slot for chunk_hold_s.

        The words are shared out over the chunks in order (each chunk's ``text`` is its share), as a streaming
        engine speaks them, so the alignment built from the chunks spells the text once.
        """
        words = text.split() or [text]
        chunks = max(1, math.ceil(len(words) / WORDS_PER_SECOND / self.chunk_audio_s))
        for index in range(chunks):
            if should_stop():
                return
            time.sleep(self.chunk_hold_s)
            share = words[index * len(words) // chunks : (index + 1) * len(words) // chunks]
            yield EngineChunk(pcm=self._chunk, text=" ".join(share))


def load(settings: Settings) -> SimulatedEngine:
    """The engine of this profile (``zsynth.core.engines.SIMULATED``), only with its explicit second switch."""
    if not settings.sim.load_test_only:
        raise ValueError(
            "ZSYNTH_ENGINE=simulated is the load-test stand-in and makes no speech; "
            "set ZSYNTH_LOAD_TEST_ONLY=1 as well if that is really what you want"
        )
    return SimulatedEngine(settings.sim.chunk_hold_s, settings.sim.chunk_audio_s)
