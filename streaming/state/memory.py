"""In-memory bytes store: a dict plus a lazily sorted key list for ordered iteration."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from typing import Any

from streaming.state.bytes_store import Write


class InMemoryBytesStore:
    """Bytes-to-bytes store kept in a dict; ordered scans sort the keys once per change set.

    Reads may come from another thread (interactive queries) while the stream thread writes: the
    sorted key list is cached together with the key-set version it was made at, so a list sorted by
    a reader can never be mistaken for the current one after a concurrent insert or delete.
    """

    persistent = False

    def __init__(self, name: str) -> None:
        self.name = name
        self._data: dict[bytes, bytes] = {}
        self._version = 0  # bumped AFTER every change of the key set (only the owning thread writes)
        self._sorted: tuple[int, list[bytes]] | None = None  # (version, sorted keys)
        self.is_open = True

    def open(self, directory: str | None) -> None:
        self.is_open = True

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def put(self, key: bytes, value: bytes | None, timestamp: int = 0, headers: Any = None) -> None:
        """Store ``value`` (None deletes the key); the timestamp and headers are the layers' business."""
        data = self._data
        if value is None:
            if data.pop(key, None) is not None:
                self._version += 1
            return
        added = key not in data
        data[key] = value
        if added:
            self._version += 1

    def put_all(self, writes: list[Write]) -> None:
        put = self.put
        for key, value, _, _ in writes:
            put(key, value)

    def write_batch(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Apply puts (and deletes, for ``None`` values)."""
        put = self.put
        for key, value in entries:
            put(key, value)

    def pending(self) -> dict[bytes, bytes | None]:
        """Nothing is pending: every write is in the dict at once."""
        return {}

    def _keys(self) -> list[bytes]:
        version = self._version  # read before sorting: a list is never labelled newer than its keys
        cached = self._sorted
        if cached is not None and cached[0] == version:
            return cached[1]
        keys = sorted(self._data)
        self._sorted = (version, keys)
        return keys

    def range(self, lo: bytes | None, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        keys = self._keys()
        start = 0 if lo is None else bisect.bisect_left(keys, lo)
        stop = len(keys) if hi is None else bisect.bisect_right(keys, hi)
        return self._iterate(keys[start:stop])

    def prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        keys = self._keys()
        start = bisect.bisect_left(keys, prefix)
        stop = start
        while stop < len(keys) and keys[stop].startswith(prefix):
            stop += 1
        return self._iterate(keys[start:stop])

    def _iterate(self, keys: list[bytes]) -> Iterator[tuple[bytes, bytes]]:
        data = self._data
        for key in keys:
            value = data.get(key)
            if value is not None:
                yield key, value

    def approximate_num_entries(self) -> int:
        return len(self._data)

    def flush(self) -> None:
        """Nothing to flush: memory is the store."""

    def close(self) -> None:
        self.is_open = False
