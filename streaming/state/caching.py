"""The record cache of a store: a write-back cache that collapses updates per key until a flush."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Rough per-entry overhead of a Python dict entry and its tuple, counted against the budget.
ENTRY_OVERHEAD = 120


class CacheBudget:
    """``statestore.cache.max.bytes`` shared by every cached store of one stream thread."""

    __slots__ = ("max_bytes", "used")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used = 0


# A cache entry: (serialized value or None for a delete, timestamp, headers). As Kafka Streams' record
# cache keeps each entry's record context, the entry keeps the timestamp and headers of the write, and
# its flush forwards them downstream.
Entry = tuple[bytes | None, int, Any]


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

    def put(self, key: bytes, value: bytes | None, timestamp: int, headers: Any = None) -> None:
        entries = self.entries
        old = entries.pop(key, None)  # re-inserted at the end: dict order is write order (LRU)
        budget = self._budget
        if old is None:
            budget.used += len(key) + ENTRY_OVERHEAD + (len(value) if value is not None else 0)
        else:
            budget.used += (len(value) if value is not None else 0) - (len(old[0]) if old[0] is not None else 0)
        entries[key] = (value, timestamp, headers)
        if budget.used > budget.max_bytes:
            self._evict_oldest()

    def _evict_oldest(self) -> None:
        target = self._budget.max_bytes * 0.9
        evicted = []
        freed = 0
        for key, entry in self.entries.items():
            if self._budget.used - freed <= target:
                break
            evicted.append((key, entry))
            freed += len(key) + ENTRY_OVERHEAD + (len(entry[0]) if entry[0] is not None else 0)
        if evicted:
            self._evict(evicted)  # written through first, so a concurrent reader never sees a gap
            self._remove(evicted)

    def _remove(self, written: list[tuple[bytes, Entry]]) -> None:
        """Drop entries that were written through, unless they were overwritten meanwhile."""
        for key, entry in written:
            if self.entries.get(key) is entry:
                del self.entries[key]
                self._budget.used -= len(key) + ENTRY_OVERHEAD + (len(entry[0]) if entry[0] is not None else 0)

    def flush(self, write: Callable[[list[tuple[bytes, Entry]]], None]) -> None:
        """Hand every entry, oldest write first, to ``write``; then drop them from the cache."""
        entries = list(self.entries.items())
        if entries:
            write(entries)
            self._remove(entries)

    def __len__(self) -> int:
        return len(self.entries)
