"""Make the installed ``chatterbox-tts`` usable on a modern stack, without editing installed files.

Two known upstream bugs are worked around here, once per process, before a model is built:

* numpy >= 2: ``ChatterboxTurboTTS.norm_loudness`` returns float64 audio and conditioning then fails with
  "expected scalar type Double but found Float" (chatterbox #499); the wrapper hands back float32.
* setuptools >= 81: perth's ``PerthImplicitWatermarker`` silently becomes ``None`` (it imports pkg_resources);
  this is an install problem, so it is reported with the fix instead of a "'NoneType' object is not callable".

Also, the S3Gen decoder's per-call print and progress bar are silenced in that module (one per streamed chunk).
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np

INSTALL_HINT = "install the GPU engine with ./scripts/install-gpu (or ./scripts/install-gpu --cpu for tests)"


class TurboUnavailable(RuntimeError):
    """The turbo engine cannot start here; the message says what to do."""


def require_packages() -> None:
    """Import what the engine needs, or fail with the install command."""
    try:
        with warnings.catch_warnings():
            # perth imports pkg_resources (a UserWarning under setuptools<81, which it needs).
            warnings.simplefilter("ignore", UserWarning)
            import chatterbox.tts_turbo  # noqa: F401
            import torch  # noqa: F401
    except ImportError as err:
        raise TurboUnavailable(f"ZSYNTH_ENGINE=turbo needs chatterbox-tts and torch ({err}); {INSTALL_HINT}") from err


def apply_workarounds() -> None:
    """Patch the two known bugs in memory (idempotent)."""
    require_packages()
    import perth
    from chatterbox.tts_turbo import ChatterboxTurboTTS

    if getattr(perth, "PerthImplicitWatermarker", None) is None:
        raise TurboUnavailable(
            "perth.PerthImplicitWatermarker is None: setuptools>=81 removed pkg_resources, which resemble-perth "
            f"imports; pip install 'setuptools<81' ({INSTALL_HINT})"
        )
    # The S3Gen decoder prints a line and a progress bar on every call, that is on every streamed chunk: silence
    # them in that module only, so worker logs stay readable.
    from chatterbox.models.s3gen import flow_matching
    from tqdm import tqdm

    flow_matching.tqdm = functools.partial(tqdm, disable=True)
    flow_matching.print = lambda *args, **kwargs: None
    stock = ChatterboxTurboTTS.norm_loudness
    if getattr(stock, "_zsynth_float32", False):
        return

    def norm_loudness_f32(self: Any, wav: Any, sr: int, target_lufs: float = -27) -> np.ndarray:
        return np.asarray(stock(self, wav, sr, target_lufs), dtype=np.float32)

    setattr(norm_loudness_f32, "_zsynth_float32", True)  # noqa: B010 - marks the wrapper so a second call is a no-op
    ChatterboxTurboTTS.norm_loudness = norm_loudness_f32
