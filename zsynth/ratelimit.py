"""A token bucket: the per-socket message limit and the avatar's per-session speak limit."""

from __future__ import annotations

import time


class TokenBucket:
    """``rate`` takes a second on average, bursts of up to ``burst``; starts full."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self._tokens = burst
        self._stamp = time.monotonic()

    def take(self) -> bool:
        """Spend one token if one is there (refilled since the last call); False when the bucket is empty."""
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True
