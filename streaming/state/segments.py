"""The segmented inner store of window and session stores: one bytes store per time segment.

Kafka Streams keeps a window store in segments of ``segment_interval`` milliseconds (one RocksDB each)
so that expiring old windows costs dropping a whole segment, not deleting key by key. Every key of
such a store carries a timestamp (a window's start, a session's end); ``timestamp_of(key)`` reads it,
and the key goes to segment ``timestamp // segment_interval``.

Retention: the store tracks its own stream time (the highest timestamp written). A segment is live
while it may hold a timestamp ``> stream time - retention``; older segments are closed and their files
deleted as soon as a write moves stream time past them, and writes into an expired segment are
skipped (counted in ``expired_writes``), as Kafka Streams' ``AbstractRocksDBSegmentedBytesStore``.

The store speaks the bytes-store protocol (:mod:`streaming.state.bytes_store`), so change logging and
caching stack on it unchanged. Scans merge the live segments in key order.
"""

from __future__ import annotations

import heapq
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from operator import itemgetter
from typing import Any

from streaming.runtime.state_directory import remove_path
from streaming.state.bytes_store import BytesStore, Write

log = logging.getLogger(__name__)


def default_segment_interval(retention_ms: int) -> int:
    """Kafka Streams' default: half the retention, at least one minute."""
    return max(retention_ms // 2, 60_000)


class SegmentedBytesStore:
    """Bytes store split into time segments (see the module doc); ``make_segment(name)`` makes each
    segment's store (RocksDB or memory)."""

    def __init__(self, name: str, retention_ms: int, segment_interval_ms: int,
                 timestamp_of: Callable[[bytes], int], make_segment: Callable[[str], BytesStore],
                 persistent: bool) -> None:
        if segment_interval_ms <= 0:
            raise ValueError(f"store {name!r}: the segment interval must be positive, got {segment_interval_ms}")
        self.name = name
        self.retention_ms = retention_ms
        self.segment_interval_ms = segment_interval_ms
        self.persistent = persistent
        self.observed_time = -1  # the highest timestamp written (the store's stream time)
        self.expired_writes = 0
        self._timestamp_of = timestamp_of
        self._make_segment = make_segment
        self._segments: dict[int, BytesStore] = {}  # segment id -> store, ids ascending
        self._directory: str | None = None
        self.is_open = False

    # -- segments -------------------------------------------------------------------------------------------
    def _segment_name(self, segment_id: int) -> str:
        return f"{self.name}.{segment_id * self.segment_interval_ms}"

    def _min_live_segment(self) -> int:
        return (self.observed_time - self.retention_ms + 1) // self.segment_interval_ms

    def _open_segment(self, segment_id: int) -> BytesStore:
        segment = self._make_segment(self._segment_name(segment_id))
        directory = None if self._directory is None else os.path.join(self._directory, self._segment_name(segment_id))
        segment.open(directory)
        self._segments = dict(sorted({**self._segments, segment_id: segment}.items()))
        return segment

    def _segment_for_write(self, timestamp: int) -> BytesStore | None:
        """The live segment of ``timestamp`` (made if needed), after advancing stream time and dropping
        the segments that fell out of retention; None if ``timestamp`` is already expired."""
        if timestamp > self.observed_time:
            self.observed_time = timestamp
            self._drop_expired()
        segment_id = timestamp // self.segment_interval_ms
        if self.observed_time >= 0 and segment_id < self._min_live_segment():
            return None
        segment = self._segments.get(segment_id)
        return segment if segment is not None else self._open_segment(segment_id)

    def observe(self, timestamp: int) -> None:
        """Move stream time to ``timestamp`` if it is later, dropping the segments that fall out of retention, as a
        write at ``timestamp`` would, without writing (a window store whose newest window is still cached)."""
        if timestamp > self.observed_time:
            self.observed_time = timestamp
            self._drop_expired()

    def _drop_expired(self) -> None:
        floor = self._min_live_segment()
        if not self._segments or next(iter(self._segments)) >= floor:
            return
        expired = {segment_id: s for segment_id, s in self._segments.items() if segment_id < floor}
        self._segments = {segment_id: s for segment_id, s in self._segments.items() if segment_id >= floor}
        for segment_id, segment in expired.items():
            name = self._segment_name(segment_id)
            log.debug("store %r: dropping segment %s (retention %d ms, stream time %d)", self.name, name,
                      self.retention_ms, self.observed_time)
            segment.close()
            if self._directory is not None and self.persistent:
                remove_path(os.path.join(self._directory, name), inside=self._directory)

    # -- the bytes-store protocol -------------------------------------------------------------------------------
    def open(self, directory: str | None) -> None:
        """Open the segments found under ``directory`` (persistent stores). Stream time starts at the highest
        timestamp in the newest of them (a scan of that segment), and moves on with the restore and the writes
        that follow: reads after a restart hide the windows they hid before it (a window store's flush leaves
        windows already behind its expiry floor unwritten, so such a window may hold an earlier value)."""
        self._directory = directory
        if directory is not None and self.persistent:
            os.makedirs(directory, exist_ok=True)
            prefix = f"{self.name}."
            for entry in sorted(os.listdir(directory)):
                if entry.startswith(prefix) and entry[len(prefix):].isdigit():
                    self._open_segment(int(entry[len(prefix):]) // self.segment_interval_ms)
            if self._segments:
                newest = self._segments[next(reversed(self._segments))]
                timestamp_of = self._timestamp_of
                self.observed_time = max((timestamp_of(key) for key, _ in newest.range(None, None)),
                                         default=self.observed_time)
        self.is_open = True

    def get(self, key: bytes) -> bytes | None:
        segment = self._segments.get(self._timestamp_of(key) // self.segment_interval_ms)
        return None if segment is None else segment.get(key)

    def put(self, key: bytes, value: bytes | None, timestamp: int = 0, headers: Any = None) -> None:
        segment = self._segment_for_write(self._timestamp_of(key))
        if segment is None:
            self._expired(key)
            return
        segment.put(key, value, timestamp, headers)

    def put_all(self, writes: list[Write]) -> None:
        """Each write as :meth:`put`, the segment looked up again only when the segment or stream time changes."""
        timestamp_of, interval = self._timestamp_of, self.segment_interval_ms
        segment_id, segment = None, None  # the last write's segment (None: expired), while stream time stays
        for key, value, timestamp, headers in writes:
            time = timestamp_of(key)
            if time > self.observed_time or time // interval != segment_id:
                segment_id, segment = time // interval, self._segment_for_write(time)
            if segment is None:
                self._expired(key)
            else:
                segment.put(key, value, timestamp, headers)

    def _expired(self, key: bytes) -> None:
        self.expired_writes += 1
        log.debug("store %r: skipping a write for expired segment (timestamp %d, stream time %d, retention %d ms)",
                  self.name, self._timestamp_of(key), self.observed_time, self.retention_ms)

    def write_batch(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Restore: route changelog records to their segments (records already out of retention are skipped)."""
        batches: dict[int, list[tuple[bytes, bytes | None]]] = {}
        for key, value in entries:
            timestamp = self._timestamp_of(key)
            self.observed_time = max(self.observed_time, timestamp)
            batches.setdefault(timestamp // self.segment_interval_ms, []).append((key, value))
        self._drop_expired()
        floor = self._min_live_segment()
        for segment_id, batch in batches.items():
            if segment_id < floor:
                continue
            segment = self._segments.get(segment_id) or self._open_segment(segment_id)
            segment.write_batch(batch)

    def range(self, lo: bytes | None, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        scans = [segment.range(lo, hi) for segment in list(self._segments.values())]
        return scans[0] if len(scans) == 1 else heapq.merge(*scans, key=itemgetter(0))

    def prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        scans = [segment.prefix(prefix) for segment in list(self._segments.values())]
        return scans[0] if len(scans) == 1 else heapq.merge(*scans, key=itemgetter(0))

    def pending(self) -> dict[bytes, bytes | None]:
        pending: dict[bytes, bytes | None] = {}
        for segment in list(self._segments.values()):
            pending.update(segment.pending())
        return pending

    def approximate_num_entries(self) -> int:
        return sum(segment.approximate_num_entries() for segment in list(self._segments.values()))

    @property
    def segment_ids(self) -> list[int]:
        """Ids of the live segments, ascending (segment ``i`` holds timestamps ``[i * interval, (i+1) * interval)``)."""
        return list(self._segments)

    def flush(self) -> None:
        for segment in self._segments.values():
            segment.flush()

    def close(self) -> None:
        for segment in self._segments.values():
            segment.close()
        self._segments = {}
        self.is_open = False
