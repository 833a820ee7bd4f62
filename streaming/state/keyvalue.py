"""The typed key-value stores processors use: the outer layer (Kafka Streams' metered store) over the
bytes layers of :mod:`streaming.state.bytes_store` — serdes and the public ``KeyValueStore`` API, plain or
timestamped."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Any

from streaming.serdes import Serde
from streaming.state.api import KeyValueStore, TimestampedKeyValueStore, ValueAndTimestamp
from streaming.state.bytes_store import BytesStore, StoreContext, scan
from streaming.state.caching import CachingBytesStore
from streaming.state.changelogging import ChangeLoggingBytesStore

# listener(key, new_value, old_value, timestamp, headers): a cached store's flushed (collapsed) update.
FlushListener = Callable[[Any, Any, Any, int, Any], None]

_TIMESTAMP = struct.Struct(">q")  # a timestamped store's bytes: 8-byte big-endian timestamp, then the value


class TypedKeyValueStore(KeyValueStore[Any, Any]):
    """Serializes keys and values around a stack of bytes layers: an inner store (RocksDB or memory),
    change logging (on by default), and a record cache (optional).

    Without caching, every write reaches the inner store at once and every update is forwarded by the
    DSL operation that made it; the inner store and the changelog take the writes in batches at the
    commit (see :mod:`streaming.state.rocksdb`, :mod:`streaming.state.changelogging`). With caching,
    writes collect per key until the commit (or the thread's cache budget evicts them), and the flush
    listener forwards each key's latest value once. Reads and scans see every write at once: scans lay
    the layers' pending writes over the inner store (and never flush the cache).
    """

    timestamped = False  # whether restore batches carry each record's timestamp (see restore_batch)

    def __init__(self, name: str, inner: BytesStore, key_serde: Serde[Any] | None,
                 value_serde: Serde[Any] | None, logging_enabled: bool = True, caching_enabled: bool = False) -> None:
        self.name = name
        self.inner = inner
        self.logging_enabled = logging_enabled
        self.caching_enabled = caching_enabled
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._kser = self._kde = self._vser = self._vde = None
        self._store: BytesStore = inner  # the top layer
        self._logging: ChangeLoggingBytesStore | None = None
        self._caching: CachingBytesStore | None = None
        self._timestamp: Callable[[], int] = lambda: -1

    def init(self, context: StoreContext) -> None:
        key_serde = self._key_serde or context.default_key_serde
        value_serde = self._value_serde or context.default_value_serde
        self._kser, self._kde = key_serde.serialize, key_serde.deserialize
        self._vser, self._vde = value_serde.serialize, value_serde.deserialize
        self._timestamp = context.timestamp
        self.inner.open(context.store_dir)
        store: BytesStore = self.inner
        if self.logging_enabled and context.changelogger is not None:
            store = self._logging = ChangeLoggingBytesStore(store, context.changelogger(self.name), self.timestamped)
        if self.caching_enabled and context.cache_budget is not None:
            store = self._caching = CachingBytesStore(store, context.cache_budget)
        self._store = store
        context.register(self)

    def set_flush_listener(self, listener: FlushListener, send_old_values: bool = False) -> bool:
        """Forward flushed updates to ``listener``; True if the store caches (the caller then must not
        forward updates itself).

        ``listener(key, new, old, timestamp, headers)`` gets each key's latest value once per flush, with
        the timestamp and headers of the write that cached it; ``old`` is the value before the previous
        flush when ``send_old_values``, else None. A key put and deleted between two flushes without ever
        reaching the store is not reported."""
        caching = self._caching
        if caching is None:
            return False
        kde, value = self._kde, self._value_of

        def on_flush(raw: bytes, new: bytes | None, old: bytes | None, timestamp: int, headers: Any) -> None:
            listener(kde(raw), value(new), value(old), timestamp, headers)
        caching.listener = on_flush
        caching.send_old_values = send_old_values
        return True

    @property
    def persistent(self) -> bool:
        return self.inner.persistent

    @property
    def is_open(self) -> bool:
        return self.inner.is_open

    @property
    def changelog(self) -> Any:
        """The change logger, or None when the store is not logged."""
        return None if self._logging is None else self._logging.logger

    def _key(self, key: Any) -> bytes:
        if key is None:
            raise ValueError(f"store {self.name!r}: keys may not be None")
        return self._kser(key)

    def _value_of(self, data: bytes | None) -> Any:
        """A stored value (as the layers hold it) deserialized; None stays None."""
        return None if data is None else self._vde(data)

    def _stored(self, value: Any, timestamp: int) -> bytes | None:
        """A value as the layers hold it."""
        return None if value is None else self._vser(value)

    # -- reads ------------------------------------------------------------------------------------------------
    def get(self, key: Any) -> Any:
        return self._value_of(self._store.get(self._key(key)))

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

    # -- flushing, restore, life cycle -----------------------------------------------------------------------------
    def restore_batch(self, entries: list[tuple[bytes, bytes | None]]) -> None:
        """Apply changelog records ``(key, value)`` to the inner store directly (no cache, no logging).
        A timestamped store takes ``(key, value, timestamp)`` instead (see :attr:`timestamped`)."""
        self.inner.write_batch(entries)

    def flush(self) -> None:
        """Flush every layer: the cache (which forwards), the changelog, the inner store."""
        self._store.flush()

    def close(self) -> None:
        self._store.close()

    def __repr__(self) -> str:
        return f"<KeyValueStore {self.name!r} over {type(self.inner).__name__}>"


class TimestampedTypedKeyValueStore(TypedKeyValueStore, TimestampedKeyValueStore[Any, Any]):
    """A :class:`TypedKeyValueStore` that keeps each value's timestamp: the layers hold the value with an
    8-byte timestamp prefix (Kafka Streams' ValueAndTimestamp bytes), the changelog the plain value with
    the timestamp as the record's. ``get``/``put`` and the scans use plain values;
    ``get_with_timestamp``/``put_with_timestamp`` see the timestamps."""

    timestamped = True

    def _value_of(self, data: bytes | None) -> Any:
        return None if data is None else self._vde(data[8:])

    def _stored(self, value: Any, timestamp: int) -> bytes | None:
        return None if value is None else _TIMESTAMP.pack(timestamp) + self._vser(value)

    def get_with_timestamp(self, key: Any) -> ValueAndTimestamp | None:
        data = self._store.get(self._key(key))
        return None if data is None else ValueAndTimestamp(self._vde(data[8:]), _TIMESTAMP.unpack_from(data)[0])

    def put_with_timestamp(self, key: Any, value: Any, timestamp: int, headers: Any = None) -> None:
        self._store.put(self._key(key), None if value is None else _TIMESTAMP.pack(timestamp) + self._vser(value),
                        timestamp, headers)

    def restore_batch(self, entries: list[tuple[bytes, bytes | None, int]]) -> None:  # type: ignore[override]
        """Apply changelog records ``(key, value, record timestamp)``: the timestamp is the value's."""
        pack = _TIMESTAMP.pack
        self.inner.write_batch([(key, None if value is None else pack(timestamp) + value)
                                for key, value, timestamp in entries])

    def __repr__(self) -> str:
        return f"<TimestampedKeyValueStore {self.name!r} over {type(self.inner).__name__}>"
