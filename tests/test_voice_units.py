"""The pitch estimator and shifter, and the store's atomic writes, without services."""

from __future__ import annotations

import json
import os
import subprocess
import time

import numpy as np
import pytest

from workers.engines.base import clamp_setting
from workers.engines.pitch import median_f0, pitch_shift
from zsynth.core.voices import VoiceStore
from zsynth.core.voices.store import LEFTOVER_AGE_S
from zsynth.services.voices import VoiceCatalog, new_clone_meta

RATE = 22050


def harmonic(f0: float, seconds: float = 3.0) -> np.ndarray:
    """A voiced-like tone: five harmonics with a slow vibrato, so the estimator has real periods to find."""
    t = np.arange(int(seconds * RATE)) / RATE
    phase = 2 * np.pi * np.cumsum(f0 * (1 + 0.01 * np.sin(2 * np.pi * 5 * t))) / RATE
    return (0.2 * np.sum([np.sin(k * phase) / k for k in range(1, 6)], axis=0)).astype(np.float32)


@pytest.mark.unit
@pytest.mark.parametrize("f0", [80.0, 120.0, 210.0, 330.0])
def test_estimator_finds_the_fundamental(f0):
    assert median_f0(harmonic(f0), RATE) == pytest.approx(f0, rel=0.02)


@pytest.mark.unit
def test_estimator_ignores_silence():
    assert median_f0(np.zeros(RATE * 2, np.float32), RATE) is None


@pytest.mark.unit
@pytest.mark.parametrize("semitones", [-5.0, 3.0, 7.0])
def test_shift_moves_pitch_and_keeps_duration(semitones):
    pcm = harmonic(140.0)
    shifted = pitch_shift(pcm, RATE, semitones)
    assert len(shifted) == len(pcm)
    assert median_f0(shifted, RATE) == pytest.approx(140.0 * 2 ** (semitones / 12), rel=0.03)


@pytest.mark.heavy
def test_store_writes_atomically_and_hides_unfinished_voices(tmp_path):
    store = VoiceStore(tmp_path / "voices")
    store.ensure()
    gone = subprocess.Popen(["true"])
    gone.wait()
    crashed = tmp_path / "voices" / f".tmp-{gone.pid}-a1"  # what a writer killed mid-way leaves
    crashed.mkdir()
    stale = tmp_path / "voices" / f".trash-{os.getpid()}-b2"  # a live pid, but an hour old: the pid was reused
    stale.mkdir()
    os.utime(stale, (time.time() - 2 * LEFTOVER_AGE_S,) * 2)
    writing = tmp_path / "voices" / f".tmp-{os.getpid()}-c3"  # another live writer sharing the directory
    writing.mkdir()
    meta = new_clone_meta("n", None, {}, [], 10.0, workspace="default")
    voice = store.install(meta, b"RIFF....")
    assert set(store.all()) == {voice.voice_id}
    assert json.loads((voice.path / "meta.json").read_text())["name"] == "n"
    with pytest.raises(FileExistsError):
        store.install(meta, b"RIFF....")
    # A directory without meta.json (never renamed in by install) is not a voice.
    (tmp_path / "voices" / "custom-halfwritten").mkdir()
    assert store.get("custom-halfwritten") is None
    assert store.get("../../etc") is None
    assert writing.exists()  # installing a voice leaves other writers alone
    VoiceStore(tmp_path / "voices").ensure()
    assert not crashed.exists() and not stale.exists() and writing.exists()
    assert store.remove(voice.voice_id) and not store.remove(voice.voice_id)
    assert store.all() == {}


@pytest.mark.unit
def test_catalog_resolution(tmp_path):
    store = VoiceStore(tmp_path)
    voice = store.install(new_clone_meta("n", None, {}, [], 10.0, workspace="default"), b"x")
    assert VoiceCatalog(store, "piper").resolve("nope") == "joe"
    assert VoiceCatalog(store, "piper", voice.voice_id).resolve("nope") == voice.voice_id
    assert VoiceCatalog(store, "piper").resolve(voice.voice_id) == voice.voice_id
    assert VoiceCatalog(store, "turbo").resolve("nope") == "default"


@pytest.mark.unit
@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.9, 0.9), ("0.3", 0.3), (5, 1.0), (-2, 0.0), (None, 0.5), ("x", 0.5), (10**400, 0.5), (float("nan"), 0.5)],
)
def test_voice_settings_are_clamped_or_defaulted(value, expected):
    assert clamp_setting(value, 0.0, 1.0, 0.5) == expected


@pytest.mark.unit
def test_saved_settings_take_only_whole_voice_ids(tmp_path):
    # "^...$" let a trailing newline through ($ matches before it): the settings file name would carry it.
    store = VoiceStore(tmp_path)
    with pytest.raises(ValueError, match="not a voice id"):
        store.save_builtin_settings("joe\n", 1, {"speed": 1.1})
    store.save_builtin_settings("joe", 1, {"speed": 1.1})
    assert store.builtin_settings("joe\n") == (0, {})
    assert store.builtin_settings("joe") == (1, {"speed": 1.1})
