"""The answer to ``describe``: one installed TTS program, ``zsynth``, with the voices of this box.

Home Assistant's parser fails on a program or voice without ``name``, ``attribution``, ``installed``, ``voices`` or
``languages``, and uses only ``installed`` ones: every field is always sent. A voice's ``name`` is its zsynth voice id
(what a client sends back in ``synthesize.voice.name``); its ``description``, which Home Assistant shows, is the
voice's display name. Every voice speaks what the engine speaks (its profile's languages: English today).
"""

from __future__ import annotations

from typing import Any, Final

from zsynth import __version__
from zsynth.core.engines import profile
from zsynth.services.voices import VoiceCatalog, builtin_voices

PROGRAM: Final = "zsynth"
_ZSYNTH: Final = {"name": "zsynth", "url": ""}


def _voice(voice_id: str, name: str, attribution: dict[str, str], languages: list[str]) -> dict[str, Any]:
    return {
        "name": voice_id,
        "attribution": attribution,
        "installed": True,
        "description": name,
        "version": None,
        "languages": languages,
        "speakers": None,
    }


def voices(engine: str, catalog: VoiceCatalog | None, workspace: str) -> list[dict[str, Any]]:
    """The voices of this box a Wyoming client sees: the engine's built-in voices, then the cloned voices of
    ``workspace`` (ZSYNTH_WYOMING_WORKSPACE), oldest first."""
    card = profile(engine).model
    builtin = {"name": card.attribution[0], "url": card.attribution[1]}
    languages = list(profile(engine).languages)
    if catalog is None:
        return [_voice(v.voice_id, v.name, builtin, languages) for v in builtin_voices(engine)]
    return [
        _voice(v["voice_id"], str(v["name"]), builtin if v["category"] == "premade" else _ZSYNTH, languages)
        for v in catalog.all(workspace)
    ]


def info(engine: str, catalog: VoiceCatalog | None, workspace: str) -> dict[str, Any]:
    """The ``info`` event's data."""
    program = {
        "name": PROGRAM,
        "attribution": _ZSYNTH,
        "installed": True,
        "description": "zsynth: Piper and cloned voices, streamed sentence by sentence",
        "version": __version__,
        "voices": voices(engine, catalog, workspace),
        "supports_synthesize_streaming": True,
    }
    return {"asr": [], "tts": [program], "handle": [], "intent": [], "wake": [], "mic": [], "snd": []}
