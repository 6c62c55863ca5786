"""The S3 mirror of cloned voices against a real S3-compatible server (moto's server mode) on loopback."""

from __future__ import annotations

import uuid
from pathlib import Path

import aioboto3
import aiohttp
from redis.asyncio import Redis

from zsynth import protocol
from zsynth.app import create_app
from zsynth.config import Settings
from zsynth.keys import VOICE_MIRROR

from .conftest import make_settings
from .voice_clips import reference_file

PREFIX = "team/voices/"


async def create_bucket() -> str:
    name = f"voices-{uuid.uuid4().hex[:10]}"
    async with aioboto3.Session().client("s3") as s3:
        await s3.create_bucket(Bucket=name)
    return name


async def bucket_keys(bucket: str) -> set[str]:
    async with aioboto3.Session().client("s3") as s3:
        listing = await s3.list_objects_v2(Bucket=bucket)
    return {obj["Key"] for obj in listing.get("Contents", [])}


async def start_front(aiohttp_client, redis_url: str, data_dir: Path, bucket: str, **overrides: object):
    settings = make_settings(
        redis_url, data_dir, voices_bucket=bucket, voices_prefix=PREFIX, voices_mirror_retry_s=0.05, **overrides
    )
    return await aiohttp_client(create_app(settings))


async def clone(front, name: str) -> str:
    form = aiohttp.FormData()
    form.add_field("name", name)
    form.add_field("files", reference_file("flac"), filename="ref.flac", content_type="audio/flac")
    resp = await front.post("/voices", data=form)
    assert resp.status == 200, await resp.text()
    return str((await resp.json())["voice_id"])


def test_prefix_setting_is_normalised():
    assert Settings.from_env({"ZSYNTH_VOICES_PREFIX": "/a/b"}).voices_prefix == "a/b/"
    assert Settings.from_env({"ZSYNTH_VOICES_PREFIX": ""}).voices_prefix == ""
    assert Settings.from_env({}).voices_prefix == "voices/" and Settings.from_env({}).voices_bucket is None


async def test_mirror_add_restore_on_empty_disk_and_remove(aiohttp_client, aws_endpoint, private_redis_url, tmp_path):
    bucket = await create_bucket()
    box_a = await start_front(aiohttp_client, private_redis_url, tmp_path / "a", bucket)
    voice_id = await clone(box_a, "mirrored")
    await box_a.app[VOICE_MIRROR].drain()
    assert await bucket_keys(bucket) == {f"{PREFIX}{voice_id}/meta.json", f"{PREFIX}{voice_id}/reference.wav"}
    await box_a.close()

    # A box in another region: empty disk, same bucket. It restores the voice at start.
    empty = tmp_path / "b"
    box_b = await start_front(aiohttp_client, private_redis_url, empty, bucket)
    voice = await (await box_b.get(f"/v1/voices/{voice_id}")).json()
    assert voice["name"] == "mirrored" and voice["category"] == "cloned"
    stored = empty / "voices" / voice_id
    original = tmp_path / "a" / "voices" / voice_id / "reference.wav"
    assert (stored / "reference.wav").read_bytes() == original.read_bytes()

    resp = await box_b.delete(f"/v1/voices/{voice_id}")
    assert resp.status == 200
    await box_b.app[VOICE_MIRROR].drain()
    assert await bucket_keys(bucket) == set()
    assert not stored.exists() and not (empty / "voices" / ".deleted" / voice_id).exists()
    await box_b.close()

    # A third empty box restores nothing: the removal reached the bucket.
    box_c = await start_front(aiohttp_client, private_redis_url, tmp_path / "c", bucket)
    assert (await box_c.get(f"/v1/voices/{voice_id}")).status == 404


async def test_mirror_failure_keeps_the_voice_is_counted_and_settled_at_next_start(
    aiohttp_client, aws_endpoint, private_redis_url, tmp_path
):
    missing = f"missing-{uuid.uuid4().hex[:10]}"
    box = await start_front(aiohttp_client, private_redis_url, tmp_path, missing, voices_mirror_attempts=3)
    voice_id = await clone(box, "kept locally")
    mirror = box.app[VOICE_MIRROR]
    await mirror.drain()
    # Listing the bucket at start failed once, then the upload failed on each of its 3 tries.
    assert mirror.failures == 4
    redis = Redis.from_url(private_redis_url)
    assert int(await redis.get(protocol.VOICE_MIRROR_FAILURES) or 0) == 4
    await redis.aclose()
    assert (await box.get(f"/v1/voices/{voice_id}")).status == 200
    await box.close()

    # The bucket exists now: the next start uploads what the bucket lacks.
    bucket = await create_bucket()
    box = await start_front(aiohttp_client, private_redis_url, tmp_path, bucket)
    await box.app[VOICE_MIRROR].drain()
    assert f"{PREFIX}{voice_id}/meta.json" in await bucket_keys(bucket)
    await box.close()

    # A removal the bucket cannot take is remembered (tombstone) and re-sent at the next start.
    box = await start_front(aiohttp_client, private_redis_url, tmp_path, missing, voices_mirror_attempts=1)
    assert (await box.delete(f"/voices/{voice_id}")).status == 200
    await box.app[VOICE_MIRROR].drain()
    assert (tmp_path / "voices" / ".deleted" / voice_id).exists()
    await box.close()
    box = await start_front(aiohttp_client, private_redis_url, tmp_path, bucket)
    await box.app[VOICE_MIRROR].drain()
    assert await bucket_keys(bucket) == set()
    assert not (tmp_path / "voices" / ".deleted" / voice_id).exists()
    assert (await box.get(f"/v1/voices/{voice_id}")).status == 404
