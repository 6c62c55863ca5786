"""S3 for the voice-library tests: a fresh bucket on the moto server, its keys, and a front that mirrors to it."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import aioboto3

from harness.base import make_settings
from zsynth.speech.app import create_app

PREFIX = "team/voices/"


async def create_bucket() -> str:
    """A new, empty bucket on the moto server the AWS variables point at."""
    name = f"voices-{uuid.uuid4().hex[:10]}"
    async with aioboto3.Session().client("s3") as s3:
        await s3.create_bucket(Bucket=name)
    return name


async def bucket_keys(bucket: str) -> set[str]:
    """Every object key in ``bucket``."""
    async with aioboto3.Session().client("s3") as s3:
        listing = await s3.list_objects_v2(Bucket=bucket)
    return {obj["Key"] for obj in listing.get("Contents", [])}


async def start_front(aiohttp_client: Any, redis_url: str, data_dir: Path, bucket: str, **overrides: object) -> Any:
    """A test client on a front whose voice library lives in ``bucket`` under PREFIX."""
    settings = make_settings(redis_url, data_dir, voices_bucket=bucket, voices_prefix=PREFIX, **overrides)
    return await aiohttp_client(create_app(settings))
