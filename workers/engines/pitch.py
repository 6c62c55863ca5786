"""Pitch tools in numpy: a YIN pitch estimator and a duration-keeping pitch shifter (WSOLA stretch + resampling).

The CPU engine has one speaker, so a cloned voice is approximated by moving that speaker's pitch to the reference's
median pitch. Shifting by resampling alone would also change the duration; stretching the time axis first by the
same ratio with WSOLA (waveform-similarity overlap-add, which keeps pitch) and then resampling gives back the
original duration at the new pitch. Formants move with the pitch, as in any resampling-based shifter.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import soxr

F0_MIN: Final = 60.0
F0_MAX: Final = 500.0
_YIN_THRESHOLD: Final = 0.15


def _frames(x: np.ndarray, length: int, hop: int) -> np.ndarray:
    count = 1 + (len(x) - length) // hop
    idx = np.arange(length)[None, :] + hop * np.arange(count)[:, None]
    frames: np.ndarray = x[idx]
    return frames


def f0_track(pcm: np.ndarray, rate: int, hop_s: float = 0.01) -> np.ndarray:
    """Per-frame fundamental frequency in Hz (YIN, 30 ms window); 0 where a frame is unvoiced or quiet."""
    x = np.asarray(pcm, dtype=np.float64)
    window = int(0.03 * rate)
    tau_min = int(rate / F0_MAX)
    tau_max = int(rate / F0_MIN) + 1
    length = window + tau_max
    if len(x) < length:
        return np.zeros(0)
    frames = _frames(x, length, max(1, int(hop_s * rate)))
    frames = frames - frames.mean(axis=1, keepdims=True)
    n_fft = 1 << int(np.ceil(np.log2(length + window)))
    # Difference function d(tau) = e(0) + e(tau) - 2 r(tau), with r computed by FFT cross-correlation.
    spec_full = np.fft.rfft(frames, n_fft)
    spec_head = np.fft.rfft(frames[:, :window], n_fft)
    corr = np.fft.irfft(np.conj(spec_head) * spec_full, n_fft)[:, : tau_max + 1]
    energy = np.concatenate([np.zeros((len(frames), 1)), np.cumsum(frames**2, axis=1)], axis=1)
    shifted = energy[:, window : window + tau_max + 1] - energy[:, : tau_max + 1]
    diff = np.maximum(shifted[:, :1] + shifted - 2 * corr, 0.0)
    # Cumulative mean normalised difference.
    cum = np.cumsum(diff[:, 1:], axis=1)
    cmnd = np.ones_like(diff)
    cmnd[:, 1:] = diff[:, 1:] * np.arange(1, tau_max + 1) / np.maximum(cum, 1e-12)
    rms = np.sqrt((frames[:, :window] ** 2).mean(axis=1))
    loud = rms > max(0.01, 0.05 * float(rms.max(initial=0.0)))
    f0 = np.zeros(len(frames))
    for i in np.flatnonzero(loud):
        row = cmnd[i]
        below = np.flatnonzero(row[tau_min:tau_max] < _YIN_THRESHOLD)
        if below.size == 0:
            continue
        tau = tau_min + int(below[0])
        while tau + 1 < tau_max and row[tau + 1] < row[tau]:
            tau += 1
        a, b, c = row[tau - 1], row[tau], row[tau + 1]
        denom = a - 2 * b + c
        offset = 0.5 * (a - c) / denom if abs(denom) > 1e-12 else 0.0
        f0[i] = rate / (tau + float(np.clip(offset, -1.0, 1.0)))
    return f0


def median_f0(pcm: np.ndarray, rate: int) -> float | None:
    """Median pitch of the voiced frames in Hz, or None when fewer than 10 frames are voiced."""
    track = f0_track(pcm, rate)
    voiced = track[track > 0]
    if voiced.size < 10:
        return None
    return float(np.median(voiced))


def time_stretch(pcm: np.ndarray, factor: float, rate: int) -> np.ndarray:
    """Make ``pcm`` ``factor`` times longer at the same pitch (WSOLA: 40 ms Hann frames, 10 ms search)."""
    x = np.asarray(pcm, dtype=np.float32)
    frame = int(0.04 * rate) & ~1
    hop_out = frame // 2
    hop_in = hop_out / factor
    delta = int(0.01 * rate)
    n_out = int(round(len(x) * factor))
    n_frames = n_out // hop_out + 2
    pad_end = int(n_frames * hop_in) + frame + 2 * delta + hop_out
    xp = np.concatenate([np.zeros(delta, np.float32), x, np.zeros(max(0, pad_end - len(x)), np.float32)])
    win = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(frame) / frame)).astype(np.float32)
    out = np.zeros(n_frames * hop_out + frame, np.float32)
    norm = np.zeros_like(out)
    prev = delta
    for k in range(n_frames):
        ideal = delta + int(k * hop_in)
        if k == 0:
            pos = ideal
        else:
            # Pick the input frame near its ideal place that best continues the previous frame's waveform.
            template = xp[prev + hop_out : prev + hop_out + frame]
            region = xp[ideal - delta : ideal + delta + frame]
            pos = ideal - delta + int(np.argmax(np.correlate(region, template, mode="valid")))
        out[k * hop_out : k * hop_out + frame] += xp[pos : pos + frame] * win
        norm[k * hop_out : k * hop_out + frame] += win
        prev = pos
    result: np.ndarray = (out / np.maximum(norm, 1e-3)).astype(np.float32, copy=False)
    return result[:n_out]


def pitch_shift(pcm: np.ndarray, rate: int, semitones: float) -> np.ndarray:
    """Shift pitch by ``semitones`` keeping the number of samples: stretch by the ratio, then resample back."""
    x: np.ndarray = np.asarray(pcm, dtype=np.float32)
    if abs(semitones) < 0.05 or len(x) < rate // 20:
        return x
    ratio = float(2.0 ** (semitones / 12.0))
    stretched = time_stretch(x, ratio, rate)
    shifted: np.ndarray = soxr.resample(stretched, rate * ratio, rate, quality="HQ").astype(np.float32, copy=False)
    if len(shifted) >= len(x):
        return shifted[: len(x)]
    return np.concatenate([shifted, np.zeros(len(x) - len(shifted), np.float32)])
