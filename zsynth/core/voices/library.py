"""The voice library across boxes: the bucket is the truth, Redis carries the news, each box's disk is a cache.

Every front and every worker runs one :class:`VoiceLibrary` on its box's :class:`VoiceStore`:

* **Changes** made through a front (clone, edit, saved settings, removal) reach the bucket before the API answers;
  a bucket that cannot be reached makes the change fail with :class:`StorageUnavailable` (the voice service's
  routes answer 503 ``voice_storage_unavailable`` with ``Retry-After``) and leaves nothing behind, so no box ever
  serves a voice another box cannot get.
  The change is then written to the box's disk and announced on :data:`protocol.VOICES_LOG`.
* **Announcements** are read by every process with ``XREAD BLOCK`` from the last entry it applied: a new or edited
  voice is fetched from the bucket into the disk cache, a removed one is dropped once the bucket confirms the removal
  with its tombstone (the log is a hint, not an authority: anyone who can write to Redis can add to it), and
  ``on_change`` lets a worker drop its engine state for the voice. The stream is both the live feed and the catch-up
  log, so no announcement falls between a subscription and a catch-up.
* **At start** a process compares the bucket with its disk (fetching what it lacks, dropping what was removed,
  uploading voices cloned before the bucket was set, never one the bucket or this box has a tombstone for, and a
  tombstone only for a removal asked of this box's own API, logged and counted) and logs
  how many announcements it missed and how far behind it was. The start waits for that at most ``start_wait_s``;
  what is left goes on in the background while the process serves the built-in voices and those on its disk
  (:attr:`VoiceLibrary.catching_up`, and :attr:`VoiceLibrary.arriving` names the voices listed in the bucket and
  not yet on this disk). A bucket that is down at start is retried in the background.
* **A cloned id this box lacks** is fetched on demand (:meth:`ensure`), waiting at most ``fetch_wait_s``.
* **Owners.** Each clone's meta.json names the workspace that owns it (:mod:`zsynth.core.workspaces`; none, from
  before workspaces: ``default``), so the bucket copy, every box's disk and a restore carry it; announcements and the
  bucket's tombstones name it too. :meth:`require` refuses another workspace's clone as it refuses an unknown id.
* **Every ``resync_s``** the disk is compared with the bucket again, so an announcement Redis did not take (the
  change itself is in the bucket) is settled within that time even without a restart. After the follower lost
  Redis (a restart, or a Sentinel promotion, which always drops the clients' connections) the comparison runs as
  soon as Redis answers again, not ``resync_s`` later.

Without a bucket nothing is shared: the disk is the truth, announcements only tell the box's other processes to
forget cached engine state, and fronts announce themselves (:func:`protocol.voice_box_key`) so that a second box on
the same Redis without a bucket, while cloned voices exist, says so loudly (:attr:`VoiceLibrary.warning`).

The library is split by job: this module holds the lifecycle and the changes; :mod:`.mirror` keeps this disk in step
with the bucket, :mod:`.announce` reads and writes the announcements and catches up at start, and :mod:`.catalogue`
answers for the clones as each workspace sees them, fetching on demand. Their errors are in :mod:`.errors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

from redis.asyncio import Redis
from redis.exceptions import RedisError

from zsynth.core import protocol, workspaces
from zsynth.core.aws import client_config
from zsynth.core.config import Settings
from zsynth.core.optional import aws_errors
from zsynth.core.redis_link import async_client
from zsynth.core.supervise import Supervisor, cancel_and_wait
from zsynth.core.voices.announce import READ_BLOCK_MS, Announcements
from zsynth.core.voices.bucket import VoiceBucket
from zsynth.core.voices.catalogue import Catalogue, MissingIds
from zsynth.core.voices.errors import StorageUnavailable, VoiceGone, VoiceMissing
from zsynth.core.voices.mirror import CatchUp, Mirror
from zsynth.core.voices.store import StoredVoice, VoiceStore, reference_name, revision

__all__ = [
    "CatchUp",
    "MissingIds",
    "StorageUnavailable",
    "VoiceGone",
    "VoiceLibrary",
    "VoiceMissing",
]

logger = logging.getLogger(__name__)


class VoiceLibrary:
    """One process's part in the voice library (see the module docstring): its lifecycle and the changes made
    through a front, over the :class:`Mirror`, the :class:`Announcements` and the :class:`Catalogue` it holds."""

    def __init__(
        self,
        store: VoiceStore,
        redis_url: str,
        bucket: VoiceBucket | None,
        *,
        role: Literal["front", "worker"],
        fetch_wait_s: float,
        resync_s: float = 300.0,
        on_change: Callable[[str], None] | None = None,
        on_failure: Callable[[], Awaitable[Any]] | None = None,
        start_wait_s: float = 10.0,
        supervisor: Supervisor | None = None,
        missing_ttl_s: float = 30.0,
        missing_max: int = 4096,
    ) -> None:
        self.store = store
        self.bucket = bucket
        self.role = role
        self.start_wait_s = start_wait_s
        self.supervisor = supervisor or Supervisor()
        self.box_id = store.box_id()
        # After any lost connection (a promotion always drops them) the follower compares with the bucket at once.
        self.redis: Redis = async_client(
            redis_url, socket_connect_timeout=2.0, socket_timeout=READ_BLOCK_MS / 1000 + 10, health_check_interval=30
        )
        self.mirror = Mirror(
            store,
            bucket,
            self.redis,
            role=role,
            resync_s=resync_s,
            on_change=on_change,
            on_failure=on_failure,
            catching_up=lambda: self.catching_up,
        )
        missing = MissingIds(missing_ttl_s, missing_max)  # ZSYNTH_VOICES_MISSING_TTL / _MAX
        self.catalogue = Catalogue(self.mirror, fetch_wait_s=fetch_wait_s, missing=missing)
        self.log = Announcements(self.mirror, box_id=self.box_id, missing=missing)
        self._tasks: list[asyncio.Task[None]] = []
        self._startup: asyncio.Task[None] | None = None

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        store: VoiceStore,
        *,
        role: Literal["front", "worker"],
        on_change: Callable[[str], None] | None = None,
        on_failure: Callable[[], Awaitable[Any]] | None = None,
        supervisor: Supervisor | None = None,
    ) -> VoiceLibrary:
        """The library of ``store`` as the settings configure it: the bucket (when one is set) and every timing.

        ``role``: ``front`` announces its box and reconciles the bucket with what its API changed; ``worker`` (the
        workers, and the avatar server, which only speaks voices) follows.
        """
        bucket = (
            VoiceBucket(
                settings.voices.bucket,
                settings.voices.prefix,
                client_config(settings),
                clip_max_bytes=settings.voices.clip_max_bytes,
            )
            if settings.voices.bucket
            else None
        )
        return cls(
            store,
            settings.redis.url,
            bucket,
            role=role,
            fetch_wait_s=settings.voices.fetch_wait_s,
            resync_s=settings.voices.resync_s,
            on_change=on_change,
            on_failure=on_failure,
            start_wait_s=settings.voices.start_wait_s,
            supervisor=supervisor,
            missing_ttl_s=settings.voices.missing_ttl_s,
            missing_max=settings.voices.missing_max,
        )

    # ----- what the others hold --------------------------------------------------------------------------------

    @property
    def warning(self) -> str | None:
        """Why this box cannot share the voice library, when it cannot (:meth:`check_boxes`)."""
        return self.log.warning

    @property
    def catch_up_report(self) -> CatchUp | None:
        """What the start-up caught up on (None until it did)."""
        return self.log.catch_up_report

    @property
    def applied(self) -> int:
        """Announcements applied since start."""
        return self.log.applied

    @property
    def arriving(self) -> set[str]:
        """The clones the bucket lists that this disk lacks, while the start-up catches up."""
        return self.mirror.arriving

    @property
    def missing(self) -> MissingIds:
        """Clone ids the bucket lately answered it does not have."""
        return self.catalogue.missing

    # ----- lifecycle -------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Catch up with the bucket and the log, then follow the log (and, on a front, announce the box).

        Waits for the catch-up at most ``start_wait_s`` (a bucket that does not answer must not hold a start past
        systemd's start timeout); the rest goes on in the background, see :attr:`catching_up`.
        """
        if self.bucket is not None:
            await self.bucket.open()
        if self.role == "front":
            self.supervisor.spawn("voice-library-box", self.log.announce_box, vital=False)
        self._startup = asyncio.create_task(self._catch_up_then_follow(), name="voice-library-start")
        done, _ = await asyncio.wait({self._startup}, timeout=self.start_wait_s)
        if done:
            self._startup.result()
        else:
            logger.warning(
                "voice library: not caught up with the bucket after %g s; serving the built-in voices and this "
                "disk's while it goes on in the background",
                self.start_wait_s,
            )

    @property
    def catching_up(self) -> bool:
        """The start-up's comparison with the bucket is still going on."""
        return self._startup is not None and not self._startup.done()

    async def _catch_up_then_follow(self) -> None:
        try:
            report = await self.log.catch_up()
        except Exception:
            logger.exception("voice library: the start-up comparison failed; retrying in the background")
            report = CatchUp(bucket_ok=False)
        # The follower is vital: a front whose follower is down would serve voices removed elsewhere.
        self.supervisor.spawn("voice-library-follower", self.log.follow)
        if not report.bucket_ok:
            self._tasks.append(asyncio.create_task(self.mirror.reconcile_until_done(), name="voice-library-resync"))
        if self.bucket is not None:
            self.supervisor.spawn("voice-library-resync", self.mirror.resync_loop, vital=False)

    async def close(self) -> None:
        """Stop following and close the clients."""
        self.mirror.stop.set()
        # redis-py (8.1) loses a cancel that lands while a command is taking its connection from the pool: a
        # follower that had just started its XREAD BLOCK would hold this close for READ_BLOCK_MS. Closing the
        # connections ends any such read at once (the follower sees the stop and returns).
        with contextlib.suppress(RedisError, OSError):
            await self.redis.connection_pool.disconnect()
        if self._startup is not None:
            self._tasks.append(self._startup)
        await cancel_and_wait([*self._tasks, *self.catalogue.fetching()], "voice library close")
        await self.supervisor.close()
        if self.role == "front":
            with contextlib.suppress(RedisError, OSError):
                await self.redis.delete(protocol.voice_box_key(self.box_id))
        await self.redis.aclose()
        if self.bucket is not None:
            await self.bucket.close()

    # ----- changes made through this front ---------------------------------------------------------------------

    async def add(self, meta: Mapping[str, Any], reference: bytes) -> StoredVoice:
        """A new clone: in the bucket first, then on this disk, then announced."""
        voice_id = str(meta["voice_id"])
        if self.bucket is not None:
            try:
                await self.bucket.put_voice(meta, reference)
            except aws_errors() as err:
                await self.mirror.failed(f"storing the new voice {voice_id} in the bucket failed", err)
                raise StorageUnavailable(str(err)) from err
        try:
            voice = await asyncio.to_thread(self.store.install, meta, reference)
        except BaseException:
            if self.bucket is not None:  # the client gets an error: the voice must not exist anywhere
                with contextlib.suppress(*aws_errors()):
                    await self.bucket.remove_voice(voice_id)
            raise
        await self.log.announce("put", voice_id, revision(meta), workspaces.owner_of(meta))
        return voice

    async def edit(self, meta: Mapping[str, Any], reference: bytes | None, old_reference: str | None) -> StoredVoice:
        """Save an edited clone (``meta`` with its revision already raised): bucket, disk, announcement.

        ``reference`` is the new clip (stored under ``meta["reference"]``), ``old_reference`` the clip it replaces.
        """
        voice_id = str(meta["voice_id"])
        if self.bucket is not None:
            try:
                await self.bucket.put_voice(meta, reference)
            except aws_errors() as err:
                await self.mirror.failed(f"storing the edit of {voice_id} in the bucket failed", err)
                raise StorageUnavailable(str(err)) from err
            if old_reference is not None and old_reference != reference_name(meta):
                try:
                    await self.bucket.delete_object(voice_id, old_reference)
                except aws_errors() as err:  # an unused clip left behind costs storage only
                    await self.mirror.failed(f"removing the replaced clip of {voice_id} failed", err)
        stored = await self.mirror.write_local(meta, reference)
        await self.log.announce("put", voice_id, revision(meta), workspaces.owner_of(meta))
        return stored

    async def remove(self, voice_id: str) -> bool:
        """Remove a clone everywhere: the bucket's tombstone first (that is the removal, and it names the voice's
        workspace), then this disk."""
        stored = await asyncio.to_thread(self.store.get, voice_id)
        owner = workspaces.owner_of(stored.meta) if stored is not None else workspaces.DEFAULT
        if self.bucket is not None:
            try:
                await self.bucket.remove_voice(voice_id, owner)
            except aws_errors() as err:
                await self.mirror.failed(f"removing {voice_id} from the bucket failed", err)
                if not await self.mirror.tombstoned(voice_id):
                    raise StorageUnavailable(str(err)) from err
        removed = await self.mirror.drop_local(voice_id, here=True)
        await self.log.announce("delete", voice_id, 0, owner)
        return removed

    async def save_builtin_settings(self, voice_id: str, settings: Mapping[str, Any]) -> None:
        """Save a built-in voice's settings everywhere."""
        rev = (await asyncio.to_thread(self.store.builtin_settings, voice_id))[0]
        if self.bucket is not None:
            try:
                remote = await self.bucket.get_settings(voice_id)
                rev = max(rev, remote[0] if remote else 0) + 1
                await self.bucket.put_settings(voice_id, rev, settings)
            except aws_errors(ValueError) as err:
                await self.mirror.failed(f"saving the settings of {voice_id} in the bucket failed", err)
                raise StorageUnavailable(str(err)) from err
        else:
            rev += 1
        await asyncio.to_thread(self.store.save_builtin_settings, voice_id, rev, settings)
        await self.log.announce("settings", voice_id, rev)

    # ----- the parts' own work, as the library's callers name it -----------------------------------------------

    async def current_meta(self, voice_id: str, workspace: str) -> dict[str, Any]:
        """A clone's metadata as ``workspace`` may edit it (:meth:`Catalogue.current_meta`)."""
        return await self.catalogue.current_meta(voice_id, workspace)

    async def ensure(self, voice_id: str) -> bool:
        """Whether ``voice_id`` is (now) on this disk, fetched when missing (:meth:`Catalogue.ensure`)."""
        return await self.catalogue.ensure(voice_id)

    async def require(self, voice_id: str, workspace: str, *, shared: str | None = None) -> None:
        """The check of a voice id a caller acting in ``workspace`` named (:meth:`Catalogue.require`)."""
        await self.catalogue.require(voice_id, workspace, shared=shared)

    async def apply(self, fields: Mapping[str, str]) -> None:
        """Apply one announcement to this disk (:meth:`Announcements.apply`)."""
        await self.log.apply(fields)

    async def catch_up(self) -> CatchUp:
        """Count what was missed and compare with the bucket (:meth:`Announcements.catch_up`)."""
        return await self.log.catch_up()

    async def reconcile(self, report: CatchUp, refresh: set[str] | None = None) -> CatchUp:
        """Make this disk agree with the bucket (:meth:`Mirror.reconcile`)."""
        return await self.mirror.reconcile(report, refresh)

    async def check_boxes(self) -> None:
        """Announce this box and warn about boxes without a bucket (:meth:`Announcements.check_boxes`)."""
        await self.log.check_boxes()
