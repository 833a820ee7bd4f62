"""The record cache of a store: a write-back layer that collapses updates per key until a flush.

``CachingBytesStore`` sits on top of a store's other layers (Kafka Streams' CachingKeyValueStore):
writes collect in a record cache, one entry per key with the timestamp, headers and source (the input
record) of its latest write, until the commit flushes them or the thread's ``statestore.cache.max.bytes``
budget evicts the oldest. Then each key's latest value is written once to the layers below and handed to
the flush listener, so consecutive updates of a key reach downstream as one record per commit. The
listener runs with the entry's source as the task's current record (the store context's
``forward_flushed``), as Kafka Streams sets the entry's record context around it: an error downstream
names that input record.

A key-value store's cache also keeps **clean entries**: what the layers below hold for a key, after a flush
wrote it through or a read had to go below for it. Kafka Streams' NamedCache keeps a flushed entry as clean
(``NamedCache.flush`` marks it clean, it stays cached) and ``CachingKeyValueStore.getInternal`` caches the value
a miss read from the wrapped store; so a table a join looks up is read from memory, not RocksDB. They count
against the same budget and are evicted before any dirty entry (they cost nothing to evict: the store below
has them), from any store of the thread, oldest first. Unlike Kafka Streams, a read that finds no value is
cached too (as an absent entry), and clean entries are evicted in the order they were cached (Kafka Streams:
least recently used). Window and session stores keep none: their reads are range scans, and their segments
drop expired windows below the cache.

A window aggregate reads a window, then writes it (:meth:`CachingBytesStore.read_below`): when that read went
below the cache, what it found is kept beside the dirty entry the write makes, and the flush forwards it as the old
value instead of reading the layers below a second time (a suppress downstream asks for old values; Kafka Streams
reads them again in ``CachingWindowStore.putAndMaybeForward``). It is dropped when its entry is written through, when
the layers below change without the cache (a restore), and at the next flush when no write followed the read (the
aggregator failed): it never outlives a commit.

A window aggregate whose value is a number or a string (immutable: ``count``, a sum) is cached as a
:class:`CachedAggregate`: the object its operator computed beside its serialized value, so the next update of the
window reads the object back without deserializing it and the flush forwards it as it is. It is serialized as it is
cached, as any write is (an error names the record that made it, and the budget counts its bytes); the timestamp
is put before the bytes only when something below the cache or another thread needs them. Any other value is cached
as bytes: an aggregator that changes the value it was given in place and then fails must leave the cached one as it
was, so every update deserializes its own copy.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Container, Iterable, Iterator
from functools import partial
from itertools import islice
from typing import Any, NamedTuple

from streaming.state.bytes_store import BytesStore, FlushForward, Write, call_listener

# Rough per-entry overhead of a Python dict entry and its tuple, counted against the budget.
ENTRY_OVERHEAD = 120

_TIMESTAMP = struct.Struct(">q")

#: The types of aggregates a window store caches as objects (:class:`CachedAggregate`): nothing changes them in place.
IMMUTABLE_AGGREGATES = frozenset({int, float, str, bool})


class CachedAggregate(NamedTuple):
    """A window aggregate cached as the object its operator computed (see the module doc): ``value`` and its
    ``timestamp`` (a ``ValueAndTimestamp``'s fields) and ``serialized``, the value's bytes. It stands for
    :func:`stored_bytes` in the layers below (the timestamp, then the value): ``8 + len(serialized)`` bytes."""

    value: Any
    timestamp: int
    serialized: bytes


#: ``cached_aggregate((value, timestamp, serialized))``: a CachedAggregate without its constructor's Python call.
cached_aggregate = partial(tuple.__new__, CachedAggregate)


def stored_bytes(value: bytes | CachedAggregate | None) -> bytes | None:
    """What the layers below hold for a cached value."""
    if type(value) is CachedAggregate:
        return _TIMESTAMP.pack(value[1]) + value[2]  # type: ignore[index]
    return value  # type: ignore[return-value]


def _value_size(value: bytes | CachedAggregate | None) -> int:
    """The bytes a cached value stands for (0 for a delete)."""
    if value is None:
        return 0
    return 8 + len(value[2]) if type(value) is CachedAggregate else len(value)  # type: ignore[index]


class CacheBudget:
    """``statestore.cache.max.bytes`` shared by every cached store of one stream thread, and the caches that share
    it (an eviction frees clean entries of any of them before it writes dirty ones through)."""

    __slots__ = ("caches", "max_bytes", "used")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used = 0
        self.caches: list[StoreCache] = []


def cache_budget(max_bytes: int) -> CacheBudget | None:
    """The budget of a stream thread's caches, or None for ``statestore.cache.max.bytes=0``: then no store
    stacks a record cache (every update is forwarded at once, as with caching disabled) instead of one
    that evicts each write as it comes."""
    return CacheBudget(max_bytes) if max_bytes > 0 else None


# A cache entry: (serialized value or None for a delete, or a CachedAggregate; timestamp, headers, source). As Kafka
# Streams' record cache keeps each entry's record context, the entry keeps the timestamp, headers and source (what the
# store context's record_source() gave: the input record without its bytes; None if none) of the write, and its flush
# forwards them downstream.
Entry = tuple[bytes | CachedAggregate | None, int, Any, Any]

MISSING: Any = object()  # what a clean-entry lookup gives for a key without one


def _entry_bytes(key: bytes, value: bytes | CachedAggregate | None) -> int:
    return len(key) + ENTRY_OVERHEAD + _value_size(value)


class StoreCache:
    """Dirty entries of one store in write order (``entries``), and clean ones in the order they were cached
    (``clean``: key -> the value the layers below hold, None if they hold none; only when ``keep_clean``).

    ``evict`` is called with the oldest dirty entries when the shared budget is exceeded and no clean entry is
    left to drop; ``flush`` hands over every dirty entry. Either way the store writes them to the inner store and
    the changelog, forgets them (:meth:`forget`, which keeps them as clean), and forwards them downstream."""

    def __init__(self, budget: CacheBudget, evict: Callable[[list[tuple[bytes, Entry]]], None],
                 keep_clean: bool = False, record_source: Callable[[], Any] = lambda: None) -> None:
        self.entries: dict[bytes, Entry] = {}
        self.clean: dict[bytes, bytes | None] = {}
        self.keep_clean = keep_clean
        self._budget = budget
        self._evict = evict
        self._record_source = record_source
        budget.caches.append(self)

    def get(self, key: bytes) -> Entry | None:
        return self.entries.get(key)

    def put(self, key: bytes, value: bytes | CachedAggregate | None, timestamp: int = 0, headers: Any = None) -> None:
        """Cache a write of ``key``, with ``record_source()`` (what the entry keeps of the record that wrote it)."""
        entries = self.entries
        old = entries.pop(key, None)  # re-inserted at the end: dict order is write order (LRU)
        budget = self._budget
        # _value_size inlined: every cached write of every store comes here
        size = len(value) if type(value) is bytes else 0 if value is None else 8 + len(value[2])  # type: ignore[index]
        if old is None:
            budget.used += len(key) + ENTRY_OVERHEAD + size
        else:
            old_value = old[0]
            budget.used += size - (len(old_value) if type(old_value) is bytes else
                                   0 if old_value is None else 8 + len(old_value[2]))  # type: ignore[index]
        entries[key] = (value, timestamp, headers, self._record_source())
        if budget.used > budget.max_bytes:
            self._evict_oldest()

    def remember(self, key: bytes, value: bytes | None) -> None:
        """Keep what the layers below hold for ``key`` (a read went below for it) as a clean entry."""
        if not self.keep_clean:
            return
        clean, budget = self.clean, self._budget
        old = clean.pop(key, MISSING)
        budget.used += _entry_bytes(key, value) - (0 if old is MISSING else _entry_bytes(key, old))
        clean[key] = value
        if budget.used > budget.max_bytes:
            self._evict_oldest()

    def _evict_oldest(self) -> None:
        """Bring the budget under 90% of its maximum: clean entries first (this store's, then the other stores'),
        then this store's oldest dirty entries, written through."""
        budget = self._budget
        target = budget.max_bytes * 0.9
        for cache in (self, *(cache for cache in budget.caches if cache is not self)):
            cache.drop_clean(budget.used - target)
            if budget.used <= target:
                return
        evicted = []
        freed = 0
        for key, entry in self.entries.items():
            if budget.used - freed <= target:
                break
            evicted.append((key, entry))
            freed += _entry_bytes(key, entry[0])
        if evicted:
            self._evict(evicted)

    def drop_clean(self, at_least: float = float("inf")) -> None:
        """Drop clean entries, oldest first, until ``at_least`` bytes are freed (all of them by default: the layers
        below changed without this cache, as a restore changes them)."""
        clean = self.clean
        if not clean:
            return
        if at_least == float("inf"):
            self._budget.used -= sum(_entry_bytes(key, value) for key, value in clean.items())
            clean.clear()
            return
        dropped, freed = [], 0
        for key, value in clean.items():
            if freed >= at_least:
                break
            dropped.append(key)
            freed += _entry_bytes(key, value)
        for key in dropped:
            del clean[key]
        self._budget.used -= freed

    def forget(self, written: list[tuple[bytes, Entry]], keep_clean: bool = True) -> None:
        """Drop dirty entries that were written through (so a concurrent reader never sees a gap), unless they were
        overwritten meanwhile, and keep what they wrote as clean entries (the layers below hold it now). The budget
        does not grow: a clean entry takes the bytes its dirty one gave back."""
        entries, clean, budget = self.entries, self.clean, self._budget
        keep = keep_clean and self.keep_clean
        for key, entry in written:
            value = entry[0]
            if entries.get(key) is entry:
                del entries[key]
                budget.used -= _entry_bytes(key, value)
            if keep:
                value = stored_bytes(value)
                old = clean.pop(key, MISSING)
                budget.used += _entry_bytes(key, value) - (0 if old is MISSING else _entry_bytes(key, old))
                clean[key] = value

    def flush(self, write: Callable[[list[tuple[bytes, Entry]]], None]) -> None:
        """Hand every dirty entry, oldest write first, to ``write`` (which forgets them once written through)."""
        entries = list(self.entries.items())
        if entries:
            write(entries)

    def discard(self) -> None:
        """Drop every entry, the dirty ones unwritten, and give their bytes back to the budget (a close; after a
        dirty one, under exactly-once, the writes belonged to an aborted transaction); the cache leaves the budget."""
        self.forget(list(self.entries.items()), keep_clean=False)
        self.drop_clean()
        if self in self._budget.caches:
            self._budget.caches.remove(self)

    def __len__(self) -> int:
        return len(self.entries)


# listener(key, new, old, timestamp, headers) with serialized key and values (``new`` may be a CachedAggregate: its
# object goes downstream as it is): a flushed (collapsed) update.
RawFlushListener = Callable[[bytes, bytes | CachedAggregate | None, bytes | None, int, Any], None]


class CachingBytesStore:
    """The record cache over ``wrapped`` (see the module doc). Reads see the cache first.

    On a flush or an eviction the entries are written through to ``wrapped`` and handed to
    ``listener`` (if set) as ``(key, new, old, timestamp, headers)``; ``old`` is the value ``wrapped``
    held before (read only when ``send_old_values``, and for deletes: a key put and deleted between two
    flushes, never written through, is not reported). ``record_source()`` is what an entry keeps of the
    record that wrote it; ``forward`` hands each entry to the listener with it (:data:`FlushForward`).
    With ``keep_clean`` (key-value stores) the cache keeps clean entries: :meth:`get` answers from them, and the
    stream thread's reads (:meth:`StoreCache.remember`, through ``TypedKeyValueStore._reads``) add them.
    """

    def __init__(self, wrapped: BytesStore, budget: CacheBudget, record_source: Callable[[], Any] = lambda: None,
                 forward: FlushForward = call_listener, keep_clean: bool = False) -> None:
        self.wrapped = wrapped
        self.name = wrapped.name
        self.cache = StoreCache(budget, self._write_through, keep_clean, record_source)
        #: ``put(key, value, timestamp=0, headers=None)``: the cache's own, one call fewer per write.
        self.put: Callable[[bytes, bytes | CachedAggregate | None, int, Any], None] = self.cache.put
        self.listener: RawFlushListener | None = None
        self.send_old_values = False
        self._forward = forward
        # What the layers below hold for keys the owner read below the cache before writing them (read_below):
        # each write-through of a key takes its entry; the rest (a read whose write failed) go at the next flush.
        self._below: dict[bytes, bytes | None] = {}
        # What forward_dirty forwarded of keys still dirty: the old value of their next forward, which skips them if
        # they did not change.
        self._forwarded: dict[bytes, bytes | None] = {}

    @property
    def persistent(self) -> bool:
        return self.wrapped.persistent

    @property
    def is_open(self) -> bool:
        return self.wrapped.is_open

    def open(self, directory: str | None) -> None:
        self.wrapped.open(directory)

    def get(self, key: bytes) -> bytes | None:
        """The cached value, else the layers below's. A miss is not cached here: interactive queries read through
        this from other threads, and only the store's own stream thread may add entries."""
        entry = self.cache.entries.get(key)
        if entry is not None:
            return stored_bytes(entry[0])
        value = self.cache.clean.get(key, MISSING)
        return self.wrapped.get(key) if value is MISSING else value

    def read_below(self, key: bytes) -> bytes | None:
        """What the layers below the dirty entries hold for ``key`` (a clean entry, else the store below), for the
        stream thread that owns the store, about to write ``key``, which has no dirty entry: kept for the flush of
        that write (see the module doc). Never for other threads."""
        value = self.cache.clean.get(key, MISSING)
        if value is MISSING:
            value = self.wrapped.get(key)
        self._below[key] = value
        return value

    def _value_below(self, key: bytes) -> bytes | None:
        """What the layers below the dirty entries hold for ``key``, without reading or keeping anything twice: what
        :meth:`read_below` kept for it, else a clean entry, else the store below (no side effect)."""
        value = self._below.get(key, MISSING)
        if value is MISSING:
            value = self.cache.clean.get(key, MISSING)
        return self.wrapped.get(key) if value is MISSING else value  # type: ignore[return-value]

    def put_all(self, writes: list[Write]) -> None:
        put = self.cache.put
        for key, value, timestamp, headers in writes:
            put(key, value, timestamp, headers)

    def _write_through(self, entries: list[tuple[bytes, Entry]], expired: Container[bytes] = ()) -> None:
        listener, known = self.listener, self._below
        olds: list[bytes | None] = []
        if listener is not None:
            send_old, clean, below = self.send_old_values, self.cache.clean.get, self.wrapped.get
            if known:
                olds = [old if (old := known.pop(key, MISSING)) is not MISSING else
                        (below(key) if (old := clean(key, MISSING)) is MISSING else old)
                        if send_old or entry[0] is None else None for key, entry in entries]
            else:
                olds = [(below(key) if (old := clean(key, MISSING)) is MISSING else old)
                        if send_old or entry[0] is None else None for key, entry in entries]
        if known:
            for key, _ in entries:
                known.pop(key, None)
        writes = [(key, stored_bytes(value) if type(value) is CachedAggregate else value, timestamp, headers)
                  for key, (value, timestamp, headers, _) in entries]
        if not expired:
            self.wrapped.put_all(writes)
        else:
            stored: list[Write] = []
            logged: list[Write] = []
            for write in writes:
                (logged if write[0] in expired else stored).append(write)
            if stored:
                self.wrapped.put_all(stored)
            log_only = getattr(self.wrapped, "log_only", None)  # a changelog below still takes the rest
            if logged and log_only is not None:
                log_only(logged)
        # Forgotten before they are forwarded, as Kafka Streams marks them clean before its flush listener runs
        # (NamedCache.flush): a failure downstream that stops the thread leaves no entry to flush again.
        self.cache.forget(entries)
        if listener is None:
            return
        if self._forwarded:
            entries, olds = self._after_forwarded(entries, olds, writes)
        send_old = self.send_old_values
        self._forward(listener, [(source, key, value, old if send_old else None, timestamp, headers)
                                 for (key, (value, timestamp, headers, source)), old in zip(entries, olds, strict=True)
                                 if value is not None or old is not None])

    def _after_forwarded(self, entries: list[tuple[bytes, Entry]], olds: list[bytes | None],
                         writes: list[Write]) -> tuple[list[tuple[bytes, Entry]], list[bytes | None]]:
        """The entries written through (and their old values) to forward, given what :meth:`forward_dirty` forwarded
        of them: its value is their old one, and one that did not change since is not forwarded again."""
        forwarded, kept, kept_olds = self._forwarded, [], []
        for entry, old, write in zip(entries, olds, writes, strict=True):
            seen = forwarded.pop(entry[0], MISSING)
            if seen is MISSING:
                kept.append(entry)
                kept_olds.append(old)
            elif write[1] != seen:
                kept.append(entry)
                kept_olds.append(seen)
        return kept, kept_olds

    def write_through_oldest(self, count: int, expired: Container[bytes] = ()) -> None:
        """Write the ``count`` oldest dirty entries through and forward them now, as an eviction does (a window
        aggregate's windows that closed: nothing can change them any more, so holding them until the commit only
        delays them). Those whose keys are in ``expired`` are not written to the store below, as no read would return
        them (windows behind their store's expiry floor): only logged, when a changelog is below, and forwarded."""
        self._write_through(list(islice(self.cache.entries.items(), count)), expired)

    def forward_dirty(self, keys: Iterable[bytes]) -> None:
        """Forward the dirty entries of ``keys`` now, without writing them through: they stay cached and dirty, and
        the write-through that later writes them forwards them again, with what this forwarded as their old value
        (not at all if the entry did not change meanwhile); an entry equal to what the layers below hold is not
        forwarded. A window aggregate forwards so the windows of the record that closed others: they stay open
        (``TimestampedTypedWindowStore.flush_closed``)."""
        listener = self.listener
        if listener is None:
            return
        entries, forwarded, send_old = self.cache.entries, self._forwarded, self.send_old_values
        updates = []
        for key in keys:
            entry = entries.get(key)
            if entry is None:
                continue
            value, timestamp, headers, source = entry
            old = forwarded.get(key, MISSING)
            if old is MISSING:
                old = self._value_below(key)
            new = stored_bytes(value) if type(value) is CachedAggregate else value
            if new == old:
                continue
            forwarded[key] = new
            updates.append((source, key, value, old if send_old else None, timestamp, headers))
        if updates:
            self._forward(listener, updates)

    def write_batch(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        self.below_changed()
        self.wrapped.write_batch(entries)

    def below_changed(self) -> None:
        """The layers below change without the cache (a restore): forget what it knows of them (clean entries, the
        values read before writes)."""
        self.cache.drop_clean()
        self._below.clear()
        self._forwarded.clear()

    def range(self, lo: bytes | None, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        return self.wrapped.range(lo, hi)

    def prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        return self.wrapped.prefix(prefix)

    def pending(self) -> dict[bytes, bytes | None]:
        """The layers' pending writes, the cache's over the others' (copied: safe from other threads)."""
        pending = self.wrapped.pending()
        pending.update({key: stored_bytes(entry[0]) for key, entry in self.cache.entries.copy().items()})
        return pending

    def approximate_num_entries(self) -> int:
        return self.wrapped.approximate_num_entries() + len(self.cache)

    def flush(self) -> None:
        self.cache.flush(self._write_through)
        self._below.clear()  # every dirty entry took its own: what is left was read for a write that failed
        self._forwarded.clear()
        self.wrapped.flush()

    def close(self) -> None:
        """Close without flushing: a clean close flushed first (the task's suspend), so what is left is
        dropped (a dirty close), its bytes given back to the thread's budget."""
        self.cache.discard()
        self._below.clear()
        self._forwarded.clear()
        self.wrapped.close()
