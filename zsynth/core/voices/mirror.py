"""One box's disk kept in step with the bucket, which is the truth: the writes and removals on this disk, and the
comparisons with the bucket (at start, every ``resync_s``, after Redis came back, and until a bucket that was down at
start answers).

:class:`Mirror` is the part of the voice library (:mod:`.library`) the others build on: the announcements
(:mod:`.announce`) and the owner-aware catalogue (:mod:`.catalogue`) read and write this disk through it. A comparison
fetches what this disk lacks, drops what the bucket's tombstones removed, uploads on a front the voices cloned before
the bucket was set (never one the bucket or this box has a tombstone for), and puts a tombstone in the bucket only for
a removal asked of this box's own API, logged and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from redis.asyncio import Redis
from redis.exceptions import RedisError

from zsynth.core import protocol, workspaces
from zsynth.core.optional import aws_errors
from zsynth.core.voices.bucket import VoiceBucket
from zsynth.core.voices.errors import VoiceGone
from zsynth.core.voices.store import StoredVoice, VoiceStore, revision

logger = logging.getLogger(__name__)

RESYNC_EVERY_S: Final = 30.0  # while the bucket is unreachable: how often the start-up reconciliation is retried


@dataclass(slots=True)
class CatchUp:
    """What a start-up caught up on."""

    missed: int = 0  # announcements made while this box was away
    behind_s: float = 0.0  # from the last announcement applied here to the newest one
    trimmed: bool = False  # the log no longer reaches back to this box's cursor: the bucket was compared in full
    restored: int = 0
    removed: int = 0
    uploaded: int = 0
    refreshed: int = 0
    tombstones_uploaded: int = 0  # removals made through this box's API that the bucket did not have yet
    bucket_ok: bool = True


class Mirror:
    """This box's disk (``store``) and the bucket it follows (None: one box, its disk is the truth)."""

    def __init__(
        self,
        store: VoiceStore,
        bucket: VoiceBucket | None,
        redis: Redis,
        *,
        role: Literal["front", "worker"],
        resync_s: float,
        on_change: Callable[[str], None] | None,
        on_failure: Callable[[], Awaitable[Any]] | None,
        catching_up: Callable[[], bool],
    ) -> None:
        self.store = store
        self.bucket = bucket
        self.redis = redis  # for the counters
        self.role = role
        self.resync_s = resync_s
        self.on_change = on_change
        self.on_failure = on_failure
        self.catching_up = catching_up
        self.arriving: set[str] = set()  # in the bucket, not yet on this disk, while the start-up catches up
        # Loops end on this as well as on cancellation: a redis-py command interrupted by a cancel may swallow it.
        self.stop = asyncio.Event()

    async def failed(self, what: str, err: BaseException) -> None:
        """Log a bucket failure and count it (``on_failure``)."""
        logger.error("voice library: %s: %s", what, err)
        if self.on_failure is not None:
            try:
                await self.on_failure()
            except Exception as count_err:  # the counter is best effort
                logger.warning("voice library: could not count a bucket failure: %s", count_err)

    async def count(self, counter: str) -> None:
        """Add one to a Redis counter (best effort)."""
        try:
            await self.redis.incr(counter)
        except (RedisError, OSError) as err:  # the counter is best effort; the log line above is the record
            logger.warning("voice library: could not count %s: %s", counter, err)

    async def write_local(self, meta: Mapping[str, Any], reference: bytes | None) -> StoredVoice:
        """Write a clone's files to this disk (a voice this disk lacks is installed, its clip read from the bucket
        when not given); VoiceGone when neither has it."""
        voice_id = str(meta["voice_id"])
        try:
            return await asyncio.to_thread(self.store.update, meta, reference)
        except FileNotFoundError:
            if reference is None and self.bucket is not None:
                remote = await self.bucket.get_voice(voice_id)
                if remote is None:
                    raise VoiceGone(voice_id) from None
                reference = remote.reference
            if reference is None:
                raise VoiceGone(voice_id) from None
            try:
                return await asyncio.to_thread(self.store.install, meta, reference)
            except FileExistsError:
                return await asyncio.to_thread(self.store.update, meta, reference)

    async def drop_local(self, voice_id: str, *, here: bool) -> bool:
        """Take the voice off this disk and remember the removal (``here``: asked of this box's API)."""
        await asyncio.to_thread(self.store.add_tombstone, voice_id, here=here)
        removed = await asyncio.to_thread(self.store.remove, voice_id)
        self.store.invalidate()
        if removed and self.on_change is not None:
            self.on_change(voice_id)
        return removed

    async def removed_meanwhile(self, voice_id: str) -> bool:
        """A removal applied while this voice was being fetched: take the copy just written away again."""
        if voice_id not in await asyncio.to_thread(self.store.tombstones):
            return False
        await asyncio.to_thread(self.store.remove, voice_id)
        self.store.invalidate()
        return True

    async def tombstoned(self, voice_id: str) -> bool:
        """Whether the bucket holds a tombstone for ``voice_id`` (False when it cannot be read)."""
        assert self.bucket is not None
        try:
            return await self.bucket.is_removed(voice_id)
        except aws_errors():
            return False

    async def refresh(self, voice_id: str, rev: int | None) -> bool:
        """Bring a clone on this disk up to the bucket's revision; True when something was written or removed."""
        if self.bucket is None:
            return False  # one box: its disk is already the truth
        local = await asyncio.to_thread(self.store.get, voice_id)
        if local is not None and rev is not None and revision(local.meta) >= rev:
            return False
        if voice_id in self.store.tombstones():
            return False
        remote = await self.bucket.get_voice(voice_id)
        if remote is None:
            # No readable voice can also be an edit replacing its clip right now: only a tombstone means removed.
            if local is None or not await self.bucket.is_removed(voice_id):
                return False
            return await self.drop_local(voice_id, here=False)
        if local is not None and revision(local.meta) >= revision(remote.meta):
            return False
        await self.write_local(remote.meta, remote.reference)
        if await self.removed_meanwhile(voice_id):
            return True
        logger.info("voice library: %s is at revision %d on this box", voice_id, revision(remote.meta))
        return True

    async def reconcile(self, report: CatchUp, refresh: set[str] | None = None) -> CatchUp:
        """Make this disk agree with the bucket; ``refresh`` names voices edited since the cursor (all when
        ``report.trimmed``). A front also uploads the voices the bucket has never seen (cloned before the bucket was
        set), but never one with a tombstone here or there."""
        if self.bucket is None:
            return report
        try:
            listing = await self.bucket.listing()
        except aws_errors() as err:
            await self.failed(f"cannot list s3://{self.bucket.bucket}/{self.bucket.prefix}; serving this disk", err)
            report.bucket_ok = False
            return report
        local = set((await asyncio.to_thread(self.store.all)).keys())
        for voice_id in sorted(local & listing.tombstones):
            if await self.drop_local(voice_id, here=False):
                report.removed += 1
        removed_here = await self._settle_removals(listing.voices, report)
        missing = listing.voices - local - removed_here
        if self.catching_up():
            self.arriving = set(missing)
        try:
            report.restored += await self._refresh_all(missing, "restoring")
        finally:
            self.arriving = set()
        edited = listing.voices if report.trimmed else (listing.voices & (refresh or set()))
        report.refreshed += await self._refresh_all(local & edited, "refreshing")
        if self.role == "front":
            report.uploaded += await self._upload_all(local - listing.voices - listing.tombstones - removed_here)
        settings = listing.settings if report.trimmed else (listing.settings & (refresh or set()))
        await self._refresh_settings(settings)
        self.store.invalidate()
        return report

    async def _settle_removals(self, alive: set[str], report: CatchUp) -> set[str]:
        """Removals this disk remembers for voices the bucket still serves (``alive``); returns the ids still
        removed here afterwards.

        Only a removal asked of this box's API (while the bucket was not set, or unreachable) becomes a tombstone
        in the bucket, on a front, logged and counted. A removal this box merely heard of is a belief the bucket
        contradicts: it is forgotten and the voice comes back (a forged announcement, or one from a version that
        did not ask the bucket first, never destroys a voice).
        """
        assert self.bucket is not None
        removed = await asyncio.to_thread(self.store.tombstones)
        contested = removed & alive
        if not contested:
            return removed
        made_here = await asyncio.to_thread(self.store.tombstones_made_here)
        for voice_id in sorted(contested):
            if voice_id not in made_here:
                logger.warning(
                    "voice library: %s was believed removed on this box, but the bucket serves it and holds no "
                    "tombstone: restoring it",
                    voice_id,
                )
                await asyncio.to_thread(self.store.drop_tombstone, voice_id)
                removed.discard(voice_id)
            elif self.role == "front":
                try:
                    alive_meta = await self.bucket.get_meta(voice_id)  # the tombstone names the voice's workspace
                    owner = workspaces.owner_of(alive_meta) if alive_meta is not None else workspaces.DEFAULT
                    await self.bucket.remove_voice(voice_id, owner)
                except aws_errors(ValueError) as err:
                    await self.failed(f"uploading the tombstone of {voice_id} (removed on this box) failed", err)
                    continue
                report.tombstones_uploaded += 1
                logger.warning(
                    "voice library: uploaded a tombstone for %s: it was removed through this box's API while the "
                    "bucket did not know it (removed everywhere now)",
                    voice_id,
                )
                await self.count(protocol.VOICE_TOMBSTONES_UPLOADED)
        return removed

    async def _refresh_all(self, voice_ids: set[str], what: str) -> int:
        done = 0
        for voice_id in sorted(voice_ids):
            try:
                done += await self.refresh(voice_id, None)
            except aws_errors(ValueError) as err:
                await self.failed(f"{what} {voice_id} failed", err)
            self.arriving.discard(voice_id)
        return done

    async def _upload_all(self, voice_ids: set[str]) -> int:
        assert self.bucket is not None
        done = 0
        for voice_id in sorted(voice_ids):
            files = await asyncio.to_thread(self.store.read_files, voice_id)
            if files is None:
                continue
            try:
                await self.bucket.put_voice(json.loads(files[0]), files[1])
                done += 1
            except aws_errors(ValueError) as err:
                await self.failed(f"uploading {voice_id} failed", err)
        return done

    async def _refresh_settings(self, voice_ids: set[str]) -> None:
        assert self.bucket is not None
        for voice_id in sorted(voice_ids):
            try:
                remote = await self.bucket.get_settings(voice_id)
            except aws_errors(ValueError) as err:
                await self.failed(f"reading the settings of {voice_id} failed", err)
                continue
            if remote is not None and remote[0] > (await asyncio.to_thread(self.store.builtin_settings, voice_id))[0]:
                await asyncio.to_thread(self.store.save_builtin_settings, voice_id, *remote)

    async def pause(self, seconds: float) -> None:
        """Wait ``seconds``, or less when the library stops."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)

    async def resync_loop(self) -> None:
        """Every ``resync_s``: compare this disk with the bucket (an announcement Redis did not take is settled)."""
        while not self.stop.is_set():
            await self.pause(self.resync_s)
            if self.stop.is_set():
                return
            report = await self.reconcile(CatchUp())
            if report.removed or report.restored:
                logger.warning(
                    "voice library: the periodic comparison with the bucket restored %d and removed %d voices "
                    "(an announcement was lost)",
                    report.restored,
                    report.removed,
                )

    async def reconcile_until_done(self) -> None:
        """After a start-up whose bucket did not answer: retry the full comparison until it does."""
        while not self.stop.is_set():
            await self.pause(RESYNC_EVERY_S)
            if self.stop.is_set():
                return
            report = await self.reconcile(CatchUp(trimmed=True))
            if report.bucket_ok:
                logger.info(
                    "voice library: the bucket answers again: restored %d, removed %d, uploaded %d",
                    report.restored,
                    report.removed,
                    report.uploaded,
                )
                return
