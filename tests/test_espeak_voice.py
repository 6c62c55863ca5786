"""Piper's phonemizer with espeak-ng's voice set once (workers/engines/espeak_voice.py): the same phonemes as when
piper sets it before every call, and the memory that each set used to keep is no longer taken."""

from __future__ import annotations

import gc

import pytest

pytest.importorskip("piper")

from piper import espeakbridge  # noqa: E402
from piper.phonemize_espeak import EspeakPhonemizer  # noqa: E402

from workers.engines.espeak_voice import install  # noqa: E402

pytestmark = pytest.mark.unit

SENTENCES = [
    "Turning on the kitchen lights.",
    "Your parcel arrives on Tuesday, March 3rd, between 9 and 11 a.m.",
    "Is it 42, or 4.2 percent?",
    "Dr. Smith's café serves crème brûlée; the naïve coöperation ends here!",
    "Set a timer for twenty-five minutes: then remind me to call Anna.",
]


def rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 / 2**20


def test_voice_set_once_gives_the_same_phonemes():
    phonemizer = EspeakPhonemizer()  # espeak-ng starts here
    install()
    original = getattr(espeakbridge.set_voice, "__wrapped__")  # noqa: B009  # the bridge's own set_voice
    expected = []
    for text in SENTENCES:  # as piper did before: the voice set before every call
        original("en-us")
        expected.append(espeakbridge.get_phonemes(text))
    original("en-us")
    assert [espeakbridge.get_phonemes(t) for t in SENTENCES] == expected
    assert all(phonemizer.phonemize("en-us", t) for t in SENTENCES)
    assert install() is False, "installed twice"


def test_a_repeated_voice_costs_no_memory():
    """Each espeak-ng voice set keeps about 1.3 KB for good (6.5 MiB per 5,000 sets, measured): with the memo,
    5,000 of piper's calls on one voice set it once."""
    install()
    phonemizer = EspeakPhonemizer()
    phonemizer.phonemize("en-us", "warm up")
    gc.collect()
    before = rss_mib()
    for _ in range(5000):
        espeakbridge.set_voice("en-us")
    gc.collect()
    assert rss_mib() - before < 1.0
