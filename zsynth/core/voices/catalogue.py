"""The library's clones as a caller sees them: owner-aware (a clone is its workspace's; to another workspace it is an
id that never existed) and fetched on demand (a cloned id this box lacks is read from the bucket, waiting at most
``fetch_wait_s``; ids the bucket lately answered it does not have are remembered for a while, :class:`MissingIds`).

Each clone's meta.json names the workspace that owns it (:mod:`zsynth.core.workspaces`; none, from before workspaces:
``default``), so the bucket copy, every box's disk and a restore carry it. :meth:`Catalogue.require` is the one check
of a voice id a caller named (every transport asks it through :func:`zsynth.services.voices.require_voice`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from zsynth.core import workspaces
from zsynth.core.optional import aws_errors
from zsynth.core.voices.bucket import VoiceRefused
from zsynth.core.voices.errors import StorageUnavailable, VoiceGone, VoiceMissing, not_found
from zsynth.core.voices.mirror import Mirror
from zsynth.core.voices.store import is_clone_id

logger = logging.getLogger(__name__)


class MissingIds:
    """Clone ids the bucket lately answered it does not have: each for ``ttl_s`` seconds, at most ``size`` of them
    (the oldest leave first), so made-up ids neither cost bucket reads each time nor grow memory without bound."""

    def __init__(self, ttl_s: float, size: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.size = size
        self.clock = clock
        self._until: OrderedDict[str, float] = OrderedDict()  # in insertion order, which is expiry order

    def __len__(self) -> int:
        return len(self._until)

    def __contains__(self, voice_id: object) -> bool:
        if not isinstance(voice_id, str):
            return False
        until = self._until.get(voice_id)
        if until is None:
            return False
        if until <= self.clock():
            del self._until[voice_id]
            return False
        return True

    def add(self, voice_id: str) -> None:
        """Remember ``voice_id`` as missing from now on."""
        now = self.clock()
        self._until.pop(voice_id, None)
        self._until[voice_id] = now + self.ttl_s
        while self._until and (len(self._until) > self.size or next(iter(self._until.values())) <= now):
            self._until.popitem(last=False)

    def discard(self, voice_id: str) -> None:
        """Forget ``voice_id`` (it was announced or added)."""
        self._until.pop(voice_id, None)


class Catalogue:
    """The clones of this box's disk and of the bucket behind it (``mirror``), as each workspace sees them."""

    def __init__(self, mirror: Mirror, *, fetch_wait_s: float, missing: MissingIds) -> None:
        self.mirror = mirror
        self.store = mirror.store
        self.bucket = mirror.bucket
        self.fetch_wait_s = fetch_wait_s
        self.missing = missing  # ZSYNTH_VOICES_MISSING_TTL / _MAX
        self._fetches: dict[str, asyncio.Task[bool]] = {}

    def fetching(self) -> list[asyncio.Task[bool]]:
        """The fetches under way (the library cancels them when it closes)."""
        return list(self._fetches.values())

    async def current_meta(self, voice_id: str, workspace: str) -> dict[str, Any]:
        """A clone's metadata as the library holds it (the bucket's when there is one); VoiceGone when absent, or
        when it is another workspace's than ``workspace`` (to that workspace it does not exist)."""
        meta = await self._current_meta(voice_id)
        if not workspaces.visible(meta, workspace):
            raise VoiceGone(voice_id)
        return meta

    async def _current_meta(self, voice_id: str) -> dict[str, Any]:
        if self.bucket is not None:
            try:
                meta = await self.bucket.get_meta(voice_id)
            except aws_errors(ValueError) as err:
                await self.mirror.failed(f"reading {voice_id} from the bucket failed", err)
                raise StorageUnavailable(str(err)) from err
            if meta is None:
                await self.mirror.drop_local(voice_id, here=False)
                raise VoiceGone(voice_id)
            return meta
        stored = await asyncio.to_thread(self.store.get, voice_id)
        if stored is None:
            raise VoiceGone(voice_id)
        return dict(stored.meta)

    async def ensure(self, voice_id: str) -> bool:
        """Whether ``voice_id`` is (now) on this disk: fetched from the bucket when missing, waiting at most
        ``fetch_wait_s``. False when it is in neither place; StorageUnavailable when the bucket did not answer;
        VoiceRefused when the bucket holds it in a form no box takes (its clip over the upload limits, say)."""
        if await asyncio.to_thread(self.store.get, voice_id) is not None:
            return True
        if self.bucket is None or not is_clone_id(voice_id) or voice_id in self.missing:
            return False
        if voice_id in self.store.tombstones():
            return False
        task = self._fetches.get(voice_id)
        if task is None:
            task = asyncio.create_task(self._fetch(voice_id), name=f"voice-fetch-{voice_id}")
            self._fetches[voice_id] = task
            task.add_done_callback(lambda _: self._fetches.pop(voice_id, None))
        try:
            async with asyncio.timeout(self.fetch_wait_s):
                return await asyncio.shield(task)
        except TimeoutError as err:
            raise StorageUnavailable(f"fetching {voice_id} took longer than {self.fetch_wait_s:g} s") from err

    async def require(self, voice_id: str, workspace: str, *, shared: str | None = None) -> None:
        """Make sure a voice id a caller acting in ``workspace`` named is usable here: a cloned voice's id this disk
        lacks is fetched (:meth:`ensure`). VoiceMissing when the library does not have it (or holds it in a form no
        box takes), and, with the same message, when it is another workspace's (:func:`workspaces.visible`) unless it
        is ``shared`` (the pinned swap-out voice, every workspace's); StorageUnavailable when the bucket did not
        answer. Other ids return at once (built-in voices, and the ids the catalog gives the swap-out voice). Every
        transport asks here (through :func:`zsynth.services.voices.require_voice`), after the caller was
        authenticated."""
        if not is_clone_id(voice_id):
            return
        if not self.store.has(voice_id):
            await self._require_fetched(voice_id, workspace, shared)
        stored = self.store.get(voice_id)
        if stored is None:  # removed in between
            raise VoiceMissing(voice_id, not_found(voice_id))
        if voice_id != shared and not workspaces.visible(stored.meta, workspace):
            raise VoiceMissing(voice_id, not_found(voice_id))  # exactly what an id that never existed gets

    async def _require_fetched(self, voice_id: str, workspace: str, shared: str | None) -> None:
        try:
            found = await self.ensure(voice_id)
        except VoiceRefused as err:  # the bucket holds it, but in a form no box takes (a clip over the limits)
            if voice_id != shared and await self._foreign(voice_id, workspace):
                raise VoiceMissing(voice_id, not_found(voice_id)) from err  # its reason is its owner's business
            raise VoiceMissing(voice_id, f"The voice {voice_id} cannot be used: {err}.") from err
        if not found:
            raise VoiceMissing(voice_id, not_found(voice_id))

    async def _foreign(self, voice_id: str, workspace: str) -> bool:
        """Whether the bucket's meta.json of a voice no box takes names another workspace than ``workspace`` (False
        when it cannot be read: then nobody can tell whose it is)."""
        if self.bucket is None:
            return False
        with contextlib.suppress(*aws_errors(ValueError)):
            meta = await self.bucket.get_meta(voice_id)
            return meta is not None and not workspaces.visible(meta, workspace)
        return False

    async def _fetch(self, voice_id: str) -> bool:
        assert self.bucket is not None
        started = time.monotonic()
        try:
            remote = await self.bucket.get_voice(voice_id)
        except VoiceRefused as err:
            await self.mirror.failed(f"refusing {voice_id} from the bucket", err)
            raise
        except aws_errors(ValueError) as err:
            await self.mirror.failed(f"fetching {voice_id} from the bucket failed", err)
            raise StorageUnavailable(str(err)) from err
        if remote is None:
            self.missing.add(voice_id)
            return False
        with contextlib.suppress(FileExistsError):
            await asyncio.to_thread(self.store.install, remote.meta, remote.reference)
        self.store.invalidate()
        if await self.mirror.removed_meanwhile(voice_id):
            return False
        logger.info("voice library: fetched %s on demand in %.2fs", voice_id, time.monotonic() - started)
        return True
