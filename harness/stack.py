"""One local stack, booted one way for every benchmark: a throw-away redis-server, workers and fronts on loopback.

``local_stack(workers=2, worker_env=..., front_env=...)`` starts Redis, a temporary data directory, the workers (all
ready before it yields) and, unless ``fronts=0``, the fronts; it stops them all on the way out, fronts first. A
benchmark that needs more mid-run adds them (``stack.add_worker``) and they are stopped with the rest.
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness.fronts import front_process
from harness.stores import RedisServer
from harness.workers import WorkerProcess


@dataclass
class LocalStack:
    """A running stack: its Redis, its data directory, its workers and its fronts (process and base URL)."""

    redis: RedisServer
    data_dir: Path
    name: str
    worker_env: dict[str, str]
    workers: list[WorkerProcess] = field(default_factory=list)
    fronts: list[tuple[subprocess.Popen[bytes], str]] = field(default_factory=list)
    ready_timeout: float = 60.0

    @property
    def redis_url(self) -> str:
        """The Redis every part of the stack uses."""
        return self.redis.url

    @property
    def base(self) -> str:
        """The first front's base URL."""
        return self.fronts[0][1]

    @property
    def front(self) -> subprocess.Popen[bytes]:
        """The first front's process."""
        return self.fronts[0][0]

    def start_worker(self, **env: str) -> WorkerProcess:
        """Start one more worker (the stack's worker environment, then ``env``); it is stopped with the stack."""
        worker = WorkerProcess(
            self.redis_url, f"{self.name}-{len(self.workers)}", self.data_dir, **{**self.worker_env, **env}
        )
        self.workers.append(worker)
        return worker

    def add_worker(self, **env: str) -> WorkerProcess:
        """Start one more worker and wait until it is ready."""
        return self.start_worker(**env).wait_ready(self.ready_timeout)


@contextlib.contextmanager
def local_stack(
    *,
    workers: int = 1,
    fronts: int = 1,
    worker_env: Mapping[str, str] | None = None,
    front_env: Mapping[str, str] | None = None,
    name: str = "bench",
    ready_timeout: float = 60.0,
) -> Iterator[LocalStack]:
    """Redis, ``workers`` workers (each ready) and ``fronts`` fronts on loopback, stopped when the block ends."""
    redis = RedisServer().start()
    with contextlib.ExitStack() as stack:
        stack.callback(redis.stop)
        data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"zsynth-{name}-")))
        running = LocalStack(redis, data_dir, name, dict(worker_env or {}), ready_timeout=ready_timeout)

        @stack.callback
        def stop_workers() -> None:
            for worker in running.workers:
                worker.stop()

        for worker in [running.start_worker() for _ in range(workers)]:  # they boot side by side
            worker.wait_ready(ready_timeout)
        for _ in range(fronts):
            running.fronts.append(stack.enter_context(front_process(running.redis_url, data_dir, **(front_env or {}))))
        yield running
