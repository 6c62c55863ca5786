"""The voice library across boxes: the bucket is the truth, Redis carries the news, each box's disk is a cache.

Every front and every worker runs one :class:`VoiceLibrary` on its box's :class:`VoiceStore`:

* **Changes** made through a front (clone, edit, saved settings, removal) reach the bucket before the API answers;
  a bucket that cannot be reached makes the change fail with :class:`StorageUnavailable` (the routes answer 503
  ``voice_storage_unavailable`` with ``Retry-After``) and leaves nothing behind, so no box ever serves a voice another
  box cannot get. The change is then written to the box's disk and announced on :data:`protocol.VOICES_LOG`.
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
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from redis.asyncio import Redis
from redis.exceptions import RedisError
from redis.typing import EncodableT, FieldT

from zsynth.core import protocol, workspaces
from zsynth.core.aws import client_config
from zsynth.core.config import Settings
from zsynth.core.optional import aws_errors
from zsynth.core.redis_link import async_client
from zsynth.core.supervise import Supervisor, cancel_and_wait
from zsynth.core.voices.bucket import VoiceBucket, VoiceRefused
from zsynth.core.voices.store import StoredVoice, VoiceStore, is_clone_id, reference_name, revision

logger = logging.getLogger(__name__)

Op = Literal["put", "delete", "settings"]
READ_BLOCK_MS: Final = 5000
BOX_TTL_S: Final = 45
BOX_EVERY_S: Final = 15.0
RESYNC_EVERY_S: Final = 30.0  # while the bucket is unreachable: how often the start-up reconciliation is retried
MAX_BACKOFF_S: Final = 5.0


class StorageUnavailable(RuntimeError):
    """The bucket could not be reached; nothing was changed. Try again later."""


class VoiceGone(LookupError):
    """The voice is not in the library (never was, or was removed)."""


class VoiceMissing(LookupError):
    """A cloned voice a caller asked for that this box neither has nor can fetch: answered 404 ``voice_not_found``
    (with ``message``), never spoken by another voice."""

    def __init__(self, voice_id: str, message: str) -> None:
        super().__init__(message)
        self.voice_id = voice_id
        self.message = message


def not_found(voice_id: str) -> str:
    """The message of a voice id the caller cannot use: unknown, and another workspace's, alike."""
    return f"A voice with the voice_id {voice_id} was not found."


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


def _entry_ms(entry_id: str) -> int:
    with contextlib.suppress(ValueError):
        return int(entry_id.split("-", 1)[0])
    return 0


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class VoiceLibrary:
    """One process's part in the voice library (see the module docstring)."""

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
        self.fetch_wait_s = fetch_wait_s
        self.resync_s = resync_s
        self.on_change = on_change
        self.on_failure = on_failure
        self.start_wait_s = start_wait_s
        self.supervisor = supervisor or Supervisor()
        self.box_id = store.box_id()
        # After any lost connection (a promotion always drops them) the follower compares with the bucket at once.
        self.redis: Redis = async_client(
            redis_url, socket_connect_timeout=2.0, socket_timeout=READ_BLOCK_MS / 1000 + 10, health_check_interval=30
        )
        self.warning: str | None = None  # why this box cannot share the voice library, when it cannot
        self.catch_up_report: CatchUp | None = None
        self.arriving: set[str] = set()  # in the bucket, not yet on this disk, while the start-up catches up
        self.applied = 0  # announcements applied since start
        self._cursor = "0-0"
        self._fetches: dict[str, asyncio.Task[bool]] = {}
        self.missing = MissingIds(missing_ttl_s, missing_max)  # ZSYNTH_VOICES_MISSING_TTL / _MAX
        self._tasks: list[asyncio.Task[None]] = []
        self._startup: asyncio.Task[None] | None = None
        # Loops end on this as well as on cancellation: a redis-py command interrupted by a cancel may swallow it.
        self._stop = asyncio.Event()

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

    # ----- lifecycle -------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Catch up with the bucket and the log, then follow the log (and, on a front, announce the box).

        Waits for the catch-up at most ``start_wait_s`` (a bucket that does not answer must not hold a start past
        systemd's start timeout); the rest goes on in the background, see :attr:`catching_up`.
        """
        if self.bucket is not None:
            await self.bucket.open()
        if self.role == "front":
            self.supervisor.spawn("voice-library-box", self._announce_box, vital=False)
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
            report = await self.catch_up()
        except Exception:
            logger.exception("voice library: the start-up comparison failed; retrying in the background")
            report = CatchUp(bucket_ok=False)
        # The follower is vital: a front whose follower is down would serve voices removed elsewhere.
        self.supervisor.spawn("voice-library-follower", self._follow)
        if not report.bucket_ok:
            self._tasks.append(asyncio.create_task(self._reconcile_until_done(), name="voice-library-resync"))
        if self.bucket is not None:
            self.supervisor.spawn("voice-library-resync", self._resync_loop, vital=False)

    async def close(self) -> None:
        """Stop following and close the clients."""
        self._stop.set()
        if self._startup is not None:
            self._tasks.append(self._startup)
        await cancel_and_wait([*self._tasks, *self._fetches.values()], "voice library close")
        await self.supervisor.close()
        if self.role == "front":
            with contextlib.suppress(RedisError, OSError):
                await self.redis.delete(protocol.voice_box_key(self.box_id))
        await self.redis.aclose()
        if self.bucket is not None:
            await self.bucket.close()

    async def _failed(self, what: str, err: BaseException) -> None:
        logger.error("voice library: %s: %s", what, err)
        if self.on_failure is not None:
            try:
                await self.on_failure()
            except Exception as count_err:  # the counter is best effort
                logger.warning("voice library: could not count a bucket failure: %s", count_err)

    # ----- changes made through this front ---------------------------------------------------------------------

    async def add(self, meta: Mapping[str, Any], reference: bytes) -> StoredVoice:
        """A new clone: in the bucket first, then on this disk, then announced."""
        voice_id = str(meta["voice_id"])
        if self.bucket is not None:
            try:
                await self.bucket.put_voice(meta, reference)
            except aws_errors() as err:
                await self._failed(f"storing the new voice {voice_id} in the bucket failed", err)
                raise StorageUnavailable(str(err)) from err
        try:
            voice = await asyncio.to_thread(self.store.install, meta, reference)
        except BaseException:
            if self.bucket is not None:  # the client gets an error: the voice must not exist anywhere
                with contextlib.suppress(*aws_errors()):
                    await self.bucket.remove_voice(voice_id)
            raise
        await self._announce("put", voice_id, revision(meta), workspaces.owner_of(meta))
        return voice

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
                await self._failed(f"reading {voice_id} from the bucket failed", err)
                raise StorageUnavailable(str(err)) from err
            if meta is None:
                await self._drop_local(voice_id, here=False)
                raise VoiceGone(voice_id)
            return meta
        stored = await asyncio.to_thread(self.store.get, voice_id)
        if stored is None:
            raise VoiceGone(voice_id)
        return dict(stored.meta)

    async def edit(self, meta: Mapping[str, Any], reference: bytes | None, old_reference: str | None) -> StoredVoice:
        """Save an edited clone (``meta`` with its revision already raised): bucket, disk, announcement.

        ``reference`` is the new clip (stored under ``meta["reference"]``), ``old_reference`` the clip it replaces.
        """
        voice_id = str(meta["voice_id"])
        if self.bucket is not None:
            try:
                await self.bucket.put_voice(meta, reference)
            except aws_errors() as err:
                await self._failed(f"storing the edit of {voice_id} in the bucket failed", err)
                raise StorageUnavailable(str(err)) from err
            if old_reference is not None and old_reference != reference_name(meta):
                try:
                    await self.bucket.delete_object(voice_id, old_reference)
                except aws_errors() as err:  # an unused clip left behind costs storage only
                    await self._failed(f"removing the replaced clip of {voice_id} failed", err)
        stored = await self._write_local(meta, reference)
        await self._announce("put", voice_id, revision(meta), workspaces.owner_of(meta))
        return stored

    async def _write_local(self, meta: Mapping[str, Any], reference: bytes | None) -> StoredVoice:
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

    async def remove(self, voice_id: str) -> bool:
        """Remove a clone everywhere: the bucket's tombstone first (that is the removal, and it names the voice's
        workspace), then this disk."""
        stored = await asyncio.to_thread(self.store.get, voice_id)
        owner = workspaces.owner_of(stored.meta) if stored is not None else workspaces.DEFAULT
        if self.bucket is not None:
            try:
                await self.bucket.remove_voice(voice_id, owner)
            except aws_errors() as err:
                await self._failed(f"removing {voice_id} from the bucket failed", err)
                if not await self._tombstoned(voice_id):
                    raise StorageUnavailable(str(err)) from err
        removed = await self._drop_local(voice_id, here=True)
        await self._announce("delete", voice_id, 0, owner)
        return removed

    async def _tombstoned(self, voice_id: str) -> bool:
        assert self.bucket is not None
        try:
            return await self.bucket.is_removed(voice_id)
        except aws_errors():
            return False

    async def save_builtin_settings(self, voice_id: str, settings: Mapping[str, Any]) -> None:
        """Save a built-in voice's settings everywhere."""
        rev = (await asyncio.to_thread(self.store.builtin_settings, voice_id))[0]
        if self.bucket is not None:
            try:
                remote = await self.bucket.get_settings(voice_id)
                rev = max(rev, remote[0] if remote else 0) + 1
                await self.bucket.put_settings(voice_id, rev, settings)
            except aws_errors(ValueError) as err:
                await self._failed(f"saving the settings of {voice_id} in the bucket failed", err)
                raise StorageUnavailable(str(err)) from err
        else:
            rev += 1
        await asyncio.to_thread(self.store.save_builtin_settings, voice_id, rev, settings)
        await self._announce("settings", voice_id, rev)

    async def _announce(self, op: Op, voice_id: str, rev: int, owner: str | None = None) -> None:
        # The owner travels with the news for the logs and tools; a box takes it from the bucket's meta.json (the
        # log is a hint, anyone who can write to Redis can add to it).
        fields: dict[FieldT, EncodableT] = {"op": op, "voice_id": voice_id, "revision": str(rev), "box": self.box_id}
        if owner is not None:
            fields[workspaces.FIELD] = owner
        try:
            await self.redis.xadd(
                protocol.VOICES_LOG,
                fields,
                maxlen=protocol.VOICES_LOG_MAXLEN,
                approximate=True,
            )
        except (RedisError, OSError) as err:
            # The change is in the bucket: other boxes fetch the voice on demand and settle at their next start.
            logger.error("voice library: could not announce %s of %s: %s", op, voice_id, err)

    # ----- fetching on demand ----------------------------------------------------------------------------------

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
            await self._failed(f"refusing {voice_id} from the bucket", err)
            raise
        except aws_errors(ValueError) as err:
            await self._failed(f"fetching {voice_id} from the bucket failed", err)
            raise StorageUnavailable(str(err)) from err
        if remote is None:
            self.missing.add(voice_id)
            return False
        with contextlib.suppress(FileExistsError):
            await asyncio.to_thread(self.store.install, remote.meta, remote.reference)
        self.store.invalidate()
        if await self._removed_meanwhile(voice_id):
            return False
        logger.info("voice library: fetched %s on demand in %.2fs", voice_id, time.monotonic() - started)
        return True

    # ----- applying announcements ------------------------------------------------------------------------------

    async def _follow(self) -> None:
        """Read the log from the cursor for ever, applying each entry; reconcile with the bucket after an outage."""
        backoff = 0.2
        lost = False
        while not self._stop.is_set():
            try:
                answer: Any = await self.redis.xread(
                    {protocol.VOICES_LOG: self._cursor}, block=READ_BLOCK_MS, count=100
                )
                if lost:
                    logger.info("voice library: redis is back; comparing with the bucket")
                    lost = False
                    await self.reconcile(CatchUp(trimmed=True))
                backoff = 0.2
            except (RedisError, OSError) as err:
                if not lost:
                    logger.warning("voice library: lost redis (%s); retrying", err)
                lost = True
                await self._pause(backoff)
                backoff = min(MAX_BACKOFF_S, backoff * 2)
                continue
            for _stream, entries in answer or []:
                for entry_id, raw in entries:
                    try:
                        fields = {_text(k): _text(v) for k, v in raw.items()}
                    except (ValueError, AttributeError) as err:  # not UTF-8: skipped, or it would be read for ever
                        logger.error("voice library: skipping the malformed announcement %r: %s", entry_id, err)
                    else:
                        await self._apply_safely(fields)
                    self._cursor = _text(entry_id)
                await asyncio.to_thread(self.store.save_cursor, self._cursor)

    async def _apply_safely(self, fields: Mapping[str, str]) -> None:
        try:
            await self.apply(fields)
        except aws_errors(ValueError) as err:
            # The voice stays fetchable on demand; the next start settles it.
            await self._failed(f"applying {dict(fields)} failed", err)
        except Exception:
            logger.exception("voice library: applying %s failed", dict(fields))

    async def apply(self, fields: Mapping[str, str]) -> None:
        """Apply one announcement to this disk (idempotent: every process of the box applies it)."""
        op, voice_id = fields.get("op", ""), fields.get("voice_id", "")
        try:
            rev = int(fields.get("revision", "0"))
        except ValueError:
            rev = 0
        if op == "delete" and is_clone_id(voice_id):
            await self._apply_delete(voice_id, fields.get("box", ""))
        elif op == "put" and is_clone_id(voice_id):
            self.missing.discard(voice_id)
            await self._refresh(voice_id, rev)
        elif op == "settings" and self.bucket is not None:
            local_rev = (await asyncio.to_thread(self.store.builtin_settings, voice_id))[0]
            if local_rev < rev:
                remote = await self.bucket.get_settings(voice_id)
                if remote is not None:
                    await asyncio.to_thread(self.store.save_builtin_settings, voice_id, *remote)
        self.store.invalidate()
        self.applied += 1
        if self.on_change is not None:
            self.on_change(voice_id)

    async def _apply_delete(self, voice_id: str, box: str) -> None:
        """A removal announced on the log: acted on only once the bucket confirms it with its tombstone.

        The log is a hint, not an authority: anyone who can write to Redis can add an entry, and a forged one must
        not take a voice off any box (nor, through a start-up, put a tombstone in the bucket). A genuine removal
        writes the tombstone before it is announced, so it is confirmed at once. Without a bucket, the front that
        removed the voice already removed it from this box's disk; the others only forget it (``on_change``).
        """
        if self.bucket is None:
            return
        if await self.bucket.is_removed(voice_id):  # S3 errors: logged by the caller; the resync settles it
            await self._drop_local(voice_id, here=False)
            return
        logger.warning(
            "voice library: ignoring a delete announcement of %s (from box %r): the bucket holds no tombstone for it",
            voice_id,
            box[:64],
        )
        await self._count(protocol.VOICE_DELETES_UNCONFIRMED)

    async def _count(self, counter: str) -> None:
        try:
            await self.redis.incr(counter)
        except (RedisError, OSError) as err:  # the counter is best effort; the log line above is the record
            logger.warning("voice library: could not count %s: %s", counter, err)

    async def _refresh(self, voice_id: str, rev: int | None) -> bool:
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
            return await self._drop_local(voice_id, here=False)
        if local is not None and revision(local.meta) >= revision(remote.meta):
            return False
        await self._write_local(remote.meta, remote.reference)
        if await self._removed_meanwhile(voice_id):
            return True
        logger.info("voice library: %s is at revision %d on this box", voice_id, revision(remote.meta))
        return True

    async def _removed_meanwhile(self, voice_id: str) -> bool:
        """A removal applied while this voice was being fetched: take the copy just written away again."""
        if voice_id not in await asyncio.to_thread(self.store.tombstones):
            return False
        await asyncio.to_thread(self.store.remove, voice_id)
        self.store.invalidate()
        return True

    async def _drop_local(self, voice_id: str, *, here: bool) -> bool:
        """Take the voice off this disk and remember the removal (``here``: asked of this box's API)."""
        await asyncio.to_thread(self.store.add_tombstone, voice_id, here=here)
        removed = await asyncio.to_thread(self.store.remove, voice_id)
        self.store.invalidate()
        if removed and self.on_change is not None:
            self.on_change(voice_id)
        return removed

    # ----- catching up -----------------------------------------------------------------------------------------

    async def catch_up(self) -> CatchUp:
        """At start: count what was missed since this box's cursor, compare with the bucket, then follow the log."""
        report = CatchUp()
        saved = await asyncio.to_thread(self.store.cursor)
        newest = "0-0"
        refresh: set[str] = set()
        try:
            last: Any = await self.redis.xrevrange(protocol.VOICES_LOG, count=1)
            if last:
                newest = _text(last[0][0])
            if saved is not None and newest != "0-0":
                first: Any = await self.redis.xrange(protocol.VOICES_LOG, count=1)
                report.trimmed = bool(first) and _entry_ms(_text(first[0][0])) > _entry_ms(saved)
                missed: Any = await self.redis.xrange(protocol.VOICES_LOG, min=f"({saved}", max="+")
                report.missed = len(missed)
                report.behind_s = max(0.0, (_entry_ms(newest) - _entry_ms(saved)) / 1000.0)
                for _, raw in missed:
                    fields = {_text(k): _text(v) for k, v in raw.items()}
                    if fields.get("op") in ("put", "settings"):
                        refresh.add(fields.get("voice_id", ""))
            elif saved is None:
                report.trimmed = True  # first start of this box: compare every voice
        except (RedisError, OSError) as err:
            logger.warning("voice library: cannot read the announcement log (%s); the bucket alone is compared", err)
            report.trimmed = True
        self._cursor = newest if newest != "0-0" else (saved or "0-0")
        await self.reconcile(report, refresh)
        if newest != "0-0":
            await asyncio.to_thread(self.store.save_cursor, newest)
        self.catch_up_report = report
        logger.info(
            "voice library: %s %s caught up: %d announcements missed, %.1f s behind%s; "
            "restored %d, removed %d, refreshed %d, uploaded %d, tombstones uploaded %d%s",
            self.role,
            self.box_id,
            report.missed,
            report.behind_s,
            " (the log was trimmed or this is the box's first start: compared every voice)" if report.trimmed else "",
            report.restored,
            report.removed,
            report.refreshed,
            report.uploaded,
            report.tombstones_uploaded,
            "" if report.bucket_ok else "; the bucket was unreachable, retrying in the background",
        )
        return report

    async def reconcile(self, report: CatchUp, refresh: set[str] | None = None) -> CatchUp:
        """Make this disk agree with the bucket; ``refresh`` names voices edited since the cursor (all when
        ``report.trimmed``). A front also uploads the voices the bucket has never seen (cloned before the bucket was
        set), but never one with a tombstone here or there."""
        if self.bucket is None:
            return report
        try:
            listing = await self.bucket.listing()
        except aws_errors() as err:
            await self._failed(f"cannot list s3://{self.bucket.bucket}/{self.bucket.prefix}; serving this disk", err)
            report.bucket_ok = False
            return report
        local = set((await asyncio.to_thread(self.store.all)).keys())
        for voice_id in sorted(local & listing.tombstones):
            if await self._drop_local(voice_id, here=False):
                report.removed += 1
        removed_here = await self._settle_removals(listing.voices, report)
        missing = listing.voices - local - removed_here
        if self.catching_up:
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
                    await self._failed(f"uploading the tombstone of {voice_id} (removed on this box) failed", err)
                    continue
                report.tombstones_uploaded += 1
                logger.warning(
                    "voice library: uploaded a tombstone for %s: it was removed through this box's API while the "
                    "bucket did not know it (removed everywhere now)",
                    voice_id,
                )
                await self._count(protocol.VOICE_TOMBSTONES_UPLOADED)
        return removed

    async def _refresh_all(self, voice_ids: set[str], what: str) -> int:
        done = 0
        for voice_id in sorted(voice_ids):
            try:
                done += await self._refresh(voice_id, None)
            except aws_errors(ValueError) as err:
                await self._failed(f"{what} {voice_id} failed", err)
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
                await self._failed(f"uploading {voice_id} failed", err)
        return done

    async def _refresh_settings(self, voice_ids: set[str]) -> None:
        assert self.bucket is not None
        for voice_id in sorted(voice_ids):
            try:
                remote = await self.bucket.get_settings(voice_id)
            except aws_errors(ValueError) as err:
                await self._failed(f"reading the settings of {voice_id} failed", err)
                continue
            if remote is not None and remote[0] > (await asyncio.to_thread(self.store.builtin_settings, voice_id))[0]:
                await asyncio.to_thread(self.store.save_builtin_settings, voice_id, *remote)

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)

    async def _resync_loop(self) -> None:
        while not self._stop.is_set():
            await self._pause(self.resync_s)
            if self._stop.is_set():
                return
            report = await self.reconcile(CatchUp())
            if report.removed or report.restored:
                logger.warning(
                    "voice library: the periodic comparison with the bucket restored %d and removed %d voices "
                    "(an announcement was lost)",
                    report.restored,
                    report.removed,
                )

    async def _reconcile_until_done(self) -> None:
        while not self._stop.is_set():
            await self._pause(RESYNC_EVERY_S)
            if self._stop.is_set():
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

    # ----- a box without a bucket ------------------------------------------------------------------------------

    async def _announce_box(self) -> None:
        while not self._stop.is_set():
            try:
                await self.check_boxes()
            except (RedisError, OSError) as err:
                logger.debug("voice library: box announcement failed: %s", err)
            await self._pause(BOX_EVERY_S)

    async def check_boxes(self) -> None:
        """Announce this box; without a bucket, warn when other boxes on this Redis hold voices this one cannot."""
        clones = len(await asyncio.to_thread(self.store.all))
        bucket = self.bucket.bucket if self.bucket is not None else None
        await self.redis.set(
            protocol.voice_box_key(self.box_id), json.dumps({"clones": clones, "bucket": bucket}), ex=BOX_TTL_S
        )
        if self.bucket is not None:
            self.warning = None
            return
        others: list[dict[str, Any]] = []
        async for key in self.redis.scan_iter(match=protocol.VOICE_BOX_PREFIX + "*", count=100):
            if _text(key) == protocol.voice_box_key(self.box_id):
                continue
            raw = await self.redis.get(key)
            with contextlib.suppress(TypeError, ValueError):
                others.append(json.loads(raw) if raw is not None else {})
        elsewhere = sum(int(o.get("clones") or 0) for o in others)
        warning = None
        if others and (elsewhere or clones):
            warning = (
                f"{len(others)} other box(es) share this Redis and cloned voices exist ({elsewhere} elsewhere, "
                f"{clones} here), but ZSYNTH_VOICES_BUCKET is not set on this box: voices cloned on one box are "
                "unknown on the others. Set the same ZSYNTH_VOICES_BUCKET on every box."
            )
        if warning != self.warning and warning is not None:
            logger.critical("voice library: %s", warning)
        self.warning = warning


# The voice library across boxes.
