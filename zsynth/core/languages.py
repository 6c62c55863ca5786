"""The one check of a request's ``language_code`` against the languages its engine speaks.

Every synthesis transport (the ElevenLabs HTTP routes, both realtime sockets, the dialogue routes, Vapi) checks a
``language_code`` here before any job is built, so a language the engine cannot speak is refused rather than spoken by
a voice of another language. The languages are the engine profile's (:mod:`zsynth.core.engines`), which
``GET /v1/models`` lists too: a multilingual engine plugs in by listing its languages on its model card (and, once it
takes one, by carrying the code on its jobs).
"""

from __future__ import annotations

import re
from typing import Final

from zsynth.core.engines import profile

#: A code (or model id) longer than this is not echoed whole in the refusal: a hostile value stays out of the answer.
_MAX_ECHO: Final = 16
_MAX_MODEL_ECHO: Final = 64
# A language tag: a 2-3 letter language, then optional subtags (en, en-US, zh-Hant-TW, en_GB).
_TAG: Final = re.compile(r"[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{1,8})*")


class UnsupportedLanguage(ValueError):
    """A ``language_code`` the engine does not speak, or not a language code at all; ``message`` names it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def engine_languages(engine: str) -> tuple[str, ...]:
    """The language codes ``engine`` speaks (its profile's model card: :mod:`zsynth.core.engines`)."""
    return profile(engine).languages


def engine_model_id(engine: str) -> str:
    """The model id ``GET /v1/models`` lists for ``engine`` (named in the refusal when a request names none)."""
    return profile(engine).model.model_id


def _echo(value: str, limit: int = _MAX_ECHO) -> str:
    return value if len(value) <= limit else value[:limit] + "..."


def check_language_code(engine: str, model_id: str | None, code: object) -> str | None:
    """The language ``code`` asks for (its primary subtag, lower case), None when absent or empty.

    A region or script is accepted with its language (``en-US`` is English). Anything the engine does not speak, or
    that is not a string, raises :class:`UnsupportedLanguage` with ElevenLabs' own words for it.
    """
    if code is None or code == "":
        return None
    model = _echo(model_id or engine_model_id(engine), _MAX_MODEL_ECHO)
    if not isinstance(code, str):
        raise UnsupportedLanguage(f"Model '{model}' does not support language_code {_echo(repr(code))}.")
    language = code.strip()
    if not language:
        return None
    primary = re.split(r"[-_]", language, maxsplit=1)[0].lower()
    if _TAG.fullmatch(language) is None or primary not in engine_languages(engine):
        raise UnsupportedLanguage(f"Model '{model}' does not support language_code '{_echo(language)}'.")
    return primary
