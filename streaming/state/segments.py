"""The segmented inner store of window and session stores: its keys split into time segments.

Kafka Streams keeps a window store in segments of ``segment_interval`` milliseconds so that expiring old windows
costs dropping a whole segment, not deleting key by key. Every key of such a store carries a timestamp (a window's
start, a session's end); ``timestamp_of(key)`` reads it, and the key goes to segment ``timestamp // segment_interval``.

Where the segments live:

- **Persistent stores**: one RocksDB database per store per task, each segment a key prefix in it (8 bytes, the
  segment id), as Kafka Streams' ``LogicalKeyValueSegments`` (its versioned stores' segments, KIP-889). A new
  segment costs nothing; a dropped one is one range delete (``LogicalKeyValueSegment.destroy``: ``deleteRange`` over
  the prefix), its space reclaimed by RocksDB's compactions. A database per segment (``KeyValueSegments``, what
  Brook did before) opened a database at every segment's first write, 7-20 ms on a disk, and closed and deleted one
  at every drop: a tumbling window's close paid both, in every task. State written in that layout (directories
  ``<store>.<segment start>``) is moved into the store's database when the store opens.
- **In-memory stores**: one in-memory store per segment, dropped by closing it (Kafka Streams'
  ``InMemoryWindowStore`` keeps a map per segment the same way).

Retention: the store tracks its own stream time (the highest timestamp written). A segment is live while it may hold
a timestamp ``> stream time - retention``; older segments are dropped as soon as a write moves stream time past
them, and writes into an expired segment are skipped (counted in ``expired_writes``), as Kafka Streams'
``AbstractRocksDBSegmentedBytesStore``.

The store speaks the bytes-store protocol (:mod:`streaming.state.bytes_store`), so change logging and caching stack
on it unchanged. Scans merge the live segments in key order.
"""

from __future__ import annotations

import heapq
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from operator import itemgetter
from typing import Any

from streaming.runtime.state_directory import remove_path
from streaming.state.bytes_store import Write
from streaming.state.memory import InMemoryBytesStore
from streaming.state.rocksdb import RocksDBBytesStore

log = logging.getLogger(__name__)

PREFIX_BYTES = 8
_ID_OFFSET = 1 << 63  # ids are stored offset by 2**63, so that a negative id sorts before the others


def default_segment_interval(retention_ms: int) -> int:
    """Kafka Streams' default: half the retention, at least one minute."""
    return max(retention_ms // 2, 60_000)


def segment_prefix(segment_id: int) -> bytes:
    """The key prefix of a logical segment in its store's database."""
    return (segment_id + _ID_OFFSET).to_bytes(PREFIX_BYTES, "big")


def segment_id_of(stored_key: bytes) -> int:
    """The segment of a key as stored in the database (prefix included)."""
    return int.from_bytes(stored_key[:PREFIX_BYTES], "big") - _ID_OFFSET


class LogicalSegment:
    """One time segment of a persistent segmented store: the keys of the store's database behind the segment's
    prefix (Kafka Streams' ``LogicalKeyValueSegment``). Keys in and out are the segment's own, unprefixed."""

    def __init__(self, db: RocksDBBytesStore, segment_id: int) -> None:
        self._db = db
        self._prefix = segment_prefix(segment_id)
        self._next_prefix = segment_prefix(segment_id + 1)

    def get(self, key: bytes) -> bytes | None:
        return self._db.get(self._prefix + key)

    def put(self, key: bytes, value: bytes | None, timestamp: int = 0, headers: Any = None) -> None:
        self._db.put(self._prefix + key, value)

    def write_batch(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        prefix = self._prefix
        self._db.write_batch([(prefix + key, value) for key, value in entries])

    def range(self, lo: bytes | None, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        # hi None: up to the next segment's bare prefix, which no stored key equals (every key is longer than it)
        return self._stripped(self._db.range(self._prefix if lo is None else self._prefix + lo,
                                             self._next_prefix if hi is None else self._prefix + hi))

    def prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        return self._stripped(self._db.prefix(self._prefix + prefix))

    @staticmethod
    def _stripped(entries: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        for key, value in entries:
            yield key[PREFIX_BYTES:], value

    def drop(self) -> None:
        """Delete every key of the segment, buffered or in RocksDB (one range delete)."""
        self._db.delete_range(self._prefix, self._next_prefix)


Segment = LogicalSegment | InMemoryBytesStore


class SegmentedBytesStore:
    """Bytes store split into time segments (see the module doc): logical segments of one RocksDB database if
    ``persistent``, else one in-memory store per segment."""

    def __init__(self, name: str, retention_ms: int, segment_interval_ms: int,
                 timestamp_of: Callable[[bytes], int], persistent: bool) -> None:
        if segment_interval_ms <= 0:
            raise ValueError(f"store {name!r}: the segment interval must be positive, got {segment_interval_ms}")
        self.name = name
        self.retention_ms = retention_ms
        self.segment_interval_ms = segment_interval_ms
        self.persistent = persistent
        self.observed_time = -1  # the highest timestamp written (the store's stream time)
        self.expired_writes = 0
        self._timestamp_of = timestamp_of
        self._db = RocksDBBytesStore(name) if persistent else None  # the logical segments' database
        self._segments: dict[int, Segment] = {}  # segment id -> segment, ids ascending
        self.is_open = False

    # -- segments -------------------------------------------------------------------------------------------
    def _segment_name(self, segment_id: int) -> str:
        return f"{self.name}.{segment_id * self.segment_interval_ms}"

    def _min_live_segment(self) -> int:
        return (self.observed_time - self.retention_ms + 1) // self.segment_interval_ms

    def _open_segment(self, segment_id: int) -> Segment:
        segment: Segment = (InMemoryBytesStore(self._segment_name(segment_id)) if self._db is None
                            else LogicalSegment(self._db, segment_id))
        self._segments = dict(sorted({**self._segments, segment_id: segment}.items()))
        return segment

    def _segment_for_write(self, timestamp: int) -> Segment | None:
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
            log.debug("store %r: dropping segment %s (retention %d ms, stream time %d)", self.name,
                      self._segment_name(segment_id), self.retention_ms, self.observed_time)
            if isinstance(segment, LogicalSegment):
                segment.drop()
            else:
                segment.close()
        if self._db is not None:
            self._db.start_memtable_flush()

    # -- the bytes-store protocol -------------------------------------------------------------------------------
    def open(self, directory: str | None) -> None:
        """Open the store's database under ``directory`` (persistent stores) and find its segments. Stream time
        starts at the highest timestamp in the newest segment (a scan of that segment), and moves on with the
        restore and the writes that follow: reads after a restart hide the windows they hid before it (a window
        store's flush leaves windows already behind its expiry floor unwritten, so such a window may hold an
        earlier value)."""
        if self._db is not None:
            if directory is None:
                raise ValueError(f"persistent store {self.name!r} needs a state directory")
            self._db.open(directory)
            self._adopt_database_per_segment_layout(directory)
            for segment_id in self._stored_segment_ids():
                self._open_segment(segment_id)
            if self._segments:
                newest = self._segments[next(reversed(self._segments))]
                timestamp_of = self._timestamp_of
                self.observed_time = max((timestamp_of(key) for key, _ in newest.range(None, None)),
                                         default=self.observed_time)
        self.is_open = True

    def _stored_segment_ids(self) -> list[int]:
        """The ids of the segments holding keys in the database, ascending: one seek per segment."""
        assert self._db is not None
        found: list[int] = []
        start = None
        while (first := next(iter(self._db.range(start, None)), None)) is not None:
            found.append(segment_id_of(first[0]))
            start = segment_prefix(found[-1] + 1)
        return found

    def _adopt_database_per_segment_layout(self, directory: str) -> None:
        """Move state kept a database per segment (directories ``<store>.<segment start>``, Brook before logical
        segments) into the store's database, then delete those directories: the local state a checkpoint vouches
        for stays whole across the upgrade."""
        assert self._db is not None
        name_prefix, timestamp_of, interval = f"{self.name}.", self._timestamp_of, self.segment_interval_ms
        moved_from = []
        for entry in sorted(os.listdir(directory)):
            path = os.path.join(directory, entry)
            if not (entry.startswith(name_prefix) and entry[len(name_prefix):].isdigit() and os.path.isdir(path)):
                continue
            old = RocksDBBytesStore(entry)
            old.open(path)
            moved = [(segment_prefix(timestamp_of(key) // interval) + key, value) for key, value in old.range(None, None)]
            old.close()
            self._db.write_batch(moved)
            moved_from.append(path)
            log.info("store %r: moving the %d entries of segment directory %s into the store's database", self.name,
                     len(moved), entry)
        if moved_from:
            self._db.persist()  # on disk before the directories go (the write-ahead log is off)
            for path in moved_from:
                remove_path(path, inside=directory)

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
        """The database's buffered writes, unprefixed (a window's or session's key names its segment); nothing for
        in-memory segments, which write at once."""
        if self._db is None:
            return {}
        return {key[PREFIX_BYTES:]: value for key, value in self._db.pending().items()}

    def approximate_num_entries(self) -> int:
        if self._db is not None:
            return self._db.approximate_num_entries()
        return sum(segment.approximate_num_entries() for segment in list(self._segments.values())
                   if isinstance(segment, InMemoryBytesStore))

    @property
    def segment_ids(self) -> list[int]:
        """Ids of the live segments, ascending (segment ``i`` holds timestamps ``[i * interval, (i+1) * interval)``)."""
        return list(self._segments)

    def flush(self) -> None:
        if self._db is not None:
            self._db.flush()

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
        for segment in self._segments.values():
            if isinstance(segment, InMemoryBytesStore):
                segment.close()
        self._segments = {}
        self.is_open = False
