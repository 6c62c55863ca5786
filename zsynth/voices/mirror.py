"""The S3 mirror of cloned voices: adds and removals are copied to a bucket; a box restores what it lacks at start.

Objects: ``<prefix><voice_id>/reference.wav`` then ``<prefix><voice_id>/meta.json``. meta.json goes up last and comes
down first on removal, so a voice in the bucket is complete whenever its meta.json is there.

A mirror failure never touches the local voice: each operation is retried with doubling delays, every failed attempt
is logged and counted (``failures``, and the Redis counter the front wires in), and what is still owed after the last
try is settled at the next start (local voices the bucket lacks are uploaded; tombstoned removals are re-sent).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, Literal

import aioboto3
from botocore.exceptions import BotoCoreError, ClientError

from .store import META, REFERENCE, VoiceStore, is_clone_id

logger = logging.getLogger(__name__)

MAX_DELAY_S = 30.0
_S3_ERRORS = (BotoCoreError, ClientError, OSError, asyncio.TimeoutError)


@dataclass(frozen=True, slots=True)
class MirrorOp:
    """One pending change for the bucket."""

    kind: Literal["put", "delete"]
    voice_id: str


@dataclass(slots=True)
class RestoreReport:
    """What the start-up reconciliation did."""

    restored: int = 0
    uploaded: int = 0
    deleted: int = 0


class VoiceMirror:
    """Copies the store's clones to ``s3://bucket/prefix`` in the background."""

    def __init__(
        self,
        store: VoiceStore,
        bucket: str,
        prefix: str,
        *,
        attempts: int = 5,
        retry_s: float = 1.0,
        on_failure: Callable[[], Awaitable[Any]] | None = None,
    ) -> None:
        self.store = store
        self.bucket = bucket
        self.prefix = prefix
        self.attempts = attempts
        self.retry_s = retry_s
        self.on_failure = on_failure
        self.failures = 0
        self._queue: asyncio.Queue[MirrorOp] = asyncio.Queue()
        self._stack = AsyncExitStack()
        self._s3: Any = None
        self._task: asyncio.Task[None] | None = None

    def _key(self, voice_id: str, name: str) -> str:
        return f"{self.prefix}{voice_id}/{name}"

    async def start(self) -> None:
        """Open the S3 client and the background sender."""
        self._s3 = await self._stack.enter_async_context(aioboto3.Session().client("s3"))
        self._task = asyncio.create_task(self._run(), name="voice-mirror")

    async def close(self, grace_s: float = 5.0) -> None:
        """Give pending operations a moment, then stop (what is left is settled at the next start)."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._queue.join(), grace_s)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._stack.aclose()

    # ----- queueing --------------------------------------------------------------------------------------------

    def put(self, voice_id: str) -> None:
        """Mirror a new voice."""
        self._queue.put_nowait(MirrorOp("put", voice_id))

    def delete(self, voice_id: str) -> None:
        """Mirror a removal (the caller has already written the tombstone)."""
        self._queue.put_nowait(MirrorOp("delete", voice_id))

    async def drain(self) -> None:
        """Wait until every queued operation succeeded or ran out of tries."""
        await self._queue.join()

    async def _run(self) -> None:
        while True:
            op = await self._queue.get()
            try:
                await self._with_retries(op)
            finally:
                self._queue.task_done()

    async def _with_retries(self, op: MirrorOp) -> None:
        delay = self.retry_s
        for attempt in range(1, self.attempts + 1):
            try:
                await (self._upload(op.voice_id) if op.kind == "put" else self._remove(op.voice_id))
                return
            except _S3_ERRORS as err:
                await self._count_failure()
                logger.warning(
                    "voice mirror: %s %s failed (attempt %d/%d): %s", op.kind, op.voice_id, attempt, self.attempts, err
                )
            if attempt < self.attempts:
                await asyncio.sleep(delay)
                delay = min(MAX_DELAY_S, delay * 2)
        logger.error("voice mirror: giving up on %s %s until the next start", op.kind, op.voice_id)

    async def _count_failure(self) -> None:
        self.failures += 1
        if self.on_failure is not None:
            try:
                await self.on_failure()
            except Exception as err:  # the counter is best effort; the mirror goes on
                logger.warning("voice mirror: could not count a failure: %s", err)

    # ----- S3 operations ---------------------------------------------------------------------------------------

    async def _upload(self, voice_id: str) -> None:
        files = await asyncio.to_thread(self.store.read_files, voice_id)  # up to a few MB: off the loop
        if files is None:
            logger.info("voice mirror: %s is gone locally; nothing to upload", voice_id)
            return
        meta, reference = files
        await self._s3.put_object(
            Bucket=self.bucket, Key=self._key(voice_id, REFERENCE), Body=reference, ContentType="audio/wav"
        )
        await self._s3.put_object(
            Bucket=self.bucket, Key=self._key(voice_id, META), Body=meta, ContentType="application/json"
        )
        logger.info("voice mirror: uploaded %s to s3://%s/%s", voice_id, self.bucket, self.prefix)

    async def _remove(self, voice_id: str) -> None:
        await self._s3.delete_object(Bucket=self.bucket, Key=self._key(voice_id, META))
        await self._s3.delete_object(Bucket=self.bucket, Key=self._key(voice_id, REFERENCE))
        self.store.drop_tombstone(voice_id)
        logger.info("voice mirror: removed %s from s3://%s/%s", voice_id, self.bucket, self.prefix)

    async def remote_ids(self) -> set[str]:
        """Ids of the complete voices in the bucket (those with a meta.json)."""
        ids: set[str] = set()
        paginator = self._s3.get_paginator("list_objects_v2")
        async for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix):
            for obj in page.get("Contents", []):
                rest = str(obj["Key"])[len(self.prefix) :]
                voice_id, _, name = rest.partition("/")
                if name == META and is_clone_id(voice_id):
                    ids.add(voice_id)
        return ids

    async def _download(self, voice_id: str) -> bool:
        meta_obj = await self._s3.get_object(Bucket=self.bucket, Key=self._key(voice_id, META))
        meta = json.loads(await meta_obj["Body"].read())
        if not isinstance(meta, dict) or meta.get("voice_id") != voice_id:
            logger.error("voice mirror: s3 meta of %s does not describe it; skipped", voice_id)
            return False
        ref_obj = await self._s3.get_object(Bucket=self.bucket, Key=self._key(voice_id, REFERENCE))
        reference = await ref_obj["Body"].read()
        try:
            await asyncio.to_thread(self.store.install, meta, reference)
        except FileExistsError:
            return False  # another front on this box restored it first
        return True

    async def restore(self) -> RestoreReport:
        """Reconcile at start: fetch voices the disk lacks, queue uploads the bucket lacks, re-send removals."""
        report = RestoreReport()
        tombstones = self.store.tombstones()
        try:
            remote = await self.remote_ids()
        except _S3_ERRORS as err:
            await self._count_failure()
            logger.error(
                "voice mirror: cannot list s3://%s/%s; serving local voices only: %s", self.bucket, self.prefix, err
            )
            return report
        local = set(self.store.all())
        for voice_id in sorted(remote - local - tombstones):
            try:
                if await self._download(voice_id):
                    report.restored += 1
            except (*_S3_ERRORS, ValueError) as err:
                await self._count_failure()
                logger.error("voice mirror: restoring %s failed: %s", voice_id, err)
        for voice_id in sorted(local - remote):
            self.put(voice_id)
            report.uploaded += 1
        for voice_id in sorted(tombstones):
            self.delete(voice_id)
            report.deleted += 1
        logger.info(
            "voice mirror: s3://%s/%s restored %d, uploading %d, removing %d",
            self.bucket,
            self.prefix,
            report.restored,
            report.uploaded,
            report.deleted,
        )
        return report
