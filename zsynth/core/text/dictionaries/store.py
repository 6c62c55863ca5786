"""Durable, versioned storage of pronunciation dictionaries, shared by every front.

Where: the voices' bucket (ZSYNTH_VOICES_BUCKET) under ``<ZSYNTH_DICTIONARIES_PREFIX>``, else this box's data
directory (``<data_dir>/dictionaries/``, shared by the fronts of the box). Objects::

    <id>/<version_id>.json   one version: its rules (written once, never changed)
    <id>/meta.json           name, description, creation time, latest version: written after the version it names

A version is immutable, so a front keeps the versions it has read or written in memory, compiled for matching
(:class:`~zsynth.core.text.dictionaries.matcher.Lexicon`, built on a thread), least recently used dropped first past
``ZSYNTH_DICTIONARY_CACHE_BYTES``. Which version is the latest (and whether the dictionary still exists) is read
again when older than :data:`LATEST_TTL_S`: a locator without ``version_id`` sees another front's change, and every
locator another front's delete, within that time. Unknown ids and versions are remembered as unknown for that time,
in a cache of bounded size too, and a version that cannot be read (too large, or rules these checks refuse: written
by another program or an older front) is remembered as such: :class:`DictionaryUnreadable`, never read again.
While the storage cannot be reached, synthesis keeps using what this front last read; changes fail with
StorageUnavailable and change nothing. Two changes racing on one dictionary: the later meta.json wins (each change
is a whole version); a change racing a delete may bring the dictionary back.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from zsynth.core.aws import S3Prefix
from zsynth.core.optional import aws_errors, client_error
from zsynth.core.text.dictionaries.cache import ByteBudgetCache
from zsynth.core.text.dictionaries.matcher import Lexicon
from zsynth.core.text.dictionaries.rules import MAX_RULES, MAX_STRING_CHARS, Rule, RuleError, parse_rules
from zsynth.core.voices.bucket import is_missing

logger = logging.getLogger(__name__)

LATEST_TTL_S: Final = 2.0
META: Final = "meta.json"
# The largest version object read: MAX_RULES rules of two strings at their longest, each character written as a
# six-byte JSON escape at worst, with room for the field names. A larger one was not written by these checks.
MAX_VERSION_BYTES: Final = MAX_RULES * (2 * MAX_STRING_CHARS * 6 + 256)
MAX_META_BYTES: Final = 64 * 1024
# meta.json files (and ids found missing) kept between reads, and versions found missing or unreadable: what
# unknown ids can make a front hold is bounded by these budgets (an entry costs at least ENTRY_BYTES).
METAS_BUDGET: Final = 4 * 1024 * 1024
MISSES_BUDGET: Final = 1024 * 1024
ENTRY_BYTES: Final = 1024


class StorageUnavailable(Exception):
    """The storage could not be reached; nothing was changed."""


class DictionaryUnreadable(Exception):
    """A dictionary or version is stored, but not in a form this front can use; the message says why."""


class ObjectTooLarge(Exception):
    """A stored object is larger than the reader's limit (it was not read)."""


@dataclass(slots=True)
class Dictionary:
    """A dictionary's metadata and its latest version's rules."""

    id: str
    name: str
    description: str | None
    created_at: int
    version_id: str
    rules: list[Rule] = field(default_factory=list)

    def meta(self) -> dict[str, Any]:
        """What meta.json holds."""
        return {
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "creation_time_unix": self.created_at,
            "latest_version_id": self.version_id,
            "latest_version_rules_num": len(self.rules),
        }


class Backend(Protocol):
    """Bytes under keys: the bucket or a directory."""

    async def get(self, key: str, limit: int) -> bytes | None: ...
    async def put(self, key: str, body: bytes) -> None: ...
    async def remove(self, dictionary_id: str) -> None: ...
    async def ids(self) -> list[str]: ...
    async def close(self) -> None: ...


class DirectoryBackend:
    """Files under a directory, written to a temporary name and renamed into place."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _get(self, key: str, limit: int) -> bytes | None:
        try:
            with (self.root / key).open("rb") as file:
                body = file.read(limit + 1)
        except FileNotFoundError:
            return None
        if len(body) > limit:
            raise ObjectTooLarge(key)
        return body

    def _remove(self, dictionary_id: str) -> None:
        folder = self.root / dictionary_id
        # meta.json first: from then on the dictionary is gone, whatever happens to its versions.
        (folder / META).unlink(missing_ok=True)
        shutil.rmtree(folder, ignore_errors=True)

    def _put(self, key: str, body: bytes) -> None:
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
        tmp.write_bytes(body)
        os.replace(tmp, path)

    def _ids(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return [p.name for p in self.root.iterdir() if (p / META).is_file()]

    async def get(self, key: str, limit: int) -> bytes | None:
        return await asyncio.to_thread(self._get, key, limit)

    async def put(self, key: str, body: bytes) -> None:
        await asyncio.to_thread(self._put, key, body)

    async def remove(self, dictionary_id: str) -> None:
        await asyncio.to_thread(self._remove, dictionary_id)

    async def ids(self) -> list[str]:
        return await asyncio.to_thread(self._ids)

    async def close(self) -> None:
        return None


class BucketBackend(S3Prefix):
    """Objects under ``s3://bucket/prefix`` (endpoint and credentials from the standard AWS variables)."""

    async def get(self, key: str, limit: int) -> bytes | None:
        try:
            obj = await self._s3.get_object(Bucket=self.bucket, Key=self.prefix + key)
        except client_error() as err:
            if is_missing(err):
                return None
            raise
        async with obj["Body"] as body:
            if int(obj.get("ContentLength") or 0) > limit:
                raise ObjectTooLarge(key)  # not downloaded: leaving the block closes the stream
            return bytes(await body.read())

    async def remove(self, dictionary_id: str) -> None:
        folder = f"{self.prefix}{dictionary_id}/"
        # meta.json first: from then on the dictionary is gone, whatever happens to its versions.
        await self._s3.delete_object(Bucket=self.bucket, Key=folder + META)
        paginator = self._s3.get_paginator("list_objects_v2")
        async for page in paginator.paginate(Bucket=self.bucket, Prefix=folder):
            keys = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
            if keys:
                await self._s3.delete_objects(Bucket=self.bucket, Delete={"Objects": keys, "Quiet": True})

    async def put(self, key: str, body: bytes) -> None:
        await self._s3.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=body, ContentType="application/json")

    async def ids(self) -> list[str]:
        found: list[str] = []
        paginator = self._s3.get_paginator("list_objects_v2")
        async for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix):
            for obj in page.get("Contents", []):
                head, _, name = str(obj["Key"])[len(self.prefix) :].partition("/")
                if name == META:
                    found.append(head)
        return found


def new_id() -> str:
    """A fresh random id (dictionaries and versions)."""
    return secrets.token_hex(10)


class DictionaryStore:
    """Dictionaries and their versions over a :class:`Backend`, with what was read cached in bounded memory."""

    def __init__(self, backend: Backend, cache_bytes: int = 32 * 1024 * 1024) -> None:
        self.backend = backend
        self._versions: ByteBudgetCache[tuple[str, str], Lexicon] = ByteBudgetCache(cache_bytes)
        self._latest: ByteBudgetCache[str, tuple[float, dict[str, Any] | None]] = ByteBudgetCache(METAS_BUDGET)
        # A version found missing (for LATEST_TTL_S: another front may be writing it) or unreadable (for good).
        self._misses: ByteBudgetCache[tuple[str, str], tuple[float, str | None]] = ByteBudgetCache(MISSES_BUDGET)

    async def _call(self, coro: Any) -> Any:
        try:
            return await coro
        except aws_errors() as err:
            raise StorageUnavailable(str(err)) from err

    def _remember_meta(self, dictionary_id: str, meta: dict[str, Any] | None, size: int) -> None:
        self._latest.put(dictionary_id, (time.monotonic(), meta), ENTRY_BYTES + size)

    async def meta(self, dictionary_id: str, *, fresh: bool = False) -> dict[str, Any] | None:
        """A dictionary's meta.json (None: no such dictionary); cached for :data:`LATEST_TTL_S` unless ``fresh``."""
        cached = self._latest.get(dictionary_id)
        now = time.monotonic()
        if cached is not None and not fresh and now - cached[0] < LATEST_TTL_S:
            return cached[1]
        if not _valid_id(dictionary_id):
            return None
        try:
            raw = await self._call(self.backend.get(f"{dictionary_id}/{META}", MAX_META_BYTES))
        except StorageUnavailable:
            if cached is not None and not fresh:
                # Synthesis goes on with the version this front last saw, and asks the storage again after a while.
                self._remember_meta(dictionary_id, cached[1], 0)
                return cached[1]
            raise
        except ObjectTooLarge as err:
            raise DictionaryUnreadable(
                f"Pronunciation dictionary {dictionary_id!r} has a meta.json that is too large."
            ) from err
        meta = _checked_meta(dictionary_id, raw) if raw is not None else None
        self._remember_meta(dictionary_id, meta, len(raw or b""))
        return meta

    async def rules(self, dictionary_id: str, version_id: str) -> list[Rule] | None:
        """The rules of one version (None: no such version, or its dictionary was deleted).

        DictionaryUnreadable: the version is stored but cannot be used (too large, or rules these checks refuse).
        """
        lexicon = await self.lexicon(dictionary_id, version_id)
        return lexicon.rules if lexicon is not None else None

    async def lexicon(self, dictionary_id: str, version_id: str) -> Lexicon | None:
        """One version's rules compiled for matching (None and DictionaryUnreadable as :meth:`rules`)."""
        if not (_valid_id(dictionary_id) and _valid_id(version_id)):
            return None
        key = (dictionary_id, version_id)
        cached = self._versions.get(key)
        try:
            exists = await self.meta(dictionary_id) is not None
        except StorageUnavailable:
            if cached is None:
                raise
            return cached  # the storage is away: speak what this front last read
        if not exists:
            return None
        if cached is not None:
            return cached
        miss = self._misses.get(key)
        if miss is not None and (miss[1] is not None or time.monotonic() - miss[0] < LATEST_TTL_S):
            if miss[1] is not None:
                raise DictionaryUnreadable(miss[1])
            return None
        return await self._read_version(dictionary_id, version_id)

    async def _read_version(self, dictionary_id: str, version_id: str) -> Lexicon | None:
        key = (dictionary_id, version_id)
        try:
            raw = await self._call(self.backend.get(f"{dictionary_id}/{version_id}.json", MAX_VERSION_BYTES))
            if raw is None:
                self._misses.put(key, (time.monotonic(), None), ENTRY_BYTES)
                return None
            # Parsed and compiled on a thread: a large version costs its first reader up to seconds of CPU.
            lexicon = await asyncio.to_thread(_parse_version, raw)
        except (ObjectTooLarge, RuleError) as err:
            reason = "it is too large" if isinstance(err, ObjectTooLarge) else str(err)
            message = (
                f"Pronunciation dictionary {dictionary_id!r} version {version_id!r} is stored in a form this server "
                f"cannot use ({reason}); set its rules again or delete it."
            )
            logger.warning("dictionary %s version %s cannot be used: %s", dictionary_id, version_id, reason)
            self._misses.put(key, (time.monotonic(), message), ENTRY_BYTES + len(message))
            raise DictionaryUnreadable(message) from err
        self._versions.put(key, lexicon, lexicon_bytes(lexicon))
        return lexicon

    async def get(self, dictionary_id: str, *, with_rules: bool = True) -> Dictionary | None:
        """The dictionary with its latest rules (none unless ``with_rules``), read fresh."""
        meta = await self.meta(dictionary_id, fresh=True)
        if meta is None:
            return None
        version_id = str(meta["latest_version_id"])
        rules = (await self.rules(dictionary_id, version_id) or []) if with_rules else []
        return Dictionary(
            dictionary_id,
            str(meta["name"]),
            meta.get("description"),
            int(meta["creation_time_unix"]),
            version_id,
            rules,
        )

    async def save(self, dictionary: Dictionary, rules: list[Rule]) -> Dictionary:
        """Write ``rules`` as a new version of ``dictionary``, then make it the latest (the commit); RuleError: rules
        the matcher cannot compile (nothing is written)."""
        version_id = new_id()
        body = json.dumps({"rules": [rule.to_json() for rule in rules]}, ensure_ascii=False).encode()
        lexicon = await asyncio.to_thread(Lexicon, rules)  # compiled once, before any request names it
        await self._call(self.backend.put(f"{dictionary.id}/{version_id}.json", body))
        self._versions.put((dictionary.id, version_id), lexicon, lexicon_bytes(lexicon))
        saved = Dictionary(
            dictionary.id, dictionary.name, dictionary.description, dictionary.created_at, version_id, rules
        )
        previous = await self.meta(dictionary.id, fresh=True) if dictionary.version_id else None
        meta = {**(previous or {}), **saved.meta()}
        if previous:
            meta["name"] = previous.get("name", saved.name)
        await self.backend_put_meta(dictionary.id, meta)
        return saved

    async def backend_put_meta(self, dictionary_id: str, meta: dict[str, Any]) -> None:
        """Rewrite a dictionary's meta.json (a rename or an archive: the versions stay as they are)."""
        body = json.dumps(meta, ensure_ascii=False).encode()
        await self._call(self.backend.put(f"{dictionary_id}/{META}", body))
        self._remember_meta(dictionary_id, meta, len(body))

    async def create(self, name: str, description: str | None, rules: list[Rule]) -> Dictionary:
        """A new dictionary whose first version holds ``rules``."""
        return await self.save(Dictionary(new_id(), name, description, int(time.time()), ""), rules)

    async def delete(self, dictionary_id: str) -> bool:
        """Remove a dictionary and its versions from the storage (False: there was none); other fronts stop using it
        within :data:`LATEST_TTL_S`."""
        try:
            if await self.meta(dictionary_id, fresh=True) is None:
                return False
        except DictionaryUnreadable:
            pass  # a meta.json nobody can use is deleted all the same
        await self._call(self.backend.remove(dictionary_id))
        self._remember_meta(dictionary_id, None, 0)
        self._versions.drop(lambda key: key[0] == dictionary_id)
        self._misses.drop(lambda key: key[0] == dictionary_id)
        return True

    async def list(self) -> list[dict[str, Any]]:
        """Every dictionary's meta.json (those that cannot be read are left out)."""
        metas = []
        for dictionary_id in await self._call(self.backend.ids()):
            try:
                meta = await self.meta(dictionary_id, fresh=True)
            except DictionaryUnreadable as err:
                logger.warning("dictionary %s left out of the list: %s", dictionary_id, err)
                continue
            if meta is not None:
                metas.append(meta)
        return metas

    async def close(self) -> None:
        """Close the backend."""
        await self.backend.close()


def rules_bytes(rules: list[Rule]) -> int:
    """About the memory ``rules`` take (the list, each rule and its strings)."""
    total = sys.getsizeof(rules)
    for rule in rules:
        total += sys.getsizeof(rule) + sys.getsizeof(rule.string_to_replace)
        total += sys.getsizeof(rule.alias or rule.phoneme or "")
    return total


def lexicon_bytes(lexicon: Lexicon) -> int:
    """About the memory a compiled version takes (its rules and its matcher)."""
    return rules_bytes(lexicon.rules) + lexicon.nbytes


def _parse_version(raw: bytes) -> Lexicon:
    """A version object's rules, compiled; RuleError when it is not one these checks accept."""
    try:
        body = json.loads(raw)
    except ValueError as err:
        raise RuleError("it is not JSON") from err
    if not isinstance(body, dict) or "rules" not in body:
        raise RuleError("it holds no 'rules'")
    return Lexicon(parse_rules(body["rules"]))


def _checked_meta(dictionary_id: str, raw: bytes) -> dict[str, Any]:
    """A meta.json with the fields every route reads, of the right types; DictionaryUnreadable otherwise."""
    try:
        meta = json.loads(raw)
    except ValueError:
        meta = None
    fields_ok = isinstance(meta, dict) and (
        meta.get("id") == dictionary_id
        and isinstance(meta.get("name"), str)
        and isinstance(meta.get("latest_version_id"), str)
        and isinstance(meta.get("creation_time_unix"), int)
        and isinstance(meta.get("latest_version_rules_num"), int)
        and isinstance(meta.get("description"), str | None)
    )
    if not fields_ok:
        raise DictionaryUnreadable(
            f"Pronunciation dictionary {dictionary_id!r} is stored in a form this server cannot use (its meta.json); "
            "delete it."
        )
    assert isinstance(meta, dict)
    return meta


def _valid_id(value: str) -> bool:
    return 0 < len(value) <= 64 and all(c.isalnum() or c in "-_" for c in value)


# Pronunciation dictionaries, shared by every front.
