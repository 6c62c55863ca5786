"""Flow control on the worker: publish a job's next chunk only within the credit its front granted.

The front grants credit as its transport takes the job's audio (``zsynth/services/flow.py``). The worker's scheduler
waits for it without holding the slot: a stream whose next chunk is past its credit is parked, and the worker's loop
reads its credit list between other streams' chunks (:meth:`CreditGate.wait_from`, :meth:`CreditGate.take`,
:meth:`CreditGate.given_up`). :meth:`CreditGate.admit` is the same wait done in one blocking call (BLPOP, in short
slices so a cancel or a stop is seen at once). A job whose front takes nothing for ``ZSYNTH_FLOW_WAIT`` seconds, or
whose front has no subscriber on its reply channel for :data:`FRONT_GONE_S` (the front process died), is stopped.
"""

from __future__ import annotations

import threading
import time
from typing import Final

from redis import Redis as SyncRedis

from zsynth.core import protocol

# How long one BLPOP waits before the gate looks at the job's abort flag and its front again.
SLICE_S: Final = 0.5
# A reply channel with no subscriber for this long means the front is gone (a reconnection takes well under it).
FRONT_GONE_S: Final = 3.0


class CreditGate:
    """The worker's view of one job's credit: what it sent, and what its front last said it took and granted."""

    def __init__(self, redis: SyncRedis, job: protocol.Job, wait_s: float, abort: threading.Event) -> None:
        self.redis = redis
        self.job = job
        self.key = protocol.credit_key(job.job_id)
        self.wait_s = wait_s
        self.abort = abort
        self.sent = job.sent_bytes
        self.consumed = job.consumed_bytes
        self.granted = job.granted_bytes
        self.stalled = ""  # why the gate gave up on the job's front ("" while it has not)
        # A parked wait (the scheduler's): when it gives up unless a grant comes, and since when the front is gone.
        self._wait_until: float | None = None
        self._gone_since: float | None = None
        self._next_look = 0.0

    @property
    def paced(self) -> bool:
        """Whether the job's front grants credit (a front that predates flow control sends a window of 0)."""
        return self.job.window > 0

    def allows(self, size: int) -> bool:
        """Whether a chunk of ``size`` bytes may be published now."""
        return not self.paced or self.sent <= self.consumed or self.sent + size <= self.granted

    def sent_chunk(self, size: int) -> None:
        """Count a published chunk."""
        self.sent += size

    def admit(self, size: int) -> bool:
        """Wait until a chunk of ``size`` bytes may be published; False when the job must stop instead.

        It must stop when it is cancelled (the abort flag, or a cancel on the credit list), when its front grants
        nothing new for ``wait_s``, or when its front has been gone for :data:`FRONT_GONE_S`.
        """
        deadline = time.monotonic() + self.wait_s
        gone_since: float | None = None
        while not self.allows(size):
            now = time.monotonic()
            if self.abort.is_set():
                return False
            if now >= deadline:
                self.stalled = f"its front took no audio for {self.wait_s:g} s"
                return False
            reply = self.redis.blpop([self.key], timeout=min(SLICE_S, deadline - now))
            if reply is None:
                if self._front_listening():
                    gone_since = None
                elif gone_since is None:
                    gone_since = now
                elif now - gone_since >= FRONT_GONE_S:
                    self.stalled = "its front is gone (no listener on its reply channel)"
                    return False
                continue
            more = self.redis.lpop(self.key, 64) or []
            if not self._read([reply[1], *more]):
                self.abort.set()
                return False
            deadline = time.monotonic() + self.wait_s
        return True

    # ----- the parked wait, driven by the worker's loop ------------------------------------------------------------

    def wait_from(self, now: float) -> None:
        """A parked wait starts at ``now`` (monotonic), unless one is under way."""
        if self._wait_until is None:
            self._wait_until = now + self.wait_s
            self._gone_since = None
            self._next_look = now + SLICE_S

    def take(self, entries: list[bytes | str], now: float) -> bool:
        """Apply what the credit list held (the loop LPOPs it); False on a cancel. A grant restarts the wait."""
        if not entries:
            return True
        if not self._read(entries):
            return False
        if self._wait_until is not None:
            self._wait_until = now + self.wait_s
        return True

    def wants_look(self, now: float) -> bool:
        """Whether the parked wait should ask, now, whether the job's front still listens (every SLICE_S)."""
        return self._wait_until is not None and now >= self._next_look

    def looked(self, listening: bool, now: float) -> None:
        """The answer to :meth:`wants_look`: whether the job's reply channel has a subscriber."""
        self._next_look = now + SLICE_S
        if listening:
            self._gone_since = None
        elif self._gone_since is None:
            self._gone_since = now

    def given_up(self, now: float) -> bool:
        """Whether the parked wait gives up now (``stalled`` then says why): no grant for ``wait_s``, or the front
        gone for :data:`FRONT_GONE_S`."""
        if self._wait_until is None:
            return False
        if now >= self._wait_until:
            self.stalled = f"its front took no audio for {self.wait_s:g} s"
        elif self._gone_since is not None and now - self._gone_since >= FRONT_GONE_S:
            self.stalled = "its front is gone (no listener on its reply channel)"
        return bool(self.stalled)

    def wait_over(self) -> None:
        """The parked wait ended (the chunk may go)."""
        self._wait_until = None
        self._gone_since = None

    def _read(self, entries: list[bytes | str]) -> bool:
        """Apply grants (the newest counts); False on a cancel."""
        for entry in entries:
            text = entry.decode() if isinstance(entry, bytes) else entry
            if text == protocol.CREDIT_CANCEL:
                return False
            taken, _, granted = text.partition(" ")
            try:
                self.consumed = max(self.consumed, int(taken))
                self.granted = max(self.granted, int(granted))
            except ValueError:
                continue  # not a grant of this version: the next one says it all again
        return True

    def _front_listening(self) -> bool:
        listeners = self.redis.pubsub_numsub(self.job.reply_to)
        return bool(listeners and int(listeners[0][1]) > 0)
