"""Pronunciation dictionaries: the use cases every transport shares, and the store's lifecycle.

:class:`DictionaryService` holds what a change means: the workspace rule (a caller sees and changes only its own
workspace's dictionaries, :mod:`zsynth.core.workspaces`; another workspace's is as missing as one that never existed),
PLS uploads, the rule edits that make new versions (within :data:`MAX_RULES`), archiving, deletion and the PLS
download. The routes parse a request and shape the answer.

Errors: :class:`DictionaryNotFound`, :class:`VersionNotFound`, :class:`InvalidLexicon` (an upload that is no PLS
lexicon), :class:`TooManyRules`, :class:`StorageUnavailable` (the store did not answer; nothing changed),
:class:`DictionaryUnreadable` (stored in a form this front cannot use) and :class:`RuleError` (rules the matcher
cannot compile). The routes map each to the API's envelope.

:func:`dictionaries_context` sets ``app[DICTIONARIES]``; the app factory registers it
(``zsynth.speech.routes.setup_services``), and the dictionary routes, the synthesis service and the realtime sockets
read the store it sets.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from zsynth.core.aws import client_config
from zsynth.core.text.dictionaries.rules import MAX_RULES, MAX_STRING_CHARS, Rule, RuleError, parse_pls, parse_rules
from zsynth.core.text.dictionaries.rules import to_pls as _to_pls
from zsynth.core.text.dictionaries.store import (
    BucketBackend,
    Dictionary,
    DictionaryStore,
    DictionaryUnreadable,
    DirectoryBackend,
    StorageUnavailable,
)
from zsynth.services.keys import DICTIONARIES, SETTINGS

__all__ = [
    "MAX_RULES",
    "MAX_STRING_CHARS",
    "Dictionary",
    "DictionaryNotFound",
    "DictionaryService",
    "DictionaryUnreadable",
    "InvalidLexicon",
    "Rule",
    "RuleError",
    "StorageUnavailable",
    "TooManyRules",
    "VersionNotFound",
    "dictionaries_context",
    "dictionary_service",
    "parse_rules",
]


class DictionaryNotFound(LookupError):
    """No such dictionary for the caller (unknown, or another workspace's)."""

    def __init__(self, dictionary_id: str) -> None:
        super().__init__(dictionary_id)
        self.dictionary_id = dictionary_id


class VersionNotFound(LookupError):
    """The dictionary has no such version for the caller."""

    def __init__(self, dictionary_id: str, version_id: str) -> None:
        super().__init__(dictionary_id, version_id)
        self.dictionary_id = dictionary_id
        self.version_id = version_id


class InvalidLexicon(ValueError):
    """An upload that is not a PLS lexicon these checks take (the parser's words)."""


class TooManyRules(ValueError):
    """A new version would hold more than :data:`MAX_RULES` rules."""


class DictionaryService:
    """The dictionary use cases over the store, each for one caller's workspace."""

    def __init__(self, store: DictionaryStore) -> None:
        self.store = store

    async def create(self, name: str, description: str | None, rules: list[Rule], workspace: str) -> Dictionary:
        """A new dictionary of ``workspace`` holding ``rules`` (its first version)."""
        return await self.store.create(name, description, rules, workspace)

    async def create_from_pls(self, name: str, description: str | None, lexicon: bytes, workspace: str) -> Dictionary:
        """A new dictionary of ``workspace`` from a PLS lexicon (:class:`InvalidLexicon` when it is not one)."""
        try:
            rules = await asyncio.to_thread(parse_pls, lexicon)
        except RuleError as err:
            raise InvalidLexicon(str(err)) from err
        return await self.create(name, description, rules, workspace)

    async def listing(
        self, workspace: str, *, include_archived: bool, by_name: bool, descending: bool
    ) -> list[dict[str, Any]]:
        """The metadata of ``workspace``'s dictionaries (archived ones only when asked), sorted by creation time or
        name (ties by id)."""
        metas = [m for m in await self.store.list(workspace) if include_archived or not m.get("archived_time_unix")]
        metas.sort(key=lambda m: (m["name"] if by_name else m["creation_time_unix"], m["id"]), reverse=descending)
        return metas

    async def get(self, dictionary_id: str, workspace: str, *, with_rules: bool = True) -> Dictionary:
        """A dictionary of ``workspace`` with its latest rules (``with_rules=False``: without reading them)."""
        dictionary = await self.store.get(dictionary_id, workspace, with_rules=with_rules)
        if dictionary is None:
            raise DictionaryNotFound(dictionary_id)
        return dictionary

    async def metadata(self, dictionary: Dictionary, workspace: str) -> dict[str, Any]:
        """The stored metadata of a dictionary (its name, archiving, latest version)."""
        return await self.store.visible(dictionary.id, workspace) or dictionary.meta()

    async def update(
        self, dictionary: Dictionary, workspace: str, *, name: str | None, archived: bool | None
    ) -> dict[str, Any]:
        """Rename or archive (``archived``: true) a dictionary; no new version is made. Answers its metadata."""
        meta = dict(await self.store.visible(dictionary.id, workspace, fresh=True) or dictionary.meta())
        if name is not None:
            meta["name"] = name
        if archived is not None:
            meta["archived_time_unix"] = int(time.time()) if archived else None
        await self.store.backend_put_meta(dictionary.id, meta)
        return meta

    async def delete(self, dictionary_id: str, workspace: str) -> None:
        """Delete a dictionary of ``workspace`` and its versions, for every front."""
        if not await self.store.delete(dictionary_id, workspace):
            raise DictionaryNotFound(dictionary_id)

    async def add_rules(self, dictionary: Dictionary, added: list[Rule]) -> Dictionary:
        """A new version with ``added`` (a rule for a string already there replaces it)."""
        strings = {rule.string_to_replace for rule in added}
        rules = [rule for rule in dictionary.rules if rule.string_to_replace not in strings] + added
        if len(rules) > MAX_RULES:  # every front re-reads the version through parse_rules, which holds to this bound
            raise TooManyRules(f"A dictionary holds at most {MAX_RULES} rules.")
        return await self.set_rules(dictionary, rules)

    async def remove_rules(self, dictionary: Dictionary, strings: set[str]) -> Dictionary:
        """A new version without the rules whose ``string_to_replace`` is in ``strings``."""
        return await self.set_rules(dictionary, [r for r in dictionary.rules if r.string_to_replace not in strings])

    async def set_rules(self, dictionary: Dictionary, rules: list[Rule]) -> Dictionary:
        """A new version holding exactly ``rules``."""
        return await self.store.save(dictionary, rules)

    async def download(self, dictionary_id: str, version_id: str, workspace: str) -> bytes:
        """One version of a dictionary of ``workspace`` as a PLS lexicon."""
        # Another workspace's dictionary: its versions are as missing as those of a dictionary that never existed.
        visible = await self.store.visible(dictionary_id, workspace)
        rules = await self.store.rules(dictionary_id, version_id) if visible is not None else None
        if rules is None:
            raise VersionNotFound(dictionary_id, version_id)
        return await asyncio.to_thread(_to_pls, rules)


def dictionary_service(app: web.Application) -> DictionaryService:
    """The dictionary service over an application's store (set by :func:`dictionaries_context`)."""
    return DictionaryService(app[DICTIONARIES])


async def dictionaries_context(app: web.Application) -> AsyncIterator[None]:
    """The dictionary store: the voices' bucket when set, else the data directory."""
    settings = app[SETTINGS]
    backend: BucketBackend | DirectoryBackend
    if settings.voices.bucket:
        backend = BucketBackend(settings.voices.bucket, settings.voices.dictionaries_prefix, client_config(settings))
        await backend.open()
    else:
        backend = DirectoryBackend(settings.data_dir / "dictionaries")
    app[DICTIONARIES] = DictionaryStore(backend, settings.voices.dictionary_cache_bytes)
    yield
    await app[DICTIONARIES].close()
