"""RocksDB bytes store through rocksdict: one database per store per task, ordered by key bytes."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

import rocksdict

from streaming.state.bytes_store import Write

_MISSING = object()


class RocksDBBytesStore:
    """Bytes-to-bytes store in a RocksDB database under the task's state directory.

    Writes collect in a write buffer (the latest value per key) and reach RocksDB as one WriteBatch at
    ``flush()`` (every commit) or when the buffer holds ``max_buffered`` keys, with RocksDB's
    write-ahead log off, as Kafka Streams runs it: the changelog is the durable log, local files are
    trusted only after a clean close (which flushes the buffer and the memtables), and a crash wipes
    and restores them. Reads see the buffer first, so the state is the same as with a write per update;
    a commit costs one batch instead of one RocksDB write per update.

    Iterators are materialized per call in chunks, so no rocksdict iterator outlives the call that
    created it (rocksdict's ``close()`` keeps the database lock while an iterator is alive).
    """

    persistent = True
    _CHUNK = 1000

    def __init__(self, name: str, max_buffered: int = 10_000) -> None:
        self.name = name
        self.directory: str | None = None
        self._db: rocksdict.Rdict | None = None
        self._buffer: dict[bytes, bytes | None] = {}  # writes not yet in RocksDB (None: a delete)
        self._max_buffered = max_buffered
        self._write_options = rocksdict.WriteOptions()
        self._write_options.disable_wal = True

    @property
    def is_open(self) -> bool:
        return self._db is not None

    def open(self, directory: str | None) -> None:
        if directory is None:
            raise ValueError(f"RocksDB store {self.name!r} needs a state directory")
        os.makedirs(directory, exist_ok=True)
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        self.directory = directory
        self._db = rocksdict.Rdict(directory, options=options)

    def _open_db(self) -> rocksdict.Rdict:
        if self._db is None:
            raise RuntimeError(f"state store {self.name!r} is closed")
        return self._db

    def get(self, key: bytes) -> bytes | None:
        value = self._buffer.get(key, _MISSING)
        if value is not _MISSING:
            return value  # type: ignore[return-value]
        db = self._db  # not _open_db(): a read per record pays no second Python call
        if db is None:
            raise RuntimeError(f"state store {self.name!r} is closed")
        return db.get(key)

    def put(self, key: bytes, value: bytes | None, timestamp: int = 0, headers: Any = None) -> None:
        """Buffer ``value`` (None deletes the key); the timestamp and headers are the layers' business."""
        self._buffer[key] = value
        if len(self._buffer) > self._max_buffered:
            self.flush()

    def put_all(self, writes: list[Write]) -> None:
        buffer = self._buffer
        for key, value, _, _ in writes:
            buffer[key] = value
        if len(buffer) > self._max_buffered:
            self.flush()

    def write_batch(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Apply puts (and deletes, for ``None`` values) after the buffered writes, in one WriteBatch."""
        batch = rocksdict.WriteBatch(raw_mode=True)
        for key, value in self._take_buffer():
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        for key, value in entries:
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        self._open_db().write(batch, self._write_options)

    def _take_buffer(self) -> list[tuple[bytes, bytes | None]]:
        buffered, self._buffer = list(self._buffer.items()), {}
        return buffered

    def pending(self) -> dict[bytes, bytes | None]:
        """A copy of the writes not yet in RocksDB (for readers on other threads, who lay it over scans)."""
        return self._buffer.copy()

    def range(self, lo: bytes | None, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        return self._scan(lo, lambda key: hi is not None and key > hi)

    def prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        return self._scan(prefix, lambda key: not key.startswith(prefix))

    def _scan(self, start: bytes | None, past_end: object) -> Iterator[tuple[bytes, bytes]]:
        """Scan RocksDB as it is (not the buffer: readers lay ``pending()`` over it)."""
        position = start
        skip_first = False
        while True:
            chunk = self._chunk(position, skip_first)
            for key, value in chunk:
                if past_end(key):  # type: ignore[operator]
                    return
                yield key, value
            if len(chunk) < self._CHUNK:
                return
            position, skip_first = chunk[-1][0], True

    def _chunk(self, start: bytes | None, skip_first: bool) -> list[tuple[bytes, bytes]]:
        iterator = self._open_db().iter()
        try:
            if start is None:
                iterator.seek_to_first()
            else:
                iterator.seek(start)
            if skip_first and iterator.valid():
                iterator.next()
            chunk = []
            while iterator.valid() and len(chunk) < self._CHUNK:
                chunk.append((iterator.key(), iterator.value()))
                iterator.next()
            return chunk
        finally:
            del iterator

    def approximate_num_entries(self) -> int:
        return (self._open_db().property_int_value("rocksdb.estimate-num-keys") or 0) + len(self._buffer)

    def flush(self) -> None:
        """Write the buffered writes to RocksDB in one batch (the write-ahead log is off)."""
        if self._buffer:
            self.write_batch(())

    def delete_range(self, lo: bytes, hi: bytes) -> None:
        """Delete the keys in ``[lo, hi)``, buffered or in RocksDB (one range tombstone, which RocksDB's compactions
        apply to the files)."""
        self._buffer = {key: value for key, value in self._buffer.items() if not lo <= key < hi}
        self._open_db().delete_range(lo, hi, self._write_options)

    def start_memtable_flush(self) -> None:
        """Have RocksDB write its memtables to disk on its own threads, without waiting (after a range delete: the
        next flush, at the latest at close, has no dropped keys left to write)."""
        self._open_db().flush(False)

    def persist(self) -> None:
        """Write the buffered writes and RocksDB's memtables to disk (what a clean close leaves behind)."""
        self.flush()
        self._open_db().flush()

    def close(self) -> None:
        if self._db is not None:
            self.persist()
            self._db.close()
            self._db = None
