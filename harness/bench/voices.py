#!/usr/bin/env python3
"""Benchmark the CPU engine's cloned voices: how far the pitch follows a reference, and what cloning costs.

Runs in one process, no services: Piper synthesizes a reference text, that speech is pitch-shifted by
``--reference-shift`` semitones to stand in for another speaker, stored as a clone, and a test text is then
synthesized with the built-in voice and with the clone. Prints median pitches (YIN on voiced frames), the pitch
shifter's speed, and the time to decode and validate a reference upload per format.

    python -m harness.bench voices [--reference-shift 5] [--threads 1]     (from the repository root)
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

from workers.engines.base import VoiceSpec
from workers.engines.piper import PiperEngine
from workers.engines.pitch import median_f0, pitch_shift
from zsynth.core.voices import VoiceStore
from zsynth.core.voices.clips import build_reference, decode_clip, encode_wav
from zsynth.services.voices import new_clone_meta

REFERENCE_TEXT = (
    "Every morning the baker opens the shop before sunrise. "
    "Fresh bread fills the street with a warm smell, and the first customers wait at the door. "
    "By noon the shelves are empty, so he starts again for the evening."
)
TEST_TEXT = "Good evening. This is a test of the cloned voice, spoken slowly and clearly for everyone here."
FORMATS = {"wav": ("WAV", "PCM_16"), "flac": ("FLAC", None), "ogg": ("OGG", "VORBIS"), "mp3": ("MP3", None)}


def speak(engine: PiperEngine, text: str, voice: VoiceSpec) -> np.ndarray:
    """Whole-text synthesis as one array."""
    return np.concatenate([c.pcm for c in engine.synthesize(text, voice, {}, lambda: False)])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--reference-shift", type=float, default=5.0, help="semitones (default 5)")
    parser.add_argument("--threads", type=int, default=1)


def bench(args: argparse.Namespace) -> None:
    """Run the benchmark and print its figures."""

    engine = PiperEngine(threads=args.threads)
    engine.warm_up()
    rate = engine.sample_rate
    speech = speak(engine, REFERENCE_TEXT, VoiceSpec("joe"))
    started = time.perf_counter()
    reference = pitch_shift(speech, rate, args.reference_shift)
    shift_s = time.perf_counter() - started
    seconds = len(speech) / rate
    print(f"pitch shift: {seconds:.1f} s of audio in {shift_s * 1000:.0f} ms ({seconds / shift_s:.0f}x real time)")

    for fmt, (container, subtype) in FORMATS.items():
        buf = io.BytesIO()
        sf.write(buf, reference, rate, format=container, subtype=subtype)
        data = buf.getvalue()
        started = time.perf_counter()
        build_reference([decode_clip(data, f"ref.{fmt}", 50 * 1024 * 1024)])
        print(
            f"decode+validate {fmt:4s}: {len(data) / 1024:7.0f} KiB in {(time.perf_counter() - started) * 1000:5.0f} ms"
        )

    with tempfile.TemporaryDirectory() as tmp:
        store = VoiceStore(Path(tmp))
        clip = decode_clip(encode_wav(reference), "ref.wav", 50 * 1024 * 1024)
        pcm = build_reference([clip])
        stored = store.install(
            new_clone_meta("bench", None, {}, [clip.sample()], len(pcm) / 24000, workspace="default"), encode_wav(pcm)
        )
        voice = VoiceSpec(stored.voice_id, str(stored.path), stored.meta)
        started = time.perf_counter()
        engine.reference_f0(voice)
        print(f"reference pitch measured once in {(time.perf_counter() - started) * 1000:.0f} ms, then cached")
        base = speak(engine, TEST_TEXT, VoiceSpec("joe"))
        started = time.perf_counter()
        cloned = speak(engine, TEST_TEXT, voice)
        clone_s = time.perf_counter() - started
        started = time.perf_counter()
        speak(engine, TEST_TEXT, VoiceSpec("joe"))
        base_s = time.perf_counter() - started

    ref_f0, base_f0, clone_f0 = median_f0(reference, rate), median_f0(base, rate), median_f0(cloned, rate)
    assert ref_f0 and base_f0 and clone_f0
    print(f"median pitch: built-in {base_f0:.1f} Hz, reference {ref_f0:.1f} Hz, clone {clone_f0:.1f} Hz")
    gap_before = abs(np.log2(ref_f0 / base_f0)) * 12
    gap_after = abs(np.log2(ref_f0 / clone_f0)) * 12
    print(f"distance to the reference: {gap_before:.2f} semitones -> {gap_after:.2f} semitones")
    print(f"duration: built-in {len(base) / rate:.2f} s, clone {len(cloned) / rate:.2f} s")
    print(f"synthesis time: built-in {base_s * 1000:.0f} ms, clone {clone_s * 1000:.0f} ms (same text)")
