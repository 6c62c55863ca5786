"""The voice library's news: announcements on :data:`protocol.VOICES_LOG`, the catch-up at start, and the boxes.

* **Announcements** of a change made through a front (new, edited, removed, saved settings) are read by every process
  with ``XREAD BLOCK`` from the last entry it applied: a new or edited voice is fetched from the bucket into the disk
  cache, a removed one is dropped once the bucket confirms the removal with its tombstone (the log is a hint, not an
  authority: anyone who can write to Redis can add to it), and ``on_change`` lets a worker drop its engine state for
  the voice. The stream is both the live feed and the catch-up log, so no announcement falls between a subscription
  and a catch-up. After the follower lost Redis the disk is compared with the bucket as soon as Redis answers again.
* **At start** a process counts the announcements it missed since its cursor and how far behind it was, then
  compares its disk with the bucket (:meth:`~zsynth.core.voices.mirror.Mirror.reconcile`).
* **Boxes.** Fronts announce themselves (:func:`protocol.voice_box_key`) so that a second box on the same Redis
  without a bucket, while cloned voices exist, says so loudly (:attr:`Announcements.warning`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from typing import Any, Final, Literal

from redis.exceptions import RedisError
from redis.typing import EncodableT, FieldT

from zsynth.core import protocol, workspaces
from zsynth.core.optional import aws_errors
from zsynth.core.voices.catalogue import MissingIds
from zsynth.core.voices.mirror import CatchUp, Mirror
from zsynth.core.voices.store import is_clone_id

logger = logging.getLogger(__name__)

Op = Literal["put", "delete", "settings"]
READ_BLOCK_MS: Final = 5000
BOX_TTL_S: Final = 45
BOX_EVERY_S: Final = 15.0
MAX_BACKOFF_S: Final = 5.0


def _entry_ms(entry_id: str) -> int:
    with contextlib.suppress(ValueError):
        return int(entry_id.split("-", 1)[0])
    return 0


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Announcements:
    """One process's reading and writing of the announcement log, over this box's ``mirror``."""

    def __init__(self, mirror: Mirror, *, box_id: str, missing: MissingIds) -> None:
        self.mirror = mirror
        self.store = mirror.store
        self.bucket = mirror.bucket
        self.redis = mirror.redis
        self.role = mirror.role
        self.box_id = box_id
        self.missing = missing  # an announced voice is no longer missing
        self.warning: str | None = None  # why this box cannot share the voice library, when it cannot
        self.catch_up_report: CatchUp | None = None
        self.applied = 0  # announcements applied since start
        self._cursor = "0-0"

    async def announce(self, op: Op, voice_id: str, rev: int, owner: str | None = None) -> None:
        """Announce a change on the log (a failure is logged: the change is in the bucket already)."""
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

    async def follow(self) -> None:
        """Read the log from the cursor for ever, applying each entry; reconcile with the bucket after an outage."""
        backoff = 0.2
        lost = False
        while not self.mirror.stop.is_set():
            try:
                answer: Any = await self.redis.xread(
                    {protocol.VOICES_LOG: self._cursor}, block=READ_BLOCK_MS, count=100
                )
                if lost:
                    logger.info("voice library: redis is back; comparing with the bucket")
                    lost = False
                    await self.mirror.reconcile(CatchUp(trimmed=True))
                backoff = 0.2
            except (RedisError, OSError) as err:
                if self.mirror.stop.is_set():  # the close ended the read by closing the connection
                    return
                if not lost:
                    logger.warning("voice library: lost redis (%s); retrying", err)
                lost = True
                await self.mirror.pause(backoff)
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
            await self.mirror.failed(f"applying {dict(fields)} failed", err)
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
            await self.mirror.refresh(voice_id, rev)
        elif op == "settings" and self.bucket is not None:
            local_rev = (await asyncio.to_thread(self.store.builtin_settings, voice_id))[0]
            if local_rev < rev:
                remote = await self.bucket.get_settings(voice_id)
                if remote is not None:
                    await asyncio.to_thread(self.store.save_builtin_settings, voice_id, *remote)
        self.store.invalidate()
        self.applied += 1
        if self.mirror.on_change is not None:
            self.mirror.on_change(voice_id)

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
            await self.mirror.drop_local(voice_id, here=False)
            return
        logger.warning(
            "voice library: ignoring a delete announcement of %s (from box %r): the bucket holds no tombstone for it",
            voice_id,
            box[:64],
        )
        await self.mirror.count(protocol.VOICE_DELETES_UNCONFIRMED)

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
        await self.mirror.reconcile(report, refresh)
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

    async def announce_box(self) -> None:
        """On a front, every :data:`BOX_EVERY_S`: :meth:`check_boxes`."""
        while not self.mirror.stop.is_set():
            try:
                await self.check_boxes()
            except (RedisError, OSError) as err:
                logger.debug("voice library: box announcement failed: %s", err)
            await self.mirror.pause(BOX_EVERY_S)

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
