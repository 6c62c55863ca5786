"""Which workers of this box are speaking now, so a job alone on the box may use more than its share of the cores.

Each worker holds an exclusive ``flock`` on its own file in a directory all the box's workers share while it runs a
job; another worker sees it busy when it cannot take a shared lock on that file. The kernel drops a dead worker's
lock, so a file left behind reads as idle. Costs one open and one ``flock`` per other worker, per question.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


class CoreShare:
    """This worker's busy mark, and a look at the others' (a box-local set of lock files)."""

    def __init__(self, directory: Path, worker_id: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.path = directory / f"{worker_id}.lock"
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """Marks this worker busy for the duration of the block."""
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def others_busy(self) -> bool:
        """True when another worker of this box is running a job now."""
        for path in self.directory.glob("*.lock"):
            if path == self.path:
                continue
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            except OSError:
                continue
            finally:
                os.close(fd)  # closing drops a lock taken here
        return False

    def close(self) -> None:
        """Drop the mark (and the lock with it)."""
        os.close(self._fd)
