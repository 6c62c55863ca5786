"""Issue 27, item 5: the voice log on Redis is a hint, not an authority.

A forged ``XADD zsynth:voices:log * op delete voice_id <id> revision 0 box x`` used to take a voice off every box
within 2 s and, after a front restart, put a permanent tombstone in the bucket. Now a delete announcement is acted
on only once the bucket holds the voice's tombstone, and a start-up uploads a tombstone only for a removal asked of
its own API (logged and counted), so a forged entry leaves the voice served everywhere; a real removal through the
API still removes it everywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aioboto3
import aiohttp
import pytest
from redis.asyncio import Redis

from harness.audio import assert_speech, decode_audio
from harness.base import make_settings
from harness.fronts import front_process
from harness.s3 import PREFIX, create_bucket, start_front
from harness.stores import redis_text
from harness.voice_clips import reference_file
from harness.workers import WorkerProcess
from zsynth.core import protocol
from zsynth.core.voices.bucket import VoiceBucket
from zsynth.core.voices.store import VoiceStore
from zsynth.services.keys import VOICE_LIBRARY
from zsynth.speech.app import create_app

TIMEOUT = aiohttp.ClientTimeout(total=60)
TEXT = "A forged line on Redis does not remove a voice."
FORMAT = "pcm_22050"


async def _within(seconds: float, check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + seconds
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        await asyncio.sleep(0.05)


async def _clone(base: str) -> str:
    form = aiohttp.FormData()
    form.add_field("name", "target of a forged delete")
    form.add_field("files", reference_file("wav"), filename="ref.wav", content_type="audio/wav")
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http, http.post(f"{base}/v1/voices/add", data=form) as r:
        assert r.status == 200, await r.text()
        return str((await r.json())["voice_id"])


async def _served(base: str, voice_id: str) -> tuple[bool, int]:
    """(listed by GET /v1/voices, status of a speech request); a 200 must carry speech."""
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        async with http.get(f"{base}/v1/voices") as r:
            listed = voice_id in {v["voice_id"] for v in (await r.json())["voices"]}
        url = f"{base}/v1/text-to-speech/{voice_id}?output_format={FORMAT}"
        async with http.post(url, json={"text": TEXT}) as r:
            if r.status == 200:
                pcm, rate = decode_audio(await r.read(), FORMAT)
                assert_speech(pcm, rate, TEXT)
            return listed, r.status


async def _bucket_keys(bucket: str, voice_id: str) -> set[str]:
    async with aioboto3.Session().client("s3") as s3:
        listing = await s3.list_objects_v2(Bucket=bucket, Prefix=f"{PREFIX}{voice_id}/")
    return {str(o["Key"]).rsplit("/", 1)[1] for o in listing.get("Contents", [])}


def _cursor(data: Path) -> str:
    with contextlib.suppress(OSError):
        return (data / "voices" / ".cursor").read_text().strip()
    return ""


@pytest.mark.heavy
async def test_a_forged_delete_on_redis_leaves_the_voice_served_and_a_real_delete_still_removes_it(
    aws_endpoint, private_redis_url, tmp_path
):
    bucket = await create_bucket()
    env = {"ZSYNTH_VOICES_BUCKET": bucket, "ZSYNTH_VOICES_PREFIX": PREFIX}
    front_data, worker_data = tmp_path / "front", tmp_path / "worker"
    redis = Redis.from_url(private_redis_url)
    worker = WorkerProcess(private_redis_url, f"log-{uuid.uuid4().hex[:6]}", worker_data, **env)
    try:
        with front_process(private_redis_url, front_data, **env) as (_, base):
            worker.wait_ready()
            voice_id = await _clone(base)
            assert await _served(base, voice_id) == (True, 200)
            assert (worker_data / "voices" / voice_id / "meta.json").is_file()  # the worker fetched it for the job

            # The forgery: one entry on the log, as anyone with Redis access can write it.
            forged = redis_text(
                await redis.xadd(
                    protocol.VOICES_LOG, {"op": "delete", "voice_id": voice_id, "revision": "0", "box": "x"}
                )
            )

            async def both_read_it() -> bool:
                return _cursor(front_data) == forged and _cursor(worker_data) == forged

            await _within(10, both_read_it, "the front and the worker to apply the forged entry")
            await asyncio.sleep(0.5)
            assert await _served(base, voice_id) == (True, 200)
            for data in (front_data, worker_data):
                assert (data / "voices" / voice_id / "meta.json").is_file(), data
                assert not (data / "voices" / ".deleted" / voice_id).exists(), data
            assert int(await redis.get(protocol.VOICE_DELETES_UNCONFIRMED) or 0) == 2  # the front and the worker

        # A front restart: its start-up compares with the bucket and must not turn anything into a tombstone.
        with front_process(private_redis_url, front_data, **env) as (_, base):
            assert await _served(base, voice_id) == (True, 200)
            assert "tombstone.json" not in await _bucket_keys(bucket, voice_id)
            assert int(await redis.get(protocol.VOICE_TOMBSTONES_UPLOADED) or 0) == 0

            # A genuine removal through the API still removes it everywhere.
            async with aiohttp.ClientSession(timeout=TIMEOUT) as http, http.delete(f"{base}/v1/voices/{voice_id}") as r:
                assert r.status == 200, await r.text()
            assert await _bucket_keys(bucket, voice_id) == {"tombstone.json"}

            async def gone_from_worker() -> bool:
                return not (worker_data / "voices" / voice_id).exists()

            await _within(5, gone_from_worker, "the worker to drop the removed voice")
            listed, status = await _served(base, voice_id)
            assert not listed and status == 404
    finally:
        worker.stop()
        await redis.aclose()


@pytest.mark.stack
async def test_a_start_up_uploads_a_tombstone_only_for_a_removal_made_through_its_own_api(
    aiohttp_client, aws_endpoint, private_redis_url, tmp_path
):
    """Two voices the bucket serves, both remembered as removed on this box's disk: one removal was only heard of
    (an empty marker, as earlier versions wrote for every announcement), the other was asked of this box's API while
    it had no bucket. The start-up restores the first and uploads a tombstone for the second only, logged and
    counted."""
    bucket_name = await create_bucket()
    heard, made_here = (f"custom-tomb{n}{uuid.uuid4().hex[:10]}" for n in range(2))
    bucket = VoiceBucket(bucket_name, PREFIX)
    await bucket.open()
    try:
        for voice_id in (heard, made_here):
            meta: dict[str, Any] = {"format": 1, "voice_id": voice_id, "name": voice_id, "revision": 0}
            await bucket.put_voice({**meta, "reference": "reference.wav"}, reference_file("wav"))
    finally:
        await bucket.close()
    data = tmp_path / "data"
    store = VoiceStore(data / "voices")
    store.ensure()
    (data / "voices" / ".deleted" / heard).write_bytes(b"")  # a marker from before this mend: origin unknown
    store.add_tombstone(made_here, here=True)

    front = await start_front(aiohttp_client, private_redis_url, data, bucket_name)
    report = front.app[VOICE_LIBRARY].catch_up_report
    assert report is not None and report.tombstones_uploaded == 1 and report.restored == 1, report
    assert "tombstone.json" not in await _bucket_keys(bucket_name, heard)
    assert "tombstone.json" in await _bucket_keys(bucket_name, made_here)
    listed = {v["voice_id"] for v in (await (await front.get("/v1/voices")).json())["voices"]}
    assert heard in listed and made_here not in listed
    assert heard not in store.tombstones() and made_here in store.tombstones()
    redis = Redis.from_url(private_redis_url)
    try:
        assert int(await redis.get(protocol.VOICE_TOMBSTONES_UPLOADED) or 0) == 1
    finally:
        await redis.aclose()


@pytest.mark.stack
async def test_without_a_bucket_a_delete_announcement_never_removes_a_voice_from_disk(
    aiohttp_client, private_redis_url, tmp_path
):
    """One box, no bucket: its disk is the truth; the front that removes a voice removes it itself, so a delete on
    the log (forged, or from another box on the same Redis) takes nothing off this disk."""
    front = await aiohttp_client(create_app(make_settings(private_redis_url, tmp_path)))
    base = str(front.make_url("")).rstrip("/")
    voice_id = await _clone(base)
    library = front.app[VOICE_LIBRARY]
    applied = library.applied
    redis = Redis.from_url(private_redis_url)
    try:
        await redis.xadd(protocol.VOICES_LOG, {"op": "delete", "voice_id": voice_id, "revision": "0", "box": "x"})
    finally:
        await redis.aclose()

    async def applied_it() -> bool:
        return library.applied > applied

    await _within(10, applied_it, "the follower to apply the entry")
    assert (tmp_path / "voices" / voice_id / "meta.json").is_file()
    assert (await front.get(f"/v1/voices/{voice_id}")).status == 200
