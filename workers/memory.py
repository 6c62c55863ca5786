"""A worker's memory ceiling: its own RSS, watched on a thread while a job runs.

The engines bound each call (Piper's phonemes, Turbo's text and speech tokens), so a job cannot grow a worker
without limit in one step; this is the second line, for whatever still grows (``ZSYNTH_WORKER_MAX_RSS``):

* **soft**: the RSS crosses the ceiling. The watch marks the job (so no reaper ever runs it again) and asks the
  engine to stop at its next check, which comes after one bounded call; the job ends with ``input_too_complex``.
* **stuck**: the engine has not returned :data:`GRACE_S` after that, or the RSS reaches :data:`HARD_FACTOR` times
  the ceiling first. The worker publishes the terminal error, frees its slot and exits with
  :data:`MEMORY_EXIT_CODE` (systemd's ``Restart=on-failure`` starts it again; ``MemoryMax=`` in the unit stays the
  last line).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Final

logger = logging.getLogger(__name__)

GIB: Final = 1024**3
# The ceiling when ZSYNTH_WORKER_MAX_RSS is 0. Piper: about 0.3 GB idle and at most a few hundred MB more while it
# speaks (its calls are bounded). Turbo: torch, the CUDA runtime and a host copy of the weights, several GB, which
# its calls do not grow (the model's memory is on the GPU).
ENGINE_CEILINGS: Final = {"piper": 2 * GIB, "turbo": 12 * GIB, "simulated": 1 * GIB}
POLL_S: Final = 0.05  # how often a running job's RSS is read: a bounded call grows it by a few hundred MB at most
GRACE_S: Final = 10.0  # how long a job over the ceiling has to stop before the worker restarts
HARD_FACTOR: Final = 1.5  # RSS past this multiple of the ceiling: restart at once, without waiting for the grace
MEMORY_EXIT_CODE: Final = 75  # EX_TEMPFAIL: the worker restarted itself to shed a job's memory
_PAGE: Final = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int | None:
    """This process's resident set size now, from ``/proc/self/statm``; None where there is no /proc."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return None


def ceiling_for(engine: str, configured: int) -> int:
    """The RSS ceiling in bytes: the configured one, else the engine's default."""
    return configured or ENGINE_CEILINGS.get(engine, 2 * GIB)


class MemoryWatch:
    """Polls the RSS while a job is armed; calls ``on_over(rss)`` once when it crosses the ceiling, then
    ``on_stuck(rss)`` once when the job has not ended after the grace (or the RSS passes the hard limit).

    Both callbacks run on the watch's thread, while the engine thread may still be running.
    """

    def __init__(
        self,
        ceiling: int,
        on_over: Callable[[int], None],
        on_stuck: Callable[[int], None],
        *,
        poll_s: float = POLL_S,
        grace_s: float = GRACE_S,
    ) -> None:
        self.ceiling = ceiling
        self.hard_limit = int(ceiling * HARD_FACTOR)
        self._on_over = on_over
        self._on_stuck = on_stuck
        self._poll_s = poll_s
        self._grace_s = grace_s
        self._armed = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._generation = 0  # bumped per job: a late reading never acts on the next job
        self._over_since: float | None = None
        self._stuck = False
        self._thread: threading.Thread | None = None
        #: Largest RSS seen during the current (or last) job.
        self.peak = 0

    def start(self) -> None:
        """Start the watching thread (idle until a job is armed)."""
        if rss_bytes() is None:
            logger.warning("memory ceiling off: this system has no /proc/self/statm")
            return
        self._thread = threading.Thread(target=self._run, name="memory-watch", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the thread."""
        self._closed.set()
        self._armed.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def arm(self) -> None:
        """A job starts: watch it."""
        with self._lock:
            self._generation += 1
            self._over_since = None
            self._stuck = False
            self.peak = rss_bytes() or 0
            self._armed.set()

    def disarm(self) -> None:
        """The job ended (its terminal is being recorded): stop watching it."""
        with self._lock:
            self._generation += 1
            self._armed.clear()

    @property
    def over(self) -> bool:
        """True when the current job crossed the ceiling."""
        return self._over_since is not None

    def _run(self) -> None:
        while not self._closed.is_set():
            if not self._armed.wait(timeout=1.0):
                continue
            if self._closed.wait(self._poll_s):
                return
            self.check(rss_bytes() or 0)

    def check(self, rss: int) -> None:
        """Act on one reading (the thread's loop; tests call it with chosen values)."""
        with self._lock:
            if not self._armed.is_set() or self._stuck:
                return
            generation = self._generation
            self.peak = max(self.peak, rss)
            first = self._over_since is None and rss > self.ceiling
            if first:
                self._over_since = time.monotonic()
            stuck = self._over_since is not None and (
                rss > self.hard_limit or time.monotonic() - self._over_since > self._grace_s
            )
            self._stuck = stuck
        if first:
            self._on_over(rss)
        if stuck and generation == self._generation:
            self._on_stuck(rss)
