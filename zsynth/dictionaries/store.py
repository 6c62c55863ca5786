"""Durable, versioned storage of pronunciation dictionaries, shared by every front.

Where: the voices' bucket (ZSYNTH_VOICES_BUCKET) under ``<ZSYNTH_DICTIONARIES_PREFIX>``, else this box's data
directory (``<data_dir>/dictionaries/``, shared by the fronts of the box). Objects::

    <id>/<version_id>.json   one version: its rules (written once, never changed)
    <id>/meta.json           name, description, creation time, latest version: written after the version it names

A version is immutable, so a front keeps every version it has read in memory for good. Which version is the latest
is read again when older than :data:`LATEST_TTL_S`: a locator without ``version_id`` sees another front's change
within that time. While the storage cannot be reached, synthesis keeps using what this front last read; changes
fail with StorageUnavailable and change nothing. Two changes racing on one dictionary: the later meta.json wins
(each change is a whole version).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from aiohttp import web
from botocore.exceptions import BotoCoreError, ClientError

from ..aws import S3Prefix
from ..voices.bucket import is_missing
from .rules import Rule, parse_rules

LATEST_TTL_S: Final = 2.0
STORAGE_ERRORS: Final = (BotoCoreError, ClientError, OSError, asyncio.TimeoutError)
META: Final = "meta.json"


class StorageUnavailable(Exception):
    """The storage could not be reached; nothing was changed."""


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

    async def get(self, key: str) -> bytes | None: ...
    async def put(self, key: str, body: bytes) -> None: ...
    async def ids(self) -> list[str]: ...
    async def close(self) -> None: ...


class DirectoryBackend:
    """Files under a directory, written to a temporary name and renamed into place."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _get(self, key: str) -> bytes | None:
        try:
            return (self.root / key).read_bytes()
        except FileNotFoundError:
            return None

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

    async def get(self, key: str) -> bytes | None:
        return await asyncio.to_thread(self._get, key)

    async def put(self, key: str, body: bytes) -> None:
        await asyncio.to_thread(self._put, key, body)

    async def ids(self) -> list[str]:
        return await asyncio.to_thread(self._ids)

    async def close(self) -> None:
        return None


class BucketBackend(S3Prefix):
    """Objects under ``s3://bucket/prefix`` (endpoint and credentials from the standard AWS variables)."""

    async def get(self, key: str) -> bytes | None:
        try:
            obj = await self._s3.get_object(Bucket=self.bucket, Key=self.prefix + key)
            return bytes(await obj["Body"].read())
        except ClientError as err:
            if is_missing(err):
                return None
            raise

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
    """Dictionaries and their versions over a :class:`Backend`, with immutable versions cached in memory."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._versions: dict[tuple[str, str], list[Rule]] = {}
        self._latest: dict[str, tuple[float, dict[str, Any] | None]] = {}

    async def _call(self, coro: Any) -> Any:
        try:
            return await coro
        except STORAGE_ERRORS as err:
            raise StorageUnavailable(str(err)) from err

    async def meta(self, dictionary_id: str, *, fresh: bool = False) -> dict[str, Any] | None:
        """A dictionary's meta.json (None: no such dictionary); cached for :data:`LATEST_TTL_S` unless ``fresh``."""
        cached = self._latest.get(dictionary_id)
        now = time.monotonic()
        if cached is not None and not fresh and now - cached[0] < LATEST_TTL_S:
            return cached[1]
        if not _valid_id(dictionary_id):
            return None
        try:
            raw = await self._call(self.backend.get(f"{dictionary_id}/{META}"))
        except StorageUnavailable:
            if cached is not None and not fresh:
                # Synthesis goes on with the version this front last saw, and asks the storage again after a while.
                self._latest[dictionary_id] = (now, cached[1])
                return cached[1]
            raise
        meta = json.loads(raw) if raw is not None else None
        self._latest[dictionary_id] = (now, meta)
        return meta

    async def rules(self, dictionary_id: str, version_id: str) -> list[Rule] | None:
        """The rules of one version (None: no such version)."""
        key = (dictionary_id, version_id)
        if key in self._versions:
            return self._versions[key]
        if not (_valid_id(dictionary_id) and _valid_id(version_id)):
            return None
        raw = await self._call(self.backend.get(f"{dictionary_id}/{version_id}.json"))
        if raw is None:
            return None
        rules = parse_rules(json.loads(raw)["rules"])
        self._versions[key] = rules
        return rules

    async def get(self, dictionary_id: str) -> Dictionary | None:
        """The dictionary with its latest rules, read fresh."""
        meta = await self.meta(dictionary_id, fresh=True)
        if meta is None:
            return None
        rules = await self.rules(dictionary_id, str(meta["latest_version_id"])) or []
        return Dictionary(
            dictionary_id,
            str(meta["name"]),
            meta.get("description"),
            int(meta["creation_time_unix"]),
            str(meta["latest_version_id"]),
            rules,
        )

    async def save(self, dictionary: Dictionary, rules: list[Rule]) -> Dictionary:
        """Write ``rules`` as a new version of ``dictionary``, then make it the latest (the commit)."""
        version_id = new_id()
        body = json.dumps({"rules": [rule.to_json() for rule in rules]}, ensure_ascii=False).encode()
        await self._call(self.backend.put(f"{dictionary.id}/{version_id}.json", body))
        self._versions[(dictionary.id, version_id)] = rules
        saved = Dictionary(
            dictionary.id, dictionary.name, dictionary.description, dictionary.created_at, version_id, rules
        )
        previous = await self.meta(dictionary.id, fresh=True) if dictionary.version_id else None
        meta = {**(previous or {}), **saved.meta()}
        if previous:
            meta["name"] = previous.get("name", saved.name)
        await self._call(self.backend.put(f"{dictionary.id}/{META}", json.dumps(meta, ensure_ascii=False).encode()))
        self._latest[dictionary.id] = (time.monotonic(), meta)
        return saved

    async def backend_put_meta(self, dictionary_id: str, meta: dict[str, Any]) -> None:
        """Rewrite a dictionary's meta.json (a rename or an archive: the versions stay as they are)."""
        await self._call(self.backend.put(f"{dictionary_id}/{META}", json.dumps(meta, ensure_ascii=False).encode()))
        self._latest[dictionary_id] = (time.monotonic(), meta)

    async def create(self, name: str, description: str | None, rules: list[Rule]) -> Dictionary:
        """A new dictionary whose first version holds ``rules``."""
        return await self.save(Dictionary(new_id(), name, description, int(time.time()), ""), rules)

    async def list(self) -> list[dict[str, Any]]:
        """Every dictionary's meta.json."""
        metas = []
        for dictionary_id in await self._call(self.backend.ids()):
            meta = await self.meta(dictionary_id, fresh=True)
            if meta is not None:
                metas.append(meta)
        return metas

    async def close(self) -> None:
        """Close the backend."""
        await self.backend.close()


def _valid_id(value: str) -> bool:
    return 0 < len(value) <= 64 and all(c.isalnum() or c in "-_" for c in value)


# Pronunciation dictionaries, shared by every front.
DICTIONARIES: Final = web.AppKey("dictionaries", DictionaryStore)
