"""The one botocore configuration of every DynamoDB and S3 client: connect and read timeouts, bounded retries.

botocore's own defaults (60 s to connect, 60 s per read, several attempts) let a silent endpoint hold a request, or a
start, for minutes. With these, a call to an endpoint that accepts and never answers fails after about
``attempts x read timeout`` plus a short backoff (8 s with the defaults), and one that refuses connections at once.

aioboto3 and botocore are imported here only when a client is configured (``zsynth.core.optional``): a process with
no bucket and no keys table never loads them.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

from zsynth.core.config import AWS_CONNECT_TIMEOUT_S, AWS_MAX_ATTEMPTS, AWS_READ_TIMEOUT_S, Settings
from zsynth.core.optional import load

if TYPE_CHECKING:
    from botocore.config import Config


def client_config(settings: Settings | None = None) -> Config:
    """The Config for ``settings`` (``ZSYNTH_AWS_*``), or the defaults without settings."""
    connect = settings.aws.connect_timeout_s if settings is not None else AWS_CONNECT_TIMEOUT_S
    read = settings.aws.read_timeout_s if settings is not None else AWS_READ_TIMEOUT_S
    attempts = settings.aws.max_attempts if settings is not None else AWS_MAX_ATTEMPTS
    config: type[Config] = load("botocore.config", "an S3 bucket or a DynamoDB table").Config
    return config(
        connect_timeout=connect,
        read_timeout=read,
        retries={"total_max_attempts": attempts, "mode": "standard"},
    )


class S3Prefix:
    """An S3 client for the objects under ``s3://bucket/prefix`` (endpoint and credentials from the standard AWS
    variables), with :func:`client_config`'s timeouts unless given another ``config``."""

    def __init__(self, bucket: str, prefix: str, config: Config | None = None) -> None:
        self.bucket = bucket
        self.prefix = prefix
        self.config = config or client_config()
        self._stack = AsyncExitStack()
        self._s3: Any = None

    async def open(self) -> None:
        """Open the S3 client (no request is made: a bucket that is down does not stop a start)."""
        aioboto3 = load("aioboto3", f"the bucket s3://{self.bucket}")
        self._s3 = await self._stack.enter_async_context(aioboto3.Session().client("s3", config=self.config))

    async def close(self) -> None:
        """Close the client."""
        await self._stack.aclose()
