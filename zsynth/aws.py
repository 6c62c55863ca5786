"""The one botocore configuration of every DynamoDB and S3 client: connect and read timeouts, bounded retries.

botocore's own defaults (60 s to connect, 60 s per read, several attempts) let a silent endpoint hold a request, or a
start, for minutes. With these, a call to an endpoint that accepts and never answers fails after about
``attempts x read timeout`` plus a short backoff (8 s with the defaults), and one that refuses connections at once.
"""

from __future__ import annotations

from botocore.config import Config

from .config import AWS_CONNECT_TIMEOUT_S, AWS_MAX_ATTEMPTS, AWS_READ_TIMEOUT_S, Settings


def client_config(settings: Settings | None = None) -> Config:
    """The Config for ``settings`` (``ZSYNTH_AWS_*``), or the defaults without settings."""
    connect = settings.aws_connect_timeout_s if settings is not None else AWS_CONNECT_TIMEOUT_S
    read = settings.aws_read_timeout_s if settings is not None else AWS_READ_TIMEOUT_S
    attempts = settings.aws_max_attempts if settings is not None else AWS_MAX_ATTEMPTS
    return Config(
        connect_timeout=connect,
        read_timeout=read,
        retries={"total_max_attempts": attempts, "mode": "standard"},
    )
