"""The layers every typed store stacks over its inner bytes store, in one place (Kafka Streams' metered,
caching and logging wrappers)::

    a typed store (LayeredStore)   serdes and the store's public API
      -> CachingBytesStore         optional: collects writes per key until the commit
        -> ChangeLoggingBytesStore     optional (on by default): the changelog
          -> the inner store           RocksDB or memory, plain or segmented by time

Key-value (:mod:`streaming.state.keyvalue`), window (:mod:`streaming.state.window`) and session
(:mod:`streaming.state.session`) stores differ only in their keys' bytes layout and their API.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streaming.serdes import Serde
from streaming.state.api import StateStore
from streaming.state.bytes_store import BytesStore, StoreContext
from streaming.state.caching import CachedAggregate, CachingBytesStore
from streaming.state.changelogging import ChangeLoggingBytesStore

if TYPE_CHECKING:
    from streaming.dsl.change import Change

#: listener(key, Change(new value, old value), timestamp, headers): a cached store's flushed (collapsed) update, as
#: an operator forwards it; the key is the store's own kind of key (a record key, or a ``Windowed`` for window and
#: session stores).
FlushListener = Callable[[Any, "Change", int, Any], None]

TIMESTAMP = struct.Struct(">q")  # a timestamped store's value bytes: 8-byte big-endian timestamp, then the value


def _unset(data: Any) -> Any:
    raise RuntimeError("the store is not initialized")


class LayeredStore(StateStore):
    """A typed store over its layers: serdes, the layer stack built at :meth:`init`, flush listeners, restore,
    flush and close. ``timestamped`` stores keep an 8-byte timestamp before each value in the layers (the
    changelog holds the plain value, with the timestamp as the record's)."""

    timestamped = False  # whether restore batches carry each record's timestamp (see restore_batch)
    _value_at = 0  # where a value's serialized bytes begin in what the layers hold (after a timestamp: 8)
    caches_reads = False  # whether the record cache keeps clean entries (key-value stores: streaming.state.caching)

    def __init__(self, name: str, inner: BytesStore, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None,
                 logging_enabled: bool = True, caching_enabled: bool = False) -> None:
        self.name = name
        self.inner = inner
        self.logging_enabled = logging_enabled
        self.caching_enabled = caching_enabled
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._kser: Callable[[Any], bytes] = _unset
        self._kde: Callable[[bytes], Any] = _unset
        self._vser: Callable[[Any], bytes] = _unset
        self._vde: Callable[[bytes], Any] = _unset
        self._store: BytesStore = inner  # the top layer
        self._logging: ChangeLoggingBytesStore | None = None
        self._caching: CachingBytesStore | None = None
        self._timestamp: Callable[[], int] = lambda: -1

    def init(self, context: StoreContext) -> None:
        key_serde = self._key_serde or context.default_key_serde
        value_serde = self._value_serde or context.default_value_serde
        # Every use passes a key or value that is not None (None is handled around them), so the serdes' functions
        # for those (a C function for the built-in serdes: one Python call fewer per use) do what serialize and
        # deserialize would.
        self._kser, self._kde = key_serde.not_none_serializer(), key_serde.not_none_deserializer()
        self._vser, self._vde = value_serde.not_none_serializer(), value_serde.not_none_deserializer()
        self._timestamp = context.timestamp
        self.inner.open(context.store_dir)
        store: BytesStore = self.inner
        if self.logging_enabled and context.changelogger is not None:
            store = self._logging = ChangeLoggingBytesStore(store, context.changelogger(self.name), self.timestamped)
        if self.caching_enabled and context.cache_budget is not None:
            store = self._caching = CachingBytesStore(store, context.cache_budget, context.record_source,
                                                      context.forward_flushed, self.caches_reads)
        self._store = store
        context.register(self)

    def set_flush_listener(self, listener: FlushListener, send_old_values: bool = False) -> bool:
        """Forward flushed updates to ``listener``; True if the store caches (the caller then must not forward
        updates itself).

        ``listener(key, Change(new, old), timestamp, headers)`` (an operator's downstream, as it is) gets each key's
        latest value once per flush, with the timestamp and headers of the write that cached it (a removed entry:
        ``new`` None); ``old`` is the value before the previous flush when ``send_old_values``, else None. A key put
        and deleted between two flushes without ever reaching the store is not reported."""
        from streaming.dsl.change import changed  # here: the DSL's modules import the stores

        caching = self._caching
        if caching is None:
            return False
        key_of, vde, at = self._flushed_keys(), self._vde, self._value_at

        def on_flush(raw: bytes, new: bytes | CachedAggregate | None, old: bytes | None, timestamp: int,
                     headers: Any) -> None:
            listener(key_of(raw), changed((None if new is None else new[0] if type(new) is CachedAggregate
                                           else vde(new[at:]),
                                           None if old is None else vde(old[at:]))), timestamp, headers)
        caching.listener = on_flush
        caching.send_old_values = send_old_values
        return True

    def _flushed_keys(self) -> Callable[[bytes], Any]:
        """What makes the key a flush listener gets of a bytes key (a record key; window and session stores:
        Windowed)."""
        return self._kde

    def _value_of(self, data: bytes | None) -> Any:
        """A value as the layers hold it, deserialized; None stays None."""
        return None if data is None else self._vde(data[self._value_at:])

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

    def restore_batch(self, entries: list[Any]) -> None:
        """Apply changelog records to the inner store directly (no cache, no logging): ``(key, value)``, or
        ``(key, value, record timestamp)`` for timestamped stores (the timestamp is the value's)."""
        if self._caching is not None:
            self._caching.below_changed()  # the inner store changes without the cache
        if self.timestamped:
            pack = TIMESTAMP.pack
            self.inner.write_batch([(key, None if value is None else pack(timestamp) + value)
                                    for key, value, timestamp in entries])
        else:
            self.inner.write_batch(entries)

    def flush(self) -> None:
        """Flush every layer: the cache (which forwards), the changelog, the inner store."""
        self._store.flush()

    def close(self) -> None:
        self._store.close()


class TimestampedValues(LayeredStore):
    """A store whose layers hold each value after its 8-byte timestamp (mixed in before the store's class)."""

    timestamped = True
    _value_at = 8
