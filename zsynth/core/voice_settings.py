"""The synthesis parameters every transport checks the same way: ``voice_settings`` and ``seed``.

Plain functions with no web framework in them: the HTTP routes, both realtime sockets and request models call
them, and each renders :class:`InvalidParameter` in its own envelope (HTTP: 422 ``invalid_parameters`` with
``param``; a socket: an ``invalid_parameters`` error frame and close 1008).
"""

from __future__ import annotations

import math
from typing import Any, Final

from zsynth.core.codes import ApiCode

MAX_SEED: Final = 4294967295
# voice_settings fields that must be numbers when present.
NUMERIC_SETTINGS: Final = ("stability", "similarity_boost", "style", "speed")
#: Every voice_settings field a job carries (ElevenLabs' VoiceSettings); any other field is dropped.
KNOWN_SETTINGS: Final = (*NUMERIC_SETTINGS, "use_speaker_boost")


class InvalidParameter(ValueError):
    """A synthesis parameter of the wrong type or range; ``param`` names the field."""

    code: Final = ApiCode.INVALID_PARAMETERS

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


def check_voice_settings(raw: object) -> dict[str, Any]:
    """The request's known voice settings; each must have its documented type (null means "default").

    Unknown fields are dropped, not refused: ElevenLabs accepts fields it does not know silently (clients send newer
    ones, such as ``clone_strength``), and no engine reads them, so only the five known fields, each a number, a
    boolean or null, reach the job put on Redis. A number the engine's float() cannot hold (a 400-digit integer) or
    a non-finite one is refused here, before any job exists.
    """
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InvalidParameter("Field 'voice_settings' must be an object.", "voice_settings")
    for name in NUMERIC_SETTINGS:
        value = raw.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not _finite(value):
            raise InvalidParameter(f"voice_settings.{name} must be a number.", f"voice_settings.{name}")
    boost = raw.get("use_speaker_boost")
    if boost is not None and not isinstance(boost, bool):
        raise InvalidParameter(
            "voice_settings.use_speaker_boost must be true or false.", "voice_settings.use_speaker_boost"
        )
    return {name: raw[name] for name in KNOWN_SETTINGS if name in raw}


def check_seed(value: object) -> int | None:
    """The request's seed: None, or an integer 0..4294967295 (``42.0`` is 42, as in JSON Schema and JavaScript)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_SEED:
        raise InvalidParameter(f"Field 'seed' must be an integer 0..{MAX_SEED}.", "seed")
    return value


def _finite(value: float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False
