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

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Final

from redis import Redis as SyncRedis
from redis.exceptions import RedisError
from redis.typing import EncodableT

from zsynth.core import protocol
from zsynth.core.config import Settings
from zsynth.core.engines import profile
from zsynth.core.protocol import ErrorCode

logger = logging.getLogger(__name__)

POLL_S: Final = 0.05  # how often a running job's RSS is read: a bounded call grows it by a few hundred MB at most
GRACE_S: Final = 10.0  # how long a job over the ceiling has to stop before the worker restarts
HARD_FACTOR: Final = 1.5  # RSS past this multiple of the ceiling: restart at once, without waiting for the grace
MEMORY_EXIT_CODE: Final = 75  # EX_TEMPFAIL: the worker restarted itself to shed a job's memory
TOO_COMPLEX_MESSAGE: Final = (
    "The text needs more memory than a worker may use for one job (for example a very long run of characters "
    "without white space): shorten it or split it into words and sentences."
)
_PAGE: Final = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int | None:
    """This process's resident set size now, from ``/proc/self/statm``; None where there is no /proc."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return None


def ceiling_for(engine: str, configured: int) -> int:
    """The RSS ceiling in bytes: the configured one, else the engine's profile's."""
    return configured or profile(engine).memory_ceiling


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


class JobGuard:
    """The ceiling applied to the stream whose chunk the engine is computing: marks and stops it when it crosses, and
    when it will not stop, records its end, frees its slot and exits the process (``on_fatal``).

    ``begin``/``finish`` bracket each step of a stream (one chunk: memory grows while the engine computes); the lock
    makes a stream's terminal recorded once, by the worker's loop or by the guard's restart, never both. The other
    streams a restarting worker held stay in its in-flight list and are ended by its next life (worker_restarted).
    Redis is reached through the engine thread's blocking client (thread-safe), as the event loop may be waiting on
    the engine.
    """

    def __init__(self, settings: Settings, redis: SyncRedis, processing: str) -> None:
        self.settings = settings
        self.redis = redis
        self.processing = processing
        self.watch = MemoryWatch(ceiling_for(settings.engine, settings.worker.max_rss), self._over, self._stuck)
        self.on_fatal: Callable[[int], object] = os._exit  # the only way to stop an engine thread that ignores us
        self._lock = threading.Lock()
        self._running: tuple[protocol.Job, bytes, Callable[[], int], threading.Event] | None = None
        self._taken = False

    @property
    def over(self) -> bool:
        """True when the current (or last) job crossed the ceiling."""
        return self.watch.over

    def start(self) -> None:
        """Start watching (idle between jobs)."""
        self.watch.start()

    def close(self) -> None:
        """Stop watching."""
        self.watch.close()

    def begin(self, job: protocol.Job, raw: bytes, seq: Callable[[], int], abort: threading.Event) -> None:
        """A stream's step starts: ``raw`` is its JSON as claimed, ``seq()`` the sequence number its terminal would
        carry, ``abort`` the flag its engine reads between calls."""
        with self._lock:
            self._running = (job, raw, seq, abort)
            self._taken = False
        self.watch.arm()

    def finish(self) -> bool:
        """The job's engine work ended: False when the guard already recorded its end (the process is exiting)."""
        self.watch.disarm()
        with self._lock:
            if self._taken:
                return False
            self._taken = True
            self._running = None
            return True

    def _over(self, rss: int) -> None:
        """The running job passed the ceiling: mark it (never run again), then ask the engine to stop."""
        running = self._running
        if running is None:
            return
        job, abort = running[0], running[3]
        logger.error(
            "[job %s worker %s] RSS %d MB passed the ceiling of %d MB: stopping the job",
            job.job_id,
            self.settings.worker.id,
            rss // 10**6,
            self.watch.ceiling // 10**6,
        )
        # Marked first, before anything that could fail: should this process die now, no reaper runs the job again.
        with contextlib.suppress(RedisError, OSError), self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(protocol.job_key(job.job_id), protocol.MEMORY_FIELD, str(rss))
            pipe.expire(protocol.job_key(job.job_id), self.settings.jobs.ttl_s)
            pipe.execute()
        abort.set()

    def _stuck(self, rss: int) -> None:
        """The job did not stop in time (or grew past the hard limit): publish its end, free its slot, exit."""
        with self._lock:
            if self._taken or self._running is None:
                return  # it ended meanwhile; the worker sheds the memory
            self._taken = True
            job, raw, seq, _ = self._running
        worker_id = self.settings.worker.id
        ids = (job.job_id, worker_id)
        logger.critical("[job %s worker %s] RSS %d MB and the job has not stopped: restarting", *ids, rss // 10**6)
        terminal = protocol.error_event(seq(), ErrorCode.INPUT_TOO_COMPLEX, TOO_COMPLEX_MESSAGE)
        terminal.job_id = job.job_id
        terminal.meta.update(worker_id=worker_id, finished_at=time.time())
        state: dict[EncodableT, EncodableT] = {"state": "error", **{k: str(v) for k, v in terminal.meta.items()}}
        try:
            with self.redis.pipeline(transaction=True) as pipe:
                pipe.publish(job.reply_to, terminal.encode())
                pipe.hset(protocol.job_key(job.job_id), mapping=state)
                pipe.expire(protocol.job_key(job.job_id), self.settings.jobs.ttl_s)
                pipe.lrem(self.processing, 1, raw)  # type: ignore[arg-type]  # redis-py types the value str
                pipe.delete(protocol.heartbeat_key(worker_id))
                pipe.execute()
        except (RedisError, OSError) as err:  # the restart fails what is left in the in-flight list
            logger.error("[job %s worker %s] could not record the job's end before restarting: %s", *ids, err)
        for handler in logging.getLogger().handlers:
            with contextlib.suppress(Exception):
                handler.flush()
        self.on_fatal(MEMORY_EXIT_CODE)
