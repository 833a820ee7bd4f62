"""The bytes level of a state store: what the inner stores (RocksDB, memory) and the layers stacked on them
(change logging, caching) all offer, as Kafka Streams stacks its store wrappers.

A key-value store is built from the inside out::

    TypedKeyValueStore          serdes, the public API       (streaming.state.keyvalue, over streaming.state.layered)
      -> CachingBytesStore      record cache, optional       (streaming.state.caching)
        -> ChangeLoggingBytesStore  changelog, optional      (streaming.state.changelogging)
          -> RocksDBBytesStore | InMemoryBytesStore           (streaming.state.rocksdb / memory)

Every layer takes and returns serialized keys and values. A write carries the timestamp and headers of
the record that made it: the cache keeps them with the entry and forwards them on flush, the change
logger stamps the changelog record with the timestamp. ``pending()`` is what a layer holds that its
``range``/``prefix`` scans do not show yet; readers lay it over the scan (:func:`overlay`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from streaming.serdes import Serde
    from streaming.state.caching import CacheBudget
    from streaming.state.changelogging import ChangeLogger

# A write of a layer: (key, value or None for a delete, timestamp, headers).
Write = tuple[bytes, bytes | None, int, Any]

#: A flushed cache entry to forward: ``(source, key, new, old, timestamp, headers)``; ``source`` is what
#: ``StoreContext.record_source`` gave when the entry was written.
FlushedUpdate = tuple[Any, bytes, Any, Any, int, Any]

#: How a cache flush hands its entries downstream: ``forward(listener, updates)`` calls ``listener(key, new, old,
#: timestamp, headers)`` for each update in turn, with its ``source`` as the task's current record (see
#: ``StreamTask._forward_flushed``).
FlushForward = Callable[[Callable[..., None], list[FlushedUpdate]], None]


def call_listener(listener: Callable[..., None], updates: list[FlushedUpdate]) -> None:
    """The :data:`FlushForward` of a store outside a task: call the listener."""
    for _, key, new, old, timestamp, headers in updates:
        listener(key, new, old, timestamp, headers)


class BytesStore(Protocol):
    """The bytes-level interface of inner stores and layers."""

    name: str
    persistent: bool
    is_open: bool

    def open(self, directory: str | None) -> None: ...
    def get(self, key: bytes) -> bytes | None: ...
    def put(self, key: bytes, value: bytes | None, timestamp: int = 0, headers: Any = None) -> None: ...
    def put_all(self, writes: list[Write]) -> None: ...
    def write_batch(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Restore: apply changelog records to the inner store directly (no cache, no logging)."""
    def range(self, lo: bytes | None, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]: ...
    def prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]: ...
    def pending(self) -> dict[bytes, bytes | None]: ...
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
    # What a cached write keeps of the record that made it (opaque here: the topic, partition, offset and timestamp
    # of the task's input record; None: no input record), and how a flush forwards an entry with it (Kafka
    # Streams' record context of a cache entry):
    record_source: Callable[[], Any] = lambda: None
    forward_flushed: FlushForward = call_listener
    register: Callable[[Any], None] = lambda store: None  # the task's state manager


def overlay(entries: Iterable[tuple[bytes, bytes]], pending: list[tuple[bytes, bytes | None]]
            ) -> Iterator[tuple[bytes, bytes]]:
    """Merge sorted ``entries`` with sorted ``pending`` writes; a pending key wins, a pending None deletes."""
    index, count = 0, len(pending)
    for key, value in entries:
        while index < count and pending[index][0] < key:
            pending_key, pending_value = pending[index]
            index += 1
            if pending_value is not None:
                yield pending_key, pending_value
        if index < count and pending[index][0] == key:
            pending_value = pending[index][1]
            index += 1
            if pending_value is not None:
                yield key, pending_value
            continue
        yield key, value
    for pending_key, pending_value in pending[index:]:
        if pending_value is not None:
            yield pending_key, pending_value


def scan(store: BytesStore, lo: bytes | None, hi: bytes | None, prefix: bytes | None = None
         ) -> Iterator[tuple[bytes, bytes]]:
    """Entries of ``store`` (its pending writes laid over its scan) with keys in ``[lo, hi]`` (None: open),
    or starting with ``prefix``, in key order. Safe from a thread that does not own the store."""
    writes = store.pending()
    if prefix is not None:
        chosen = sorted((k, v) for k, v in writes.items() if k.startswith(prefix))
        return overlay(store.prefix(prefix), chosen)
    chosen = sorted((k, v) for k, v in writes.items() if (lo is None or k >= lo) and (hi is None or k <= hi))
    return overlay(store.range(lo, hi), chosen)
