"""The typed key-value stores processors use: the outer layer (Kafka Streams' metered store) over the
bytes layers of :mod:`streaming.state.bytes_store` — serdes and the public ``KeyValueStore`` API, plain or
timestamped."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from streaming.serdes import Serde
from streaming.state.api import KeyValueStore, TimestampedKeyValueStore, ValueAndTimestamp
from streaming.state.bytes_store import scan
from streaming.state.caching import MISSING
from streaming.state.layered import TIMESTAMP, LayeredStore, TimestampedValues


class TypedKeyValueStore(LayeredStore, KeyValueStore[Any, Any]):
    """Serializes keys and values around a stack of bytes layers (:mod:`streaming.state.layered`): an inner store
    (RocksDB or memory), change logging (on by default), and a record cache (optional).

    Without caching, every write reaches the inner store at once and every update is forwarded by the
    DSL operation that made it; the inner store and the changelog take the writes in batches at the
    commit (see :mod:`streaming.state.rocksdb`, :mod:`streaming.state.changelogging`). With caching,
    writes collect per key until the commit (or the thread's cache budget evicts them), and the flush
    listener forwards each key's latest value once; the cache also keeps what reads found below it (clean
    entries), so a looked-up table is read from memory. Reads and scans see every write at once: scans lay
    the layers' pending writes over the inner store (and never flush the cache).
    """

    caches_reads = True

    def _stored(self, value: Any, timestamp: int) -> bytes | None:
        """A value as the layers hold it."""
        return None if value is None else self._vser(value)

    # -- reads ------------------------------------------------------------------------------------------------
    def get(self, key: Any) -> Any:
        return self._value_of(self._store.get(self._key(key)))

    def value_lookup(self, absent: Any = None) -> Callable[[Any], Any]:
        """:meth:`get` as one function, for a processor's per-record reads (a join's table lookups): the value of
        ``key``, or ``absent`` when the store has none. Build it after :meth:`init` (it keeps the layers of then);
        like ``get``, it refuses a None key."""
        read, serialize, deserialize, name = self._reads(), self._kser, self._vde, self.name
        skip = 8 if self.timestamped else 0  # a timestamped store's value follows its 8-byte timestamp

        def lookup(key: Any) -> Any:
            if key is None:
                raise ValueError(f"store {name!r}: keys may not be None")
            data = read(serialize(key))
            return absent if data is None else deserialize(data[skip:])  # data[0:] is data itself, not a copy
        return lookup

    def _reads(self) -> Callable[[bytes], bytes | None]:
        """What the top layer's ``get`` does, with fewer Python calls per read, for the stream thread that owns the
        store: the change-logging layer only passes reads on, so they go to the layer under it; over a cache, one
        function looks in the cache's dirty entries, then its clean ones, then below, and keeps what it found
        below as a clean entry (Kafka Streams' ``CachingKeyValueStore.getInternal``)."""
        below = self.inner.get  # the layers' stack: cache (optional) -> change logging (optional) -> inner
        caching = self._caching
        if caching is None or self._store is not caching:
            return below if self._store is self._logging else self._store.get
        cache = caching.cache  # its dicts live as long as the store
        dirty, clean, remember, missing = cache.entries.get, cache.clean.get, cache.remember, MISSING

        def read(key: bytes) -> bytes | None:
            entry = dirty(key)
            if entry is not None:
                return entry[0]
            value = clean(key, missing)
            if value is missing:
                value = below(key)
                remember(key, value)
            return value
        return read

    # -- writes -----------------------------------------------------------------------------------------------
    def put(self, key: Any, value: Any) -> None:
        timestamp = self._timestamp()
        self._store.put(self._key(key), self._stored(value, timestamp), timestamp, None)

    def put_if_absent(self, key: Any, value: Any) -> Any:
        raw = self._key(key)
        old = self._store.get(raw)
        if old is None:
            if value is not None:
                timestamp = self._timestamp()
                self._store.put(raw, self._stored(value, timestamp), timestamp, None)
            return None
        return self._value_of(old)

    def put_all(self, entries: list[tuple[Any, Any]]) -> None:
        for key, value in entries:
            self.put(key, value)

    def delete(self, key: Any) -> Any:
        raw = self._key(key)
        old = self._store.get(raw)
        if old is not None:
            self._store.put(raw, None, self._timestamp(), None)
        return self._value_of(old)

    # -- scans ------------------------------------------------------------------------------------------------
    def read_raw(self, lo: bytes | None, hi: bytes | None, prefix: bytes | None = None
                 ) -> Iterator[tuple[bytes, bytes]]:
        """Serialized ``(key, stored value)`` entries, every layer's pending writes included: keys in
        ``[lo, hi]`` (None: open), or starting with ``prefix``, in key order. Safe from threads that do
        not own the store (interactive queries): it never flushes."""
        return scan(self._store, lo, hi, prefix)

    def _typed(self, entries: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[Any, Any]]:
        kde, value = self._kde, self._value_of
        for key, data in entries:
            yield kde(key), value(data)

    def range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        lo = None if from_key is None else self._key(from_key)
        hi = None if to_key is None else self._key(to_key)
        return self._typed(self.read_raw(lo, hi))

    def prefix_scan(self, prefix: Any, prefix_key_serde: Serde[Any] | None = None) -> Iterator[tuple[Any, Any]]:
        raw = prefix_key_serde.serialize(prefix) if prefix_key_serde is not None else self._key(prefix)
        return self._typed(self.read_raw(None, None, raw))

    def all(self) -> Iterator[tuple[Any, Any]]:
        return self._typed(self.read_raw(None, None))

    def approximate_num_entries(self) -> int:
        return self._store.approximate_num_entries()

    def unflushed(self) -> dict[bytes, bytes | None]:
        """A copy of the writes the layers hold that the inner store's scans do not show yet (serialized
        key -> stored value, None for a delete)."""
        return self._store.pending()

    def __repr__(self) -> str:
        return f"<KeyValueStore {self.name!r} over {type(self.inner).__name__}>"


class TimestampedTypedKeyValueStore(TimestampedValues, TypedKeyValueStore, TimestampedKeyValueStore[Any, Any]):
    """A :class:`TypedKeyValueStore` that keeps each value's timestamp: the layers hold the value with an
    8-byte timestamp prefix (Kafka Streams' ValueAndTimestamp bytes), the changelog the plain value with
    the timestamp as the record's. ``get``/``put`` and the scans use plain values;
    ``get_with_timestamp``/``put_with_timestamp`` see the timestamps."""

    def _stored(self, value: Any, timestamp: int) -> bytes | None:
        return None if value is None else TIMESTAMP.pack(timestamp) + self._vser(value)

    def get_with_timestamp(self, key: Any) -> ValueAndTimestamp | None:
        data = self._store.get(self._key(key))
        return None if data is None else ValueAndTimestamp(self._vde(data[8:]), TIMESTAMP.unpack_from(data)[0])

    def put_with_timestamp(self, key: Any, value: Any, timestamp: int, headers: Any = None) -> None:
        self._store.put(self._key(key), None if value is None else TIMESTAMP.pack(timestamp) + self._vser(value),
                        timestamp, headers)

    def timestamped_access(self) -> tuple[Callable[[Any], bytes], Callable[[bytes], ValueAndTimestamp | None],
                                          Callable[[bytes, Any, int, Any], None]]:
        """For the DSL's per-record paths, after :meth:`init`: ``key_bytes(key)`` (a key that is not None),
        ``get_at(key bytes)`` and ``put_at(key bytes, value, timestamp, headers)`` do what :meth:`get_with_timestamp`
        and :meth:`put_with_timestamp` do, with the key serialized once for both (reads: :meth:`_reads`)."""
        read = self._reads()
        write, vser, vde = self._store.put, self._vser, self._vde
        pack, unpack = TIMESTAMP.pack, TIMESTAMP.unpack_from
        value_and_timestamp = partial(tuple.__new__, ValueAndTimestamp)

        def get_at(raw: bytes) -> ValueAndTimestamp | None:
            data = read(raw)
            return None if data is None else value_and_timestamp((vde(data[8:]), unpack(data)[0]))

        def put_at(raw: bytes, value: Any, timestamp: int, headers: Any) -> None:
            write(raw, None if value is None else pack(timestamp) + vser(value), timestamp, headers)
        return self._kser, get_at, put_at

    def __repr__(self) -> str:
        return f"<TimestampedKeyValueStore {self.name!r} over {type(self.inner).__name__}>"
