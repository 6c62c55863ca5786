"""What every part of a stack needs: the repository root, free loopback ports, waiting, front settings."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zsynth.core.config import Settings

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port on loopback nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.05) -> None:
    """Poll ``predicate`` until true; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def make_settings(redis_url: str, data_dir: Path, **overrides: Any) -> Settings:
    """Front settings for tests (short deadlines so failures surface quickly)."""
    base: dict[str, Any] = {
        "redis_url": redis_url,
        "data_dir": data_dir,
        "jobs_first_chunk_timeout_s": 20.0,
        "jobs_chunk_timeout_s": 10.0,
        # A worker run inside the test process shares that process's memory (torch, every engine the run loaded):
        # the engine's own ceiling would stop its jobs or end the whole test run. Tests of the ceiling set theirs.
        "worker_max_rss": 2**40,
    }
    base.update(overrides)
    return Settings().with_(**base)


#: About 30 sentences: keeps a worker busy for a while (a job to kill, to wait behind, to yield).
LONG_TEXT = " ".join(f"This is sentence {n} of a long text that keeps the worker busy for a while." for n in range(30))
