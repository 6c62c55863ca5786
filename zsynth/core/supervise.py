"""Background tasks that must not die silently: each one is restarted with backoff when it crashes.

A crash (any exception but a cancellation) is logged with its traceback, counted (``on_restart``, wired to
``zsynth_background_restarts_total`` on a front and to the heartbeat on a worker) and followed by a restart after a
backoff that doubles from ``first_backoff_s`` up to ``max_backoff_s``. A task is *down* from its crash until its
restart has run ``settle_s`` without crashing again; :meth:`Supervisor.down` names the vital ones that are down, and
a front's ``/readyz`` answers 503 while there is one. A task that returns on its own has finished (a stop) and is not
restarted. This module does not import aiohttp: the workers use it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Final

logger = logging.getLogger(__name__)

FIRST_BACKOFF_S: Final = 0.5
MAX_BACKOFF_S: Final = 30.0
SETTLE_S: Final = 1.0  # a restart that has run this long without crashing counts as up again
HEALTHY_S: Final = 60.0  # a run this long resets the backoff
CLOSE_WAIT_S: Final = 10.0  # how long a close waits for its cancelled tasks before it logs them and goes on
RECANCEL_EVERY_S: Final = 0.5  # a cancelled task still running this long is cancelled again (see cancel_and_wait)


def task_stack(task: asyncio.Task[Any]) -> str:
    """Where ``task`` is waiting now, as ``Task.print_stack`` writes it."""
    out = io.StringIO()
    task.print_stack(file=out)
    return out.getvalue()


async def cancel_and_wait(
    tasks: list[asyncio.Task[Any]], what: str, timeout: float = CLOSE_WAIT_S
) -> set[asyncio.Task[Any]]:
    """Cancel ``tasks`` and wait for them to end, at most ``timeout`` seconds; return those still running.

    A task still running after :data:`RECANCEL_EVERY_S` is cancelled again, and so on: redis-py (8.1) loses a
    cancel that lands while a command takes its connection from the pool, and the task then runs on (a follower
    into a blocked ``XREAD`` for its whole block, a heartbeat back into its sleep); the next cancel lands where it
    waits. A task still running at ``timeout`` (one that swallows every cancellation, or awaits something that
    ignores it) is logged with its stack and left behind: a stop must not hang on it (systemd would kill the process
    at its stop timeout, mid-cleanup), and the log names the culprit.
    """
    if not tasks:
        return set()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    for task in tasks:
        task.cancel()
    pending = set(tasks)
    while pending and (left := deadline - loop.time()) > 0:
        _, pending = await asyncio.wait(pending, timeout=min(RECANCEL_EVERY_S, left))
        if loop.time() < deadline:
            for task in pending:
                task.cancel()
    for task in tasks:  # retrieved, as gather(return_exceptions=True) would: a crash at close is not news
        if task.done() and not task.cancelled():
            task.exception()
    for task in pending:
        logger.error(
            "%s: task %s did not end %g s after its cancel; left behind:\n%s",
            what,
            task.get_name(),
            timeout,
            task_stack(task),
        )
    return pending


@dataclass(slots=True)
class Supervised:
    """One supervised task's state."""

    name: str
    vital: bool
    restarts: int = 0
    up: bool = True
    last_error: str = ""
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    run: asyncio.Task[None] | None = field(default=None, repr=False)  # the current run inside ``task``


class Supervisor:
    """Starts named background tasks and keeps them running (see the module docstring)."""

    def __init__(
        self,
        on_restart: Callable[[str], None] | None = None,
        *,
        first_backoff_s: float = FIRST_BACKOFF_S,
        max_backoff_s: float = MAX_BACKOFF_S,
        settle_s: float = SETTLE_S,
    ) -> None:
        self.on_restart = on_restart
        self.first_backoff_s = first_backoff_s
        self.max_backoff_s = max_backoff_s
        self.settle_s = settle_s
        self.tasks: dict[str, Supervised] = {}

    def spawn(self, name: str, run: Callable[[], Coroutine[Any, Any, None]], *, vital: bool = True) -> Supervised:
        """Start ``run()`` as the task ``name``; a new coroutine is made from ``run`` for every restart."""
        entry = Supervised(name, vital)
        entry.task = asyncio.create_task(self._keep(entry, run), name=name)
        self.tasks[name] = entry
        return entry

    def down(self) -> list[str]:
        """Names of the vital tasks that crashed and have not settled again."""
        return sorted(e.name for e in self.tasks.values() if e.vital and not e.up)

    @property
    def restarts(self) -> int:
        """Restarts of every task so far."""
        return sum(e.restarts for e in self.tasks.values())

    async def close(self, timeout: float = CLOSE_WAIT_S) -> None:
        """Cancel every task and wait for them (at most ``timeout`` seconds; see :func:`cancel_and_wait`)."""
        stuck = await cancel_and_wait(
            [e.task for e in self.tasks.values() if e.task is not None], "supervisor close", timeout
        )
        for entry in self.tasks.values():
            if entry.task in stuck and entry.run is not None and not entry.run.done():
                logger.error("supervisor close: %s is waiting in:\n%s", entry.name, task_stack(entry.run))

    async def _keep(self, entry: Supervised, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        backoff = self.first_backoff_s
        while True:
            started = time.monotonic()
            inner = entry.run = asyncio.create_task(run(), name=f"{entry.name}-run")
            try:
                if not entry.up:
                    done, _ = await asyncio.wait({inner}, timeout=self.settle_s)
                    if not done:
                        entry.up = True
                        logger.info("background task %s is running again", entry.name)
                await inner
                return  # it ended by itself: a stop, not a crash
            except asyncio.CancelledError:
                inner.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await inner
                raise
            except Exception as err:
                entry.up = False
                entry.restarts += 1
                entry.last_error = f"{type(err).__name__}: {err}"[:300]
                if time.monotonic() - started > HEALTHY_S:
                    backoff = self.first_backoff_s
                logger.error(
                    "background task %s crashed (%s); restart %d in %.1f s",
                    entry.name,
                    entry.last_error,
                    entry.restarts,
                    backoff,
                    exc_info=err,
                )
                if self.on_restart is not None:
                    with contextlib.suppress(Exception):  # counting is best effort
                        self.on_restart(entry.name)
            await asyncio.sleep(backoff)
            backoff = min(self.max_backoff_s, backoff * 2)
