"""The record cache of a store: a write-back cache that collapses updates per key until a flush."""

from __future__ import annotations

from collections.abc import Callable

# Rough per-entry overhead of a Python dict entry and its tuple, counted against the budget.
ENTRY_OVERHEAD = 120


class CacheBudget:
    """``statestore.cache.max.bytes`` shared by every cached store of one stream thread."""

    __slots__ = ("max_bytes", "used")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used = 0


# A cache entry: (serialized value or None for a delete, record timestamp).
Entry = tuple[bytes | None, int]


class StoreCache:
    """Dirty entries of one store in write order. ``evict`` is called with the oldest entries when the
    shared budget is exceeded; ``flush`` hands over every dirty entry (the store writes them to the
    inner store and the changelog, and forwards them downstream)."""

    def __init__(self, budget: CacheBudget, evict: Callable[[list[tuple[bytes, Entry]]], None]) -> None:
        self.entries: dict[bytes, Entry] = {}
        self._budget = budget
        self._evict = evict

    def get(self, key: bytes) -> Entry | None:
        return self.entries.get(key)

    def put(self, key: bytes, value: bytes | None, timestamp: int) -> None:
        entries = self.entries
        old = entries.pop(key, None)  # re-inserted at the end: dict order is write order (LRU)
        budget = self._budget
        if old is None:
            budget.used += len(key) + ENTRY_OVERHEAD + (len(value) if value is not None else 0)
        else:
            budget.used += (len(value) if value is not None else 0) - (len(old[0]) if old[0] is not None else 0)
        entries[key] = (value, timestamp)
        if budget.used > budget.max_bytes:
            self._evict_oldest()

    def _evict_oldest(self) -> None:
        target = self._budget.max_bytes * 0.9
        evicted = []
        for key in list(self.entries):
            if self._budget.used <= target:
                break
            evicted.append((key, self._remove(key)))
        if evicted:
            self._evict(evicted)

    def _remove(self, key: bytes) -> Entry:
        entry = self.entries.pop(key)
        self._budget.used -= len(key) + ENTRY_OVERHEAD + (len(entry[0]) if entry[0] is not None else 0)
        return entry

    def drain(self) -> list[tuple[bytes, Entry]]:
        """Remove and return every entry, oldest write first."""
        drained = list(self.entries.items())
        for key, _ in drained:
            self._remove(key)
        return drained

    def __len__(self) -> int:
        return len(self.entries)
