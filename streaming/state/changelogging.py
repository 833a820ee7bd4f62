"""Change logging: the layer that writes a store's changes to its changelog topic.

The changelog is the store's durable log: a restore replays it, standby replicas tail it, the
platform compacts it into snapshots. A single write (``put``: a store without a record cache) is logged
write-behind: the layer keeps the latest write of each key and logs them when the store is flushed
(every commit, before the producer is flushed and the input offsets committed) or when ``max_dirty``
keys wait. A changelog record per key per commit restores the same state as one per update, and a
commit never covers a change that is not logged.

A batch (``put_all``, ``log_only``: a record cache's write-through, which holds one write per key
already) is logged as it arrives, as Kafka Streams' changelogging stores log each write that reaches
them: keeping it back would collapse nothing, and would only move its sends to the commit (a window
store's closed windows, written through as they close, would all be sent by the next commit, the last
one of a close included).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from streaming.state.bytes_store import BytesStore, Write


class ChangeLogger:
    """Sends ``(key, value)`` to partition ``partition`` of the changelog (the task's partition).

    The record's timestamp is the write's: the timestamp of the record that made it (for timestamped
    stores, the value's timestamp, which a restore reads back). The record collector batches the sends;
    the commit flushes the producer before committing input offsets.
    """

    __slots__ = ("topic", "partition", "_send")

    def __init__(self, collector: Any, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self._send = collector.send

    def log(self, key: bytes, value: bytes | None, timestamp: int) -> None:
        self._send(self.topic, key, value, timestamp if timestamp >= 0 else 0, None, self.partition)


class ChangeLoggingBytesStore:
    """Logs the writes to ``wrapped`` to the changelog (see the module doc for when).

    ``timestamped``: the values carry an 8-byte timestamp prefix (a timestamped store); the changelog
    gets the plain value, the timestamp being the record's, as Kafka Streams writes it.
    """

    def __init__(self, wrapped: BytesStore, logger: ChangeLogger, timestamped: bool, max_dirty: int = 10_000) -> None:
        self.wrapped = wrapped
        self.name = wrapped.name
        #: ``get(key)``: the store below's own (a read has nothing to log), one call fewer per read.
        self.get: Callable[[bytes], bytes | None] = wrapped.get
        self.logger = logger
        self._timestamped = timestamped
        self._dirty: dict[bytes, tuple[bytes | None, int]] = {}
        self._max_dirty = max_dirty

    @property
    def persistent(self) -> bool:
        return self.wrapped.persistent

    @property
    def is_open(self) -> bool:
        return self.wrapped.is_open

    def open(self, directory: str | None) -> None:
        self.wrapped.open(directory)

    def put(self, key: bytes, value: bytes | None, timestamp: int = 0, headers: Any = None) -> None:
        self.wrapped.put(key, value, timestamp, headers)
        dirty = self._dirty
        dirty[key] = (value, timestamp)
        if len(dirty) > self._max_dirty:
            self._log_dirty()

    def put_all(self, writes: list[Write]) -> None:
        self.wrapped.put_all(writes)
        self.log_only(writes)

    def log_only(self, writes: list[Write]) -> None:
        """Log ``writes`` now (see the module doc) without writing them to the store below: writes no read of it
        would return (a window store's windows behind its expiry floor). Kafka Streams' changelogging window store
        logs the writes its segmented store drops for an expired segment, too (``ChangeLoggingWindowBytesStore.put``).
        A key's write still waiting from ``put`` is dropped: it is older, and logged after this one it would win."""
        dirty = self._dirty
        if dirty:
            for write in writes:
                dirty.pop(write[0], None)
        log, strip = self.logger.log, self._timestamped
        for key, value, timestamp, _ in writes:
            log(key, value[8:] if strip and value is not None else value, timestamp)

    def _log_dirty(self) -> None:
        log, strip = self.logger.log, self._timestamped
        for key, (value, timestamp) in self._dirty.items():
            log(key, value[8:] if strip and value is not None else value, timestamp)
        self._dirty.clear()

    def write_batch(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        self.wrapped.write_batch(entries)

    def range(self, lo: bytes | None, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        return self.wrapped.range(lo, hi)

    def prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        return self.wrapped.prefix(prefix)

    def pending(self) -> dict[bytes, bytes | None]:
        return self.wrapped.pending()

    def approximate_num_entries(self) -> int:
        return self.wrapped.approximate_num_entries()

    def flush(self) -> None:
        self._log_dirty()
        self.wrapped.flush()

    def close(self) -> None:
        self.wrapped.close()
