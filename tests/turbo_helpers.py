"""What the Turbo tests share: a cloned voice written by the real store, and the CPU engine's settings."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import soundfile as sf

from zsynth.core.config import Settings
from zsynth.core.voices.store import VoiceStore

MAX_TOKENS = 24  # random weights rarely emit the stop token: cap every piece at about a second of audio


def make_voice(voice_dir: Path, seconds: float, pitch_hz: float, seed: int) -> Path:
    """A cloned voice written by the real voice store: a reference clip and its metadata, renamed into place."""
    from workers.engines.turbo_ckpt import reference_clip  # torch: only the Turbo tests import this module

    buf = io.BytesIO()
    sf.write(buf, reference_clip(seconds, pitch_hz=pitch_hz, seed=seed), 24000, format="WAV")
    meta = {"voice_id": voice_dir.name, "name": voice_dir.name, "reference": "reference.wav", "created_at_unix": 0}
    return VoiceStore(voice_dir.parent).install(meta, buf.getvalue()).path


def turbo_settings(ckpt: Path | None, data: Path, **overrides: Any) -> Settings:
    """Settings of a tiny Turbo on the CPU, one engine thread as in the worker processes (same sampled tokens);
    ``overrides`` as Settings.with_ takes them."""
    base = Settings(engine="turbo", data_dir=data, engine_threads=1).with_(
        turbo_checkpoint=ckpt, turbo_device="cpu", turbo_max_tokens=MAX_TOKENS, turbo_first_chunk_tokens=8
    )
    return base.with_(**overrides)
