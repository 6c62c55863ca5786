"""A real ``zsynth worker`` as a child process."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from harness.base import ROOT, free_port, wait_for
from zsynth.core import protocol
from zsynth.core.redis_link import sync_client


class WorkerProcess:
    """A real ``zsynth worker`` child process (its log to ``log_path`` when given, else to the test's stderr), serving
    its own metrics on ``metrics_url``."""

    def __init__(
        self, redis_url: str, worker_id: str, data_dir: Path, *, log_path: str | None = None, **env: str
    ) -> None:
        self.redis_url = redis_url
        self.worker_id = worker_id
        self.metrics_port = int(env.get("ZSYNTH_WORKER_METRICS_PORT") or free_port())
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        full_env = dict(
            os.environ,
            ZSYNTH_REDIS_URL=redis_url,
            ZSYNTH_WORKER_ID=worker_id,
            ZSYNTH_DATA_DIR=str(data_dir),
            ZSYNTH_ENGINE_THREADS="1",
            ZSYNTH_HEARTBEAT_INTERVAL="0.5",
            ZSYNTH_HEARTBEAT_TTL="3",
            ZSYNTH_WORKER_METRICS_PORT=str(self.metrics_port),
            PYTHONUNBUFFERED="1",
        )
        full_env.update(env)
        with contextlib.ExitStack() as stack:  # the log file's copy here closes once the child holds its own
            log = stack.enter_context(Path(log_path).open("ab")) if log_path is not None else None
            self.proc = subprocess.Popen([sys.executable, "-m", "zsynth", "worker"], env=full_env, cwd=ROOT, stderr=log)

    def wait_ready(self, timeout: float = 60.0) -> WorkerProcess:
        """Block until the worker's heartbeat shows up."""
        client = sync_client(self.redis_url)
        key = protocol.heartbeat_key(self.worker_id)

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"worker {self.worker_id} exited with {self.proc.returncode}")
            return bool(client.exists(key))

        wait_for(ready, timeout, f"worker {self.worker_id} heartbeat")
        client.close()
        return self

    def kill(self) -> None:
        """SIGKILL: the worker dies without a word."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


def stop_all(workers: list[WorkerProcess]) -> None:
    """Stop ``workers`` together: SIGTERM to every one first, so that their drains overlap, then wait for each."""
    for worker in workers:
        if worker.proc.poll() is None:
            worker.proc.terminate()
    for worker in workers:  # not stop(): a second SIGTERM would end a worker's drain early
        try:
            worker.proc.wait(15)
        except subprocess.TimeoutExpired:
            worker.kill()
