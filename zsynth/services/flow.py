"""Flow control on the front: how much audio each job's worker may publish ahead of what its transport has taken.

A worker publishes a job's chunks only within the job's credit (``workers/flow.py``): the first ``window`` bytes of
encoded audio, then whatever its front grants. The front grants as its transport takes chunks from the job's
buffer (:class:`Credit.taken`), never more than ``window`` ahead of what was taken, and all its jobs together never
more than the front's budget (:class:`Ledger`). So the audio a front holds, in its jobs' buffers and in Redis's
pub/sub output buffer for its reply connection, is bounded by design:

* per job: its window (at most ``ZSYNTH_FLOW_WINDOW`` bytes and ``ZSYNTH_FLOW_WINDOW_SECONDS`` of audio), plus one
  chunk (a worker whose every byte was taken may always publish its next chunk, however large, so a window smaller
  than a chunk still moves);
* per front: ``ZSYNTH_FRONT_AUDIO_BUDGET``, plus one chunk per job its workers are speaking.

Grants are absolute byte counts (``"<taken> <granted>"`` on :func:`zsynth.core.protocol.credit_key`), so a grant
that is lost or read twice costs nothing: the next one says it all again.
"""

from __future__ import annotations

from dataclasses import dataclass


def window_bytes(bytes_per_second: int, window_cap: int, window_seconds: float) -> int:
    """A job's window: ``window_seconds`` of audio at ``bytes_per_second``, at most ``window_cap`` bytes (0: off)."""
    if window_cap <= 0:
        return 0
    return max(1, min(window_cap, int(bytes_per_second * window_seconds)))


@dataclass(slots=True)
class Credit:
    """One job's flow-control account on its front (all counts in bytes of encoded audio)."""

    window: int
    granted: int  # the worker may have published up to this many bytes
    taken: int = 0  # bytes the transport has taken from the job's buffer
    told_taken: int = 0  # ``taken`` as of the last grant sent to the worker

    @property
    def outstanding(self) -> int:
        """Bytes granted and not yet taken: what this job may hold in flight."""
        return max(0, self.granted - self.taken)


class Ledger:
    """A front's audio budget, shared by the outstanding credit of all its jobs."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.outstanding = 0  # the sum of every open job's Credit.outstanding

    def open(self, window: int) -> Credit:
        """A new job's credit: its window, or what is left of the budget (0: one chunk at a time until taken)."""
        first = max(0, min(window, self.budget - self.outstanding))
        self.outstanding += first
        return Credit(window, first)

    def close(self, credit: Credit) -> None:
        """A job ended: its outstanding credit goes back to the budget."""
        self.outstanding -= credit.outstanding
        credit.granted = credit.taken

    def take(self, credit: Credit, size: int, *, drained: bool) -> tuple[int, int] | None:
        """The transport took ``size`` bytes of the job's audio: the grant to send its worker, or None.

        ``drained``: the job's buffer is empty now, so its worker may be waiting for word that everything it sent
        was taken. Otherwise a grant goes out only once half a window has been taken since the last one.
        """
        before = credit.outstanding
        credit.taken += size
        self.outstanding += credit.outstanding - before
        self._top_up(credit)
        moved = credit.taken - credit.told_taken
        if moved <= 0 or (not drained and moved < credit.window // 2):
            return None
        credit.told_taken = credit.taken
        return credit.taken, credit.granted

    def again(self, credit: Credit) -> tuple[int, int]:
        """The job's grant, said again (topped up if the budget has room now): for a worker that may have missed one
        (a grant lost with a Redis failover) while the transport waits for its next chunk."""
        self._top_up(credit)
        credit.told_taken = credit.taken
        return credit.taken, credit.granted

    def _top_up(self, credit: Credit) -> None:
        """Grant the job up to its window past what was taken, as far as the budget allows."""
        room = max(0, self.budget - self.outstanding)
        granted = min(credit.taken + credit.window, max(credit.taken, credit.granted) + room)
        if granted > credit.granted:
            before = credit.outstanding
            credit.granted = granted
            self.outstanding += credit.outstanding - before
