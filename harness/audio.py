"""Audio checks: decode what a user receives, and judge whether it is speech."""

from __future__ import annotations

import io

import numpy as np
import soundfile as sf

from zsynth.core.audio import alaw_to_int16, parse_output_format, ulaw_to_int16


def decode_audio(data: bytes, output_format: str) -> tuple[np.ndarray, int]:
    """Decode bytes in an ElevenLabs output format to float32 mono samples and their rate."""
    fmt = parse_output_format(output_format, route="convert")
    if fmt.codec == "pcm":
        return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0, fmt.sample_rate
    if fmt.codec == "ulaw":
        return ulaw_to_int16(np.frombuffer(data, dtype=np.uint8)).astype(np.float32) / 32768.0, fmt.sample_rate
    if fmt.codec == "alaw":
        return alaw_to_int16(np.frombuffer(data, dtype=np.uint8)).astype(np.float32) / 32768.0, fmt.sample_rate
    samples, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    return samples[:, 0], int(rate)


def _frame_rms(samples: np.ndarray, rate: int) -> np.ndarray:
    """RMS level of each whole 20 ms frame."""
    frame = max(1, rate // 50)
    usable = len(samples) // frame * frame
    return np.asarray(np.sqrt((samples[:usable].reshape(-1, frame) ** 2).mean(axis=1)))


def voiced_fraction(samples: np.ndarray, rate: int) -> float:
    """Share of 20 ms frames whose RMS is over 0.02 (about -34 dBFS): frames that carry sound."""
    return _voiced(_frame_rms(samples, rate))


def _voiced(rms: np.ndarray) -> float:
    return float((rms > 0.02).mean()) if len(rms) else 0.0


def assert_speech(samples: np.ndarray, rate: int, text: str, min_voiced: float = 0.3) -> float:
    """Assert the audio is speech of plausible length for ``text``; return its duration in seconds.

    ``min_voiced`` is the share of 20 ms frames that must carry sound. 0.3 suits a sentence or more; a caller that
    knows what the same text sounds like alone (a soak) can set it from that.
    """
    duration = len(samples) / rate
    words = len(text.split())
    # Conversational English runs 2-4 words a second; allow a wide but failing-able band.
    assert words / 6.0 <= duration <= words / 1.0 + 1.5, f"{duration:.2f}s of audio for {words} words"
    rms = _frame_rms(samples, rate)
    voiced = _voiced(rms)
    assert voiced > min_voiced, f"only {voiced:.0%} of 20 ms frames carry sound: not speech"
    assert voiced < 0.995 or float(rms.std()) > 0.01, "no pauses and flat energy: not speech"
    return duration
