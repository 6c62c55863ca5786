"""Fronts: a real ``zsynth serve`` (or avatar, demo) as a child process, and speech fronts built in process for
aiohttp's test server."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from aiohttp import web

from harness.base import ROOT, free_port, wait_for
from zsynth.core.config import Settings
from zsynth.services.auth import AUTHENTICATOR, Authenticator
from zsynth.speech.app import create_app


@contextlib.contextmanager
def zsynth_process(
    command: str, port: int, env: dict[str, str], timeout: float = 60.0, log_path: str | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """Run ``zsynth <command>`` (serve, avatar, demo) until its port answers; yield (process, base URL).

    A process that exits while starting fails at once with its exit code; on the way out it is asked to stop
    (SIGTERM, so it drains) and killed only if it does not. Its log goes to ``log_path`` when given.
    """
    with contextlib.ExitStack() as stack:  # the log file's copy here closes once the child holds its own
        log = stack.enter_context(Path(log_path).open("ab")) if log_path is not None else None
        proc = subprocess.Popen(
            [sys.executable, "-m", "zsynth", command], env={**os.environ, **env}, cwd=ROOT, stderr=log
        )

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"zsynth {command} exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
        return False

    try:
        wait_for(up, timeout, f"zsynth {command}")
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@contextlib.contextmanager
def front_process(
    redis_url: str, data_dir: Path, *, log_path: str | None = None, **env: str
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """Run a real `zsynth serve` on a free port; yield (process, base URL). Its log goes to ``log_path`` if given."""
    port = free_port()
    env = {"ZSYNTH_REDIS_URL": redis_url, "ZSYNTH_PORT": str(port), "ZSYNTH_DATA_DIR": str(data_dir), **env}
    with zsynth_process("serve", port, env, timeout=30, log_path=log_path) as started:
        yield started


class FakeClock:
    """A wall clock the test moves by hand (expiry and cache tests never sleep)."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self.now += seconds


def clocked_app(settings: Settings) -> web.Application:
    """The speech front whose authenticator runs on a FakeClock (``app[AUTHENTICATOR].clock``) the test moves."""
    app = create_app(settings)
    app[AUTHENTICATOR] = Authenticator.from_settings(settings, clock=FakeClock())
    return app
