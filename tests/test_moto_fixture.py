"""The loopback DynamoDB/S3 server answers aioboto3 unpatched."""

from __future__ import annotations

import aioboto3
import pytest

pytestmark = pytest.mark.stack


async def test_moto_server_answers_aioboto3(aws_endpoint):
    session = aioboto3.Session()
    async with session.client("s3") as s3:
        await s3.create_bucket(Bucket="fixture-check")
        await s3.put_object(Bucket="fixture-check", Key="k", Body=b"v")
        obj = await s3.get_object(Bucket="fixture-check", Key="k")
        assert await obj["Body"].read() == b"v"
        assert s3.meta.endpoint_url == aws_endpoint
