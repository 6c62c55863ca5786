"""Piper's phonemizer sets espeak-ng's voice before every call, and each set costs memory that is never freed.

``piper.phonemize_espeak.EspeakPhonemizer.phonemize`` calls ``espeakbridge.set_voice(voice)`` and then
``espeakbridge.get_phonemes(text)`` for every text. espeak-ng copies the voice on each set into a buffer that only its
audio path frees, and the phonemes path never runs it: measured here, 1.3 KB of RSS per set that is never returned,
which was 75 % of a Piper worker's steady growth in the 60-minute chaos soak (docs/operations.md). The voice is the
same call after call (one espeak voice per Piper voice), so the bridge's ``set_voice`` is replaced by one that
passes a voice on to espeak-ng only when it differs from the last one set. espeak-ng's voice is process-wide state,
so the memo is too; a lock keeps a change of voice and its note together.

The remaining 0.5 KB per ``get_phonemes`` call is inside piper's bridge and is not reachable from here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

_lock = threading.Lock()


def install(bridge: Any = None) -> bool:
    """Make ``bridge.set_voice`` (piper's espeakbridge by default) skip repeats of the voice already set; True when
    this call installed it, False when it was installed already. The bridge's own function stays reachable as
    ``bridge.set_voice.__wrapped__``."""
    if bridge is None:
        from piper import espeakbridge as bridge
    with _lock:
        if hasattr(bridge.set_voice, "__wrapped__"):
            return False
        bridge.set_voice = _memo(bridge.set_voice)
        return True


def _memo(set_voice: Callable[[str], Any]) -> Callable[[str], Any]:
    last: list[str | None] = [None]

    def set_voice_once(voice: str) -> Any:
        with _lock:
            if voice == last[0]:
                return None
            result = set_voice(voice)
            last[0] = voice  # only once espeak-ng took it: a voice it refused is tried again next time
            return result

    set_voice_once.__wrapped__ = set_voice  # type: ignore[attr-defined]  # marks the wrapper: never wrapped twice
    return set_voice_once
