"""RocksDB bytes store through rocksdict: one database per store per task, ordered by key bytes."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

import rocksdict


class RocksDBBytesStore:
    """Bytes-to-bytes store in a RocksDB database under the task's state directory.

    Iterators are materialized per call in chunks, so no rocksdict iterator outlives the call that
    created it (rocksdict's ``close()`` keeps the database lock while an iterator is alive).
    """

    persistent = True
    _CHUNK = 1000

    def __init__(self, name: str) -> None:
        self.name = name
        self.directory: str | None = None
        self._db: rocksdict.Rdict | None = None

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
        return self._open_db().get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self._open_db()[key] = value

    def delete(self, key: bytes) -> bytes | None:
        db = self._open_db()
        old = db.get(key)
        if old is not None:
            del db[key]
        return old

    def write_batch(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Apply puts (and deletes, for ``None`` values) atomically."""
        batch = rocksdict.WriteBatch(raw_mode=True)
        for key, value in entries:
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        self._open_db().write(batch)

    def range(self, lo: bytes | None, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        return self._scan(lo, lambda key: hi is not None and key > hi)

    def prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        return self._scan(prefix, lambda key: not key.startswith(prefix))

    def _scan(self, start: bytes | None, past_end: object) -> Iterator[tuple[bytes, bytes]]:
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
        return self._open_db().property_int_value("rocksdb.estimate-num-keys") or 0

    def flush(self) -> None:
        """Nothing at commit: writes are in RocksDB's write-ahead log, the changelog holds them durably,
        and local files are trusted only after a clean close (which flushes the memtables)."""

    def close(self) -> None:
        if self._db is not None:
            self._db.flush()
            self._db.close()
            self._db = None
