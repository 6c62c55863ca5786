"""A least-recently-used cache bounded by the bytes its entries hold, not by their number."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ByteBudgetCache(Generic[K, V]):
    """Entries with a size each; past ``budget`` bytes in all, the least recently used ones leave first."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.nbytes = 0
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, key: K) -> V | None:
        """The value under ``key`` (now the most recently used), or None."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: K, value: V, size: int) -> None:
        """Keep ``value`` under ``key``; one larger than the whole budget is not kept at all."""
        self.pop(key)
        if size > self.budget:
            return
        self._entries[key] = (value, size)
        self.nbytes += size
        while self.nbytes > self.budget:
            _, (_, dropped) = self._entries.popitem(last=False)
            self.nbytes -= dropped

    def pop(self, key: K) -> None:
        """Forget ``key`` (nothing happens when it is not there)."""
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.nbytes -= entry[1]

    def drop(self, matches: Callable[[K], bool]) -> None:
        """Forget every entry whose key ``matches``."""
        for key in [key for key in self._entries if matches(key)]:
            self.pop(key)
