"""The typed key-value stores processors use: serdes, an optional record cache and change logging over
a bytes store (Kafka Streams' metered, caching and change-logging layers, in one class), plain or
timestamped."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from streaming.serdes import Serde
from streaming.state.api import KeyValueStore, TimestampedKeyValueStore, ValueAndTimestamp
from streaming.state.caching import CacheBudget, Entry, StoreCache
from streaming.state.changelogging import ChangeLogger


class BytesStore(Protocol):
    """What a bytes store (in memory or RocksDB) provides to the typed layer."""

    name: str
    persistent: bool
    is_open: bool

    def open(self, directory: str | None) -> None: ...
    def get(self, key: bytes) -> bytes | None: ...
    def put(self, key: bytes, value: bytes) -> None: ...
    def delete(self, key: bytes) -> bytes | None: ...
    def write_batch(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None: ...
    def range(self, lo: bytes | None, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]: ...
    def prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]: ...
    def approximate_num_entries(self) -> int: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


@dataclass
class StoreContext:
    """What a store learns when its task opens it."""

    application_id: str
    task_id: str
    store_dir: str | None
    default_key_serde: Serde[Any]
    default_value_serde: Serde[Any]
    # Change logging and caching (absent in contexts that have neither, such as plain unit tests):
    changelogger: Callable[[str], ChangeLogger] | None = None  # store name -> its logger
    timestamp: Callable[[], int] = lambda: -1  # the current record's timestamp
    cache_budget: CacheBudget | None = None
    register: Callable[[Any], None] = lambda store: None  # the task's state manager


# listener(key, new_value, old_value, timestamp, headers): a cached store's flushed (collapsed) update.
FlushListener = Callable[[Any, Any, Any, int, Any], None]

_TIMESTAMP = struct.Struct(">q")  # a timestamped store's bytes: 8-byte big-endian timestamp, then the value


class TypedKeyValueStore(KeyValueStore[Any, Any]):
    """Serializes keys and values around a bytes store; logs writes; optionally caches them.

    Without caching, a write goes to the bytes store and the changelog at once. With caching, writes
    collect in a record cache (one entry per key, with the write's timestamp and headers) until the
    commit flushes them, or the thread's ``statestore.cache.max.bytes`` budget evicts the oldest; then
    each key's latest value is written once to the bytes store and the changelog (stamped with the
    entry's timestamp) and handed to the flush listener (if any) with the entry's timestamp and
    headers, so consecutive updates of a key reach downstream as one record per commit. Range scans
    flush the cache first.
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
        self._logger: ChangeLogger | None = None
        self._cache: StoreCache | None = None
        self._timestamp: Callable[[], int] = lambda: -1
        self._listener: FlushListener | None = None
        self._send_old_values = False

    def init(self, context: StoreContext) -> None:
        key_serde = self._key_serde or context.default_key_serde
        value_serde = self._value_serde or context.default_value_serde
        self._kser, self._kde = key_serde.serialize, key_serde.deserialize
        self._vser, self._vde = value_serde.serialize, value_serde.deserialize
        self._timestamp = context.timestamp
        if self.logging_enabled and context.changelogger is not None:
            self._logger = context.changelogger(self.name)
        if self.caching_enabled and context.cache_budget is not None:
            self._cache = StoreCache(context.cache_budget, self._write_through)
        self.inner.open(context.store_dir)
        context.register(self)

    def set_flush_listener(self, listener: FlushListener, send_old_values: bool = False) -> bool:
        """Forward flushed updates to ``listener``; True if the store caches (the caller then must not
        forward updates itself).

        ``listener(key, new, old, timestamp, headers)`` gets each key's latest value once per flush, with
        the timestamp and headers of the write that cached it; ``old`` is the value before the previous
        flush when ``send_old_values``, else None. A key put and deleted between two flushes without ever
        reaching the store is not reported."""
        self._listener = listener
        self._send_old_values = send_old_values
        return self._cache is not None

    @property
    def persistent(self) -> bool:
        return self.inner.persistent

    @property
    def is_open(self) -> bool:
        return self.inner.is_open

    @property
    def changelog(self) -> ChangeLogger | None:
        return self._logger

    def _key(self, key: Any) -> bytes:
        if key is None:
            raise ValueError(f"store {self.name!r}: keys may not be None")
        return self._kser(key)

    # -- the bytes store's value format (a timestamped store prefixes the timestamp) -----------------------
    def _to_inner(self, data: bytes, timestamp: int) -> bytes:
        return data

    def _from_inner(self, data: bytes) -> bytes:
        return data

    # -- reads ------------------------------------------------------------------------------------------------
    def _get_raw(self, raw: bytes) -> bytes | None:
        """The serialized value of ``raw`` (the cache's, if it has the key), without any timestamp."""
        cache = self._cache
        if cache is not None:
            entry = cache.entries.get(raw)
            if entry is not None:
                return entry[0]
        return self.inner.get(raw)

    def get(self, key: Any) -> Any:
        data = self._get_raw(self._key(key))
        return None if data is None else self._vde(data)

    # -- writes -----------------------------------------------------------------------------------------------
    def _write(self, raw: bytes, data: bytes | None, timestamp: int, headers: Any) -> None:
        cache = self._cache
        if cache is not None:
            cache.put(raw, data, timestamp, headers)
            return
        if data is None:
            self.inner.delete(raw)
        else:
            self.inner.put(raw, self._to_inner(data, timestamp))
        if self._logger is not None:
            self._logger.log(raw, data, timestamp)

    def put(self, key: Any, value: Any) -> None:
        self._write(self._key(key), None if value is None else self._vser(value), self._timestamp(), None)

    def put_if_absent(self, key: Any, value: Any) -> Any:
        raw = self._key(key)
        old = self._get_raw(raw)
        if old is None:
            if value is not None:
                self._write(raw, self._vser(value), self._timestamp(), None)
            return None
        return self._vde(old)

    def put_all(self, entries: list[tuple[Any, Any]]) -> None:
        for key, value in entries:
            self.put(key, value)

    def delete(self, key: Any) -> Any:
        raw = self._key(key)
        old = self._get_raw(raw)
        if old is not None:
            self._write(raw, None, self._timestamp(), None)
        return None if old is None else self._vde(old)

    # -- scans ------------------------------------------------------------------------------------------------
    def _typed(self, entries: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[Any, Any]]:
        kde, vde = self._kde, self._vde
        for key, value in entries:
            yield kde(key), vde(value)

    def read_raw(self, lo: bytes | None, hi: bytes | None, prefix: bytes | None = None
                 ) -> Iterator[tuple[bytes, bytes]]:
        """Serialized ``(key, value)`` entries of the bytes store (not the cache), values without any
        timestamp: keys in ``[lo, hi]``, or starting with ``prefix``. For readers on other threads
        (interactive queries), who lay :meth:`unflushed` over it."""
        return self.inner.prefix(prefix) if prefix is not None else self.inner.range(lo, hi)

    def range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        self.flush_cache()
        lo = None if from_key is None else self._key(from_key)
        hi = None if to_key is None else self._key(to_key)
        return self._typed(self.read_raw(lo, hi))

    def prefix_scan(self, prefix: Any, prefix_key_serde: Serde[Any] | None = None) -> Iterator[tuple[Any, Any]]:
        self.flush_cache()
        raw = prefix_key_serde.serialize(prefix) if prefix_key_serde is not None else self._key(prefix)
        return self._typed(self.read_raw(None, None, raw))

    def all(self) -> Iterator[tuple[Any, Any]]:
        self.flush_cache()
        return self._typed(self.read_raw(None, None))

    def approximate_num_entries(self) -> int:
        return self.inner.approximate_num_entries() + (len(self._cache) if self._cache is not None else 0)

    def unflushed(self) -> dict[bytes, bytes | None]:
        """A copy of the record cache's unflushed writes (serialized key -> value, None for a delete);
        empty without caching. For readers on other threads (interactive queries): they lay it over
        :meth:`read_raw` instead of flushing, which only the owning stream thread may do."""
        cache = self._cache
        if cache is None:
            return {}
        return {raw: entry[0] for raw, entry in cache.entries.copy().items()}

    # -- cache flushing, restore, life cycle ---------------------------------------------------------------------
    def flush_cache(self) -> None:
        """Write the cache's entries through (bytes store, changelog, flush listener)."""
        if self._cache is not None:
            self._cache.flush(self._write_through)

    def _write_through(self, entries: list[tuple[bytes, Entry]]) -> None:
        listener = self._listener
        olds: list[bytes | None] | None = None
        if listener is not None:
            # The old value is read for a delete even without send_old_values: a key deleted before it
            # ever reached the store (put and deleted within one commit) is not forwarded at all.
            get, send_old = self.inner.get, self._send_old_values
            olds = [get(raw) if send_old or data is None else None for raw, (data, _, _) in entries]
        to_inner = self._to_inner
        self.inner.write_batch([(raw, None if data is None else to_inner(data, timestamp))
                                for raw, (data, timestamp, _) in entries])
        if self._logger is not None:
            log = self._logger.log
            for raw, (data, timestamp, _) in entries:
                log(raw, data, timestamp)
        if listener is not None and olds is not None:
            kde, vde, from_inner, send_old = self._kde, self._vde, self._from_inner, self._send_old_values
            for index, (raw, (data, timestamp, headers)) in enumerate(entries):
                old = olds[index]
                if data is None and old is None:
                    continue
                listener(kde(raw), None if data is None else vde(data),
                         None if old is None or not send_old else vde(from_inner(old)), timestamp, headers)

    def restore_batch(self, entries: list[tuple[bytes, bytes | None]]) -> None:
        """Apply changelog records ``(key, value)`` to the bytes store directly (no cache, no logging).
        A timestamped store takes ``(key, value, timestamp)`` instead (see :attr:`timestamped`)."""
        self.inner.write_batch(entries)

    def flush(self) -> None:
        self.flush_cache()
        self.inner.flush()

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"<KeyValueStore {self.name!r} over {type(self.inner).__name__}>"


class TimestampedTypedKeyValueStore(TypedKeyValueStore, TimestampedKeyValueStore[Any, Any]):
    """A :class:`TypedKeyValueStore` that keeps each value's timestamp: in the bytes store as an 8-byte
    prefix of the value, in the cache in the entry, in the changelog as the record's timestamp (the
    changelog value is the plain value, as Kafka Streams writes it). ``get``/``put`` and the scans use
    plain values; ``get_with_timestamp``/``put_with_timestamp`` see the timestamps."""

    timestamped = True

    def _to_inner(self, data: bytes, timestamp: int) -> bytes:
        return _TIMESTAMP.pack(timestamp) + data

    def _from_inner(self, data: bytes) -> bytes:
        return data[8:]

    def _lookup(self, raw: bytes) -> tuple[bytes, int] | None:
        """``(serialized value, timestamp)`` of ``raw``, the cache's first."""
        cache = self._cache
        if cache is not None:
            entry = cache.entries.get(raw)
            if entry is not None:
                return None if entry[0] is None else (entry[0], entry[1])
        data = self.inner.get(raw)
        return None if data is None else (data[8:], _TIMESTAMP.unpack_from(data)[0])

    def _get_raw(self, raw: bytes) -> bytes | None:
        found = self._lookup(raw)
        return None if found is None else found[0]

    def get_with_timestamp(self, key: Any) -> ValueAndTimestamp | None:
        found = self._lookup(self._key(key))
        return None if found is None else ValueAndTimestamp(self._vde(found[0]), found[1])

    def put_with_timestamp(self, key: Any, value: Any, timestamp: int, headers: Any = None) -> None:
        self._write(self._key(key), None if value is None else self._vser(value), timestamp, headers)

    def read_raw(self, lo: bytes | None, hi: bytes | None, prefix: bytes | None = None
                 ) -> Iterator[tuple[bytes, bytes]]:
        for key, value in super().read_raw(lo, hi, prefix):
            yield key, value[8:]

    def restore_batch(self, entries: list[tuple[bytes, bytes | None, int]]) -> None:  # type: ignore[override]
        """Apply changelog records ``(key, value, record timestamp)``: the timestamp is the value's."""
        pack = _TIMESTAMP.pack
        self.inner.write_batch([(key, None if value is None else pack(timestamp) + value)
                                for key, value, timestamp in entries])

    def __repr__(self) -> str:
        return f"<TimestampedKeyValueStore {self.name!r} over {type(self.inner).__name__}>"
