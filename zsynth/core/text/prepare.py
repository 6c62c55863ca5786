"""From a request's text to what the engine speaks: break tags, pronunciation dictionaries, then normalization.

The request fields (the same on every synthesis route and in the first message of both sockets):

* ``apply_text_normalization``: ``auto`` (default), ``on`` or ``off`` (see :mod:`zsynth.core.text.normalize`);
* ``pronunciation_dictionary_locators``: at most 3 ``{"pronunciation_dictionary_id", "version_id"?}`` (no version:
  the latest).

``<break time="1.5s" />`` (or ``"500ms"``) becomes a pause of that length, at most 3 s; any other markup is spoken
as written. Last, whatever the options (and without any: the avatar's ``speak``), every word longer than the engine's
bound is cut (:func:`zsynth.core.text.sentences.word_bound`, ZSYNTH_MAX_WORD_CHARS). The result is a
:class:`~zsynth.core.text.spoken.Spoken`; when nothing changed, the job carries the caller's text.

Last of all, the output bounds (:mod:`zsynth.core.text.bounds`): the result's pauses and the audio its words stand
for, whatever the normalization, are checked against the request's limits, and a text past them is refused with
TextOptionError 400 (``pause_limit_exceeded``, ``audio_limit_exceeded``). Every job's text goes through
:func:`prepare`, so no transport can skip the bound; :func:`admit` checks the texts of one request that a transport
cuts into several jobs (a dialogue's inputs, a socket message, a Wyoming stream) together, before any is queued.

The dictionaries are read first (the store's I/O, on the event loop); the CPU-bound rest (break tags, one pass of
every dictionary, normalization, word bounds, the estimate) runs on a thread for texts over :data:`THREAD_CHARS`
characters.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from zsynth.core.codes import ApiCode, CodedError
from zsynth.core.text import bounds, marks
from zsynth.core.text.dictionaries.matcher import Lexicon, apply_lexicons
from zsynth.core.text.dictionaries.store import DictionaryStore, DictionaryUnreadable
from zsynth.core.text.normalize import MODES, normalize, wants_normalization
from zsynth.core.text.sentences import word_bound
from zsynth.core.text.spoken import Spoken

MAX_LOCATORS: Final = 3
# Longer texts are prepared on a thread, so the event loop keeps serving others meanwhile (a 10,000 character text
# costs the normalization rules some 10-30 ms of CPU, and the dictionaries' pass up to some 20 ms).
THREAD_CHARS: Final = 1000
BREAK: Final = re.compile(r"<break\s+time\s*=\s*[\"'](?P<n>\d+(?:\.\d+)?)\s*(?P<unit>s|ms)[\"']\s*/?>", re.IGNORECASE)


class TextOptionError(CodedError, ValueError):
    """A bad text option; ``param`` names the field, ``http_status`` the answer over HTTP."""

    def __init__(self, code: str, message: str, param: str, http_status: int = 422) -> None:
        super().__init__(code, message)
        self.param = param
        self.http_status = http_status


@dataclass(frozen=True, slots=True)
class TextOptions:
    """The request's text options."""

    normalization: str = "auto"
    locators: tuple[tuple[str, str | None], ...] = field(default_factory=tuple)


def parse_normalization(value: object) -> str:
    """``apply_text_normalization``: auto, on or off (null means auto)."""
    if value is None:
        return "auto"
    if value not in MODES:
        raise TextOptionError(
            ApiCode.INVALID_PARAMETERS,
            "Field 'apply_text_normalization' must be 'auto', 'on' or 'off'.",
            "apply_text_normalization",
        )
    return str(value)


def parse_locators(value: object) -> tuple[tuple[str, str | None], ...]:
    """``pronunciation_dictionary_locators``: at most 3 ids, each with an optional version."""
    if value is None:
        return ()
    param = "pronunciation_dictionary_locators"
    if not isinstance(value, list):
        raise TextOptionError(ApiCode.INVALID_PARAMETERS, f"Field '{param}' must be a list.", param)
    if len(value) > MAX_LOCATORS:
        raise TextOptionError(
            ApiCode.INVALID_PARAMETERS, f"At most {MAX_LOCATORS} pronunciation dictionaries may be used at once.", param
        )
    locators = []
    for index, item in enumerate(value):
        dictionary_id = item.get("pronunciation_dictionary_id") if isinstance(item, dict) else None
        version_id = item.get("version_id") if isinstance(item, dict) else None
        # A blank id is refused here, for HTTP and the sockets alike (the HTTP model documents it as pattern \S).
        if not isinstance(dictionary_id, str) or not dictionary_id.strip() or not isinstance(version_id, str | None):
            raise TextOptionError(
                ApiCode.INVALID_PARAMETERS,
                f"{param}[{index}] must be {{'pronunciation_dictionary_id': str, 'version_id': str (optional)}}.",
                param,
            )
        locators.append((dictionary_id, version_id or None))
    return tuple(locators)


def parse_options(body: dict[str, Any], normalization: object = None) -> TextOptions:
    """The text options of a JSON body (``normalization`` overrides the body's, e.g. from a socket's query)."""
    raw = normalization if normalization is not None else body.get("apply_text_normalization")
    return TextOptions(parse_normalization(raw), parse_locators(body.get("pronunciation_dictionary_locators")))


def _pause(match: re.Match[str]) -> str:
    seconds = float(match["n"]) / (1000.0 if match["unit"].lower() == "ms" else 1.0)
    return marks.pause(round(min(seconds, marks.MAX_BREAK_MS / 1000.0) * 1000))


async def prepare(
    text: str,
    options: TextOptions | None,
    engine: str,
    store: DictionaryStore | None,
    *,
    workspace: str,
    limits: bounds.OutputLimits,
    max_word_chars: int | None = None,
) -> Spoken:
    """What the engine speaks for ``text``: the options applied (None: none), then its words bounded, then checked
    against ``limits``.

    ``max_word_chars`` is ZSYNTH_MAX_WORD_CHARS (None: the engine's bound). TextOptionError names a dictionary that
    does not exist, and just the same one of another workspace than ``workspace``, the caller's, or (400) the bound
    the text passes.
    """
    spoken, found = await _prepared(text, options, engine, store, workspace, max_word_chars)
    _check(found, limits)
    return spoken


async def admit(
    texts: Sequence[str],
    options: TextOptions | None,
    engine: str,
    store: DictionaryStore | None,
    *,
    workspace: str,
    limits: bounds.OutputLimits,
    before: bounds.OutputEstimate | None = None,
) -> bounds.OutputEstimate:
    """The estimate of ``texts``, the texts of one request that a transport speaks as several jobs, each through the
    text stage as :func:`prepare` would put it, added to ``before`` (what the request already asked for); the same
    TextOptionError as :func:`prepare` when the sum passes ``limits``."""
    found = before or bounds.OutputEstimate()
    for text in texts:
        found = found + (await _prepared(text, options, engine, store, workspace, None))[1]
    return _check(found, limits)


async def _prepared(
    text: str,
    options: TextOptions | None,
    engine: str,
    store: DictionaryStore | None,
    workspace: str,
    max_word_chars: int | None,
) -> tuple[Spoken, bounds.OutputEstimate]:
    lexicons = await _lexicons(options, store, workspace) if options is not None else []
    normalizing = options is not None and wants_normalization(options.normalization, engine)
    stage = functools.partial(
        _stage, text, options is not None, lexicons, engine, normalizing, word_bound(engine, max_word_chars)
    )
    if len(text) > THREAD_CHARS:
        return await asyncio.to_thread(stage)
    return stage()


def _check(found: bounds.OutputEstimate, limits: bounds.OutputLimits) -> bounds.OutputEstimate:
    try:
        return bounds.check(found, limits)
    except bounds.OutputTooLong as err:
        raise TextOptionError(err.code, err.message, "text", 400) from err


def _stage(
    text: str, tags: bool, lexicons: list[Lexicon], engine: str, normalizing: bool, bound: int
) -> tuple[Spoken, bounds.OutputEstimate]:
    """The CPU-bound text stage: break tags (when ``tags``), dictionaries, normalization (when asked), word bounds;
    then the estimate of what the result asks of the engine."""
    spoken = Spoken(text)
    if tags and "<" in text:
        spoken.rewrite(BREAK, _pause)
    if lexicons:
        apply_lexicons(spoken, lexicons, engine)
    if normalizing:
        normalize(spoken)
    spoken.cut_words(bound)
    return spoken, bounds.estimate(spoken.text, normalized=normalizing)


async def _lexicons(options: TextOptions, store: DictionaryStore | None, workspace: str) -> list[Lexicon]:
    """The compiled versions the locators name, in their order (a version named twice counts once: the second could
    never win). Another workspace's dictionary is refused as an unknown one is, before its version is read."""
    lexicons: dict[tuple[str, str], Lexicon] = {}
    for dictionary_id, version_id in options.locators:
        lexicon = None
        if store is not None:
            try:
                # Another workspace's: what an unknown dictionary gets (the same message, its version named alike).
                meta = await store.visible(dictionary_id, workspace)
                if meta is not None and version_id is None:
                    version_id = str(meta["latest_version_id"])
                if meta is not None and version_id is not None:
                    lexicon = await store.lexicon(dictionary_id, version_id)
            except DictionaryUnreadable as err:  # stored by another program: the caller's to mend, not ours
                raise TextOptionError(
                    ApiCode.PRONUNCIATION_DICTIONARY_UNREADABLE, str(err), "pronunciation_dictionary_locators"
                ) from err
        if lexicon is None:
            raise TextOptionError(
                ApiCode.PRONUNCIATION_DICTIONARY_NOT_FOUND,
                f"Pronunciation dictionary {dictionary_id!r}"
                + (f" version {version_id!r}" if version_id else "")
                + " does not exist.",
                "pronunciation_dictionary_locators",
                http_status=404,
            )
        assert version_id is not None
        lexicons.setdefault((dictionary_id, version_id), lexicon)
    return list(lexicons.values())
