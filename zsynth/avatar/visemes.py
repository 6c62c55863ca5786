"""Mouth cues from speech: phonemes (Piper's IPA or ARPAbet) to visemes, and audio energy to mouth openness.

The viseme set is Rhubarb Lip Sync's: A closed (P B M), B clenched teeth (most consonants, "ee"), C open (eh, ae),
D wide open (aa), E rounded (ao, er), F puckered (uw, ow, w), G F/V, H long L, X rest. Nine shapes are few enough
to draw by hand and enough for lips to read as speech.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import numpy.typing as npt

VISEMES: Final = ("X", "A", "B", "C", "D", "E", "F", "G", "H")
REST: Final = "X"

# IPA symbols as espeak-ng (and so Piper) writes them. Diacritics and stress marks map to nothing and are skipped.
_IPA: Final[dict[str, str]] = {
    **dict.fromkeys("pbmɱ", "A"),
    **dict.fromkeys("fv", "G"),
    **dict.fromkeys("θðtdkgŋɡszʃʒçxʝnɲjiɪyʏɾʔ", "B"),
    **dict.fromkeys("ɹrɻʁ", "E"),
    **dict.fromkeys("ɛeæəɐʌhɨ", "C"),
    **dict.fromkeys("ɑaɒ", "D"),
    **dict.fromkeys("ɔɜɚɝœø", "E"),
    **dict.fromkeys("uʊowɯɵ", "F"),
    **dict.fromkeys("lɫʎ", "H"),
}

# ARPAbet (CMUdict), for engines that report timing in it; stress digits are stripped before lookup.
_ARPABET: Final[dict[str, str]] = {
    **dict.fromkeys(("P", "B", "M"), "A"),
    **dict.fromkeys(("F", "V"), "G"),
    **dict.fromkeys(
        ("TH", "DH", "T", "D", "K", "G", "NG", "CH", "JH", "SH", "ZH", "S", "Z", "N", "Y", "IY", "IH"), "B"
    ),
    **dict.fromkeys(("EH", "EY", "AE", "AH", "AX", "HH"), "C"),
    **dict.fromkeys(("AA", "AY", "AW"), "D"),
    **dict.fromkeys(("AO", "OY", "ER", "R"), "E"),
    **dict.fromkeys(("OW", "UH", "UW", "W"), "F"),
    "L": "H",
}

_INDEX: Final = {name: i for i, name in enumerate(VISEMES)}
# Label used for audio that came without timing: the shape then follows the energy alone.
UNTIMED: Final = -1

# Loudness mapped to openness: -50 dBFS and below is a closed mouth, -15 dBFS and above fully open.
_DB_CLOSED: Final = -50.0
_DB_OPEN: Final = -15.0


def phoneme_viseme(phoneme: str) -> str:
    """The viseme for one phoneme; pauses, punctuation and unknown symbols give the rest shape."""
    unit = phoneme.strip()
    if not unit:
        return REST
    arpabet = unit.rstrip("012")
    if arpabet.isascii() and arpabet.isupper() and arpabet in _ARPABET:
        return _ARPABET[arpabet]
    for char in unit:
        shape = _IPA.get(char)
        if shape is not None:
            return shape
    return REST


def viseme_index(name: str) -> int:
    """Position of a viseme in :data:`VISEMES`."""
    return _INDEX[name]


def timing_labels(timing: list[Any], engine_samples: int, out_samples: int) -> npt.NDArray[np.int8]:
    """A viseme index per output sample, spreading the engine's per-phoneme sample counts over ``out_samples``.

    The engine counts samples at its own rate while the audio arrives resampled, so positions are scaled by the
    ratio of the two lengths; the few milliseconds the streaming resampler holds back are not worth correcting.
    """
    labels = np.full(out_samples, viseme_index(REST), dtype=np.int8)
    if engine_samples <= 0 or out_samples <= 0:
        return labels
    scale = out_samples / engine_samples
    pos = 0.0
    for unit, count in timing:
        end = pos + float(count) * scale
        start_i, end_i = round(pos), min(out_samples, round(end))
        if end_i > start_i:
            labels[start_i:end_i] = viseme_index(phoneme_viseme(str(unit)))
        pos = end
    return labels


def openness(pcm: npt.NDArray[np.int16]) -> float:
    """Mouth openness 0..1 from the loudness (dBFS) of a stretch of speech."""
    if pcm.size == 0:
        return 0.0
    rms = float(np.sqrt(np.mean(np.square(pcm.astype(np.float32)))) / 32768.0)
    if rms <= 0.0:
        return 0.0
    db = 20.0 * np.log10(rms)
    return float(np.clip((db - _DB_CLOSED) / (_DB_OPEN - _DB_CLOSED), 0.0, 1.0))
