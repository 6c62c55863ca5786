"""The stores a stack runs on: a throw-away redis-server, and moto standing in for S3 and DynamoDB."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator

import redis

from harness.base import free_port, wait_for


def redis_text(reply: object) -> str:
    """One reply of a Redis client opened without decode_responses (redis-py types it as bytes or str), as text."""
    assert isinstance(reply, bytes), f"expected bytes from Redis, got {reply!r}"
    return reply.decode()


class RedisServer:
    """A throw-away redis-server on a loopback port, which a test may stop and start again."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        """Start it and wait until it answers PING."""
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--databases",
                "64",
            ],
            stdout=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url)

        def up() -> bool:
            with contextlib.suppress(redis.ConnectionError):
                return bool(client.ping())
            return False

        try:
            wait_for(up, 10, "redis-server")
        finally:
            client.close()
        return self

    def stop(self) -> None:
        """Stop it (its data is gone: persistence is off)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """Run a throw-away redis-server on a free loopback port; yield its URL."""
    server = RedisServer().start()
    try:
        yield server.url
    finally:
        server.stop()


def moto_env(endpoint: str) -> dict[str, str]:
    """The AWS variables that point botocore (and so aioboto3, unpatched) at a moto server on ``endpoint``."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """Run moto in server mode (DynamoDB and S3 compatible) on a free loopback port; yield its endpoint URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
        return False

    try:
        wait_for(up, 30, "moto server")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
