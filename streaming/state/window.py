"""Window stores: values per (key, window start), each with a timestamp — Kafka Streams'
``TimestampedWindowStore`` — over the same layers as key-value stores::

    TimestampedTypedWindowStore   serdes, the window-store API
      -> CachingBytesStore        optional
        -> ChangeLoggingBytesStore    optional (changelog: compact,delete with retention.ms)
          -> SegmentedBytesStore      time segments: key prefixes of one RocksDB, or a memory store each

Bytes layout (Kafka Streams' ``WindowKeySchema``, also the changelog's key): the key's bytes, the
window start (8 bytes, big-endian) and a sequence number (4 bytes; 0 unless the store retains
duplicates). Values carry an 8-byte timestamp prefix in the layers, and the changelog holds the plain
value with the timestamp as the record's, as for timestamped key-value stores.

Retention: the store's observed stream time is the highest window start written to it (or restored into it).
Windows that start before ``observed stream time - retention + 1`` are expired: reads never return them,
whether or not their segment has been dropped yet (Kafka Streams' ``AbstractRocksDBSegmentedBytesStore``:
``getActualFrom`` raises the lower time bound of every fetch and ``all``, and ``get`` answers null for an
expired key). Session stores do the same by session end.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any

from streaming.serdes import Serde
from streaming.state.api import ValueAndTimestamp
from streaming.state.bytes_store import BytesStore, scan
from streaming.state.caching import IMMUTABLE_AGGREGATES, CachedAggregate, cached_aggregate
from streaming.state.layered import LayeredStore, TimestampedValues
from streaming.windows.window import Windowed, window_of, windowed_of

_LONG = struct.Struct(">q")
_START_SEQ = struct.Struct(">qi")
_SUFFIX = 12  # window start + sequence number
_MAX_TIME = (1 << 63) - 1
_value_and_timestamp = partial(tuple.__new__, ValueAndTimestamp)  # ValueAndTimestamp(v, t) without its Python call


def window_start_of(store_key: bytes) -> int:
    """The window start inside a window store's bytes key (the segmented store's timestamp)."""
    return _LONG.unpack_from(store_key, len(store_key) - _SUFFIX)[0]


class WindowedLayeredStore(LayeredStore):
    """What window and session stores add to the layers: their keys are ``Windowed`` (each store lays its bytes
    out in its own way: :meth:`_windowed`), and the stream thread's own keyed scans read back only the keys
    written since the last flush (:meth:`owned_scan`)."""

    def __init__(self, name: str, inner: BytesStore, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None,
                 logging_enabled: bool, caching_enabled: bool) -> None:
        super().__init__(name, inner, key_serde, value_serde, logging_enabled, caching_enabled)
        # Keys written since the last flush, by the record key's bytes: what the layers may still hold
        # unflushed. The stream thread's own keyed scans read these few back instead of copying every
        # layer's pending writes (see owned_scan). None: not tracked (no owner scans asked for: the point
        # reads of tumbling and hopping windows need none); complete once a flush follows the start of tracking.
        self._written: dict[bytes, set[bytes]] | None = None
        self._written_complete = False
        self._written_time = -1  # the highest segment time written through this store (cached writes included)
        self._retention: int = inner.retention_ms  # type: ignore[attr-defined]

    @property
    def retention_ms(self) -> int:
        """How long the store keeps a window (by window start; sessions: by end) behind its observed time."""
        return self._retention

    @property
    def observed_time(self) -> int:
        """The highest window start (sessions: end) written to or restored into the store; -1: none yet. Not
        persisted: after a restart it is learned again from the newest segment on disk, the restore and the
        writes that follow (Kafka Streams' segmented stores learn it from the restore and the writes)."""
        return max(self._written_time, self.inner.observed_time)  # type: ignore[attr-defined]

    def expiry_floor(self) -> int:
        """The earliest window start (sessions: end) that reads still return: ``observed time - retention + 1``
        (Kafka Streams' ``getActualFrom``); older windows are expired even while their segment still exists."""
        observed = self.inner.observed_time  # type: ignore[attr-defined]  # what the restore brought
        if self._written_time > observed:
            observed = self._written_time
        return 0 if observed < 0 else observed - self._retention + 1

    def _windowed(self, raw: bytes) -> Windowed:
        """The record key and window of a bytes key."""
        raise NotImplementedError

    def _flushed_keys(self) -> Callable[[bytes], Windowed]:
        return self._windowed

    def read_raw(self, lo: bytes | None, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """Serialized entries with keys in ``[lo, hi]``, every layer's pending writes included; never
        flushes, so other threads (interactive queries) may call it."""
        return scan(self._store, lo, hi)

    def track_owned_writes(self) -> None:
        """Track the keys written from now on, for :meth:`owned_scan` (operators that scan call it before
        their first write)."""
        if self._written is None:
            self._written = {}
            self._written_complete = True

    def owned_scan(self, raw_key: bytes, lo: bytes, hi: bytes) -> list[tuple[bytes, bytes]]:
        """Entries with keys in ``[lo, hi]``, all of record key ``raw_key``, for the stream thread that owns
        the store only: the inner store's scan with this key's writes since the last flush read back
        through the layers. Costs the writes of one key, not every pending write of the store. Until the
        writes are tracked (:meth:`track_owned_writes`, or the first flush after the first owner scan) it
        reads every layer's pending writes instead."""
        if not self._written_complete:
            if self._written is None:
                self._written = {}  # tracked from now on: complete after the next flush
            return list(self.read_raw(lo, hi))
        found = dict(self.inner.range(lo, hi))
        written = self._written.get(raw_key)  # type: ignore[union-attr]  # complete: tracked
        if written:
            get = self._store.get
            for store_key in written:
                if lo <= store_key <= hi:
                    value = get(store_key)
                    if value is None:
                        found.pop(store_key, None)
                    else:
                        found[store_key] = value
        return sorted(found.items())

    def _track(self, raw_key: bytes, store_key: bytes) -> None:
        tracked = self._written
        if tracked is None:
            return
        written = tracked.get(raw_key)
        if written is None:
            tracked[raw_key] = {store_key}
        else:
            written.add(store_key)

    def flush(self) -> None:
        super().flush()
        if self._written is not None:
            self._written.clear()
            self._written_complete = True

    def close(self) -> None:
        super().close()
        if self._written is not None:
            self._written.clear()


class TimestampedTypedWindowStore(TimestampedValues, WindowedLayeredStore):
    """A window store (see the module doc). ``put(key, value, window_start)`` (None deletes) and
    ``fetch(key, window_start)`` address one window; ``fetch(key, time_from, time_to)``, ``fetch_range``,
    ``fetch_all`` and ``all`` scan by window start (both bounds inclusive). ``window_size_ms`` gives the
    end of the windows that scans return. With ``retain_duplicates`` every put adds an entry (join
    buffers), and a None value is ignored."""

    def __init__(self, name: str, inner: BytesStore, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None,
                 window_size_ms: int, retain_duplicates: bool = False, logging_enabled: bool = True,
                 caching_enabled: bool = False) -> None:
        super().__init__(name, inner, key_serde, value_serde, logging_enabled, caching_enabled)
        self.window_size_ms = window_size_ms
        self.retain_duplicates = retain_duplicates
        self._seq = 0

    def _windowed(self, raw: bytes) -> Windowed:
        start = _LONG.unpack_from(raw, len(raw) - _SUFFIX)[0]
        return windowed_of((self._kde(raw[:-_SUFFIX]), window_of((start, start + self.window_size_ms))))

    # -- writes ---------------------------------------------------------------------------------------------------
    def put(self, key: Any, value: Any, window_start: int) -> None:
        """Store ``value`` for ``key``'s window starting at ``window_start``, with the current record's
        timestamp; None deletes the window (ignored when the store retains duplicates)."""
        self.put_with_timestamp(key, value, self._timestamp(), window_start)

    def put_with_timestamp(self, key: Any, value: Any, timestamp: int, window_start: int, headers: Any = None) -> None:
        if value is None and self.retain_duplicates:
            return
        self.put_serialized(self._key(key), value, timestamp, window_start, headers)

    def put_serialized(self, raw_key: bytes, value: Any, timestamp: int, window_start: int,
                       headers: Any = None) -> None:
        """:meth:`put_with_timestamp` for a key already serialized (:meth:`key_bytes`). With a record cache, an immutable
        value (a number or a string) is cached as a :class:`~streaming.state.caching.CachedAggregate`, which
        :meth:`owned_updater` reads back as it is."""
        if self.retain_duplicates:
            if value is None:
                return
            self._seq = seq = (self._seq + 1) & 0x7FFFFFFF
        else:
            seq = 0
        if window_start > self._written_time:
            self._written_time = window_start
        store_key = raw_key + _START_SEQ.pack(window_start, seq)
        if self._written is not None:
            self._track(raw_key, store_key)
        self._store.put(store_key, self._stored(value, timestamp), timestamp, headers)

    def _stored(self, value: Any, timestamp: int) -> bytes | CachedAggregate | None:
        """What the layers take for ``value`` written at ``timestamp``: None (a delete); with a record cache, an
        immutable value (a number or a string) as a :class:`~streaming.state.caching.CachedAggregate`; else the
        timestamp, then the value serialized."""
        if value is None:
            return None
        if self._caching is not None and type(value) in IMMUTABLE_AGGREGATES:
            return cached_aggregate((value, timestamp, self._vser(value)))
        return _LONG.pack(timestamp) + self._vser(value)

    def flush_closed(self, until_start: int, raw_key: bytes | None = None, starts: Iterable[int] = ()) -> None:
        """Write through and forward now the cached windows that start at or before ``until_start`` (the caller's
        closed windows), oldest write first, up to the first cached window that starts later (the rest wait for the
        commit). Then it forwards the cached windows of ``raw_key`` (serialized) that start at ``starts``, without
        writing them through (:meth:`CachingBytesStore.forward_dirty`): the record that closed the others. So a node
        downstream that keeps its own stream time (a ``suppress(until_window_closes)``) moves it as that record does
        and emits the closed windows' finals now, as it would without a cache, not one window later. Those windows
        stay open and cached: writing them through would open a new segment at every window's close. The segments
        behind the expiry floor are dropped now (reads skip them already), not at the next write. No-op without a
        record cache.

        A window that starts before the store's expiry floor is logged to the changelog and forwarded, but not
        written to the store: no read returns it any more (Kafka Streams' ``getActualFrom``: reads begin at
        ``observed time - retention + 1``), nor after a restart (the newest segment, or the restore, brings back the
        later window that moved the floor). Kafka Streams' segmented store drops writes the same way, by segment
        rather than by window, and its changelog still gets them. With grace 0 and the default retention (size +
        grace), that is every tumbling window as it closes, once the record that closed it is cached: the caller
        flushes after caching it. Such a window needs no segment opened for it, and an earlier value the store held
        for it (a commit wrote it while the window was open) stays there, unread, until its segment is dropped."""
        caching = self._caching
        if caching is None:
            return
        unpack, floor, count, expired = _LONG.unpack_from, self.expiry_floor(), 0, set()
        for key in caching.cache.entries:
            start = unpack(key, len(key) - _SUFFIX)[0]
            if start > until_start:
                break
            count += 1
            if start < floor:
                expired.add(key)
        if count:
            caching.write_through_oldest(count, expired)
        self.inner.observe(self._written_time)  # type: ignore[attr-defined]
        if raw_key is not None:
            caching.forward_dirty([raw_key + _START_SEQ.pack(start, 0) for start in starts])

    # -- reads ----------------------------------------------------------------------------------------------------
    def key_bytes(self, key: Any) -> bytes:
        """``key`` serialized, as the store's keys begin (for :meth:`fetch_serialized`, :meth:`put_serialized`:
        an operator that reads and writes a key's windows serializes it once)."""
        return self._key(key)

    def key_serializer(self) -> Callable[[Any], bytes]:
        """:meth:`key_bytes` for keys that are not None, as one function (a C function for the built-in serdes)."""
        return self._kser

    def fetch_with_timestamp(self, key: Any, window_start: int) -> ValueAndTimestamp | None:
        return self.fetch_serialized(self._key(key), window_start)

    def fetch_serialized(self, raw_key: bytes, window_start: int) -> ValueAndTimestamp | None:
        """:meth:`fetch_with_timestamp` for a key already serialized (:meth:`key_bytes`)."""
        if window_start < self.expiry_floor():
            return None
        data = self._store.get(raw_key + _START_SEQ.pack(window_start, 0))
        return None if data is None else _value_and_timestamp((self._vde(data[8:]), _LONG.unpack_from(data)[0]))

    def owned_updater(self, step: Callable[[Any, Any, Any], Any]) -> Callable[[Any, bytes, Any, int, int, Any], None]:
        """``update(key, raw_key, value, timestamp, window_start, headers)`` for the stream thread that owns a store with
        a record cache (the DSL's time-window aggregates; after :meth:`init`): read the window (None when absent or
        expired), aggregate the record into it with ``step(key, value, old aggregate or None)``, and cache the result
        with the window's newest record timestamp (``max(timestamp, the old one's)``), as :meth:`fetch_serialized`
        then :meth:`put_serialized` would, in one call. A window cached as an object
        (:class:`~streaming.state.caching.CachedAggregate`, an immutable aggregate) is read as it is; bytes are
        deserialized, so ``step`` gets its own copy and one that fails leaves the window as it was. A read that goes
        below the record cache is kept for the flush of that write (:meth:`CachingBytesStore.read_below`), so the old
        value is not read twice."""
        caching = self._caching
        if caching is None or self.retain_duplicates:
            raise ValueError(f"store {self.name!r}: owned_updater needs a record cache and no duplicates")
        entries, read_below, cache_put = caching.cache.entries, caching.read_below, caching.cache.put
        inner, retention, pack, unpack = self.inner, self._retention, _START_SEQ.pack, _LONG.unpack_from
        vde, stored = self._vde, self._stored

        def update(key: Any, raw_key: bytes, value: Any, timestamp: int, window_start: int, headers: Any) -> None:
            store_key = raw_key + pack(window_start, 0)
            # window_start < expiry_floor(), inlined (window starts are never negative): an expired window reads None
            if window_start + retention <= self._written_time or window_start + retention <= inner.observed_time:
                data = None
            else:
                entry = entries.get(store_key)
                data = entry[0] if entry is not None else read_below(store_key)
            if data is None:
                new = step(key, value, None)
            elif type(data) is CachedAggregate:
                new = step(key, value, data[0])
                if data[1] > timestamp:  # type: ignore[index]
                    timestamp = data[1]  # type: ignore[index]
            else:
                new = step(key, value, vde(data[8:]))  # type: ignore[index]
                old_timestamp = unpack(data)[0]  # type: ignore[arg-type]
                if old_timestamp > timestamp:
                    timestamp = old_timestamp
            if window_start > self._written_time:
                self._written_time = window_start
            if self._written is not None:
                self._track(raw_key, store_key)
            cache_put(store_key, stored(new, timestamp), timestamp, headers)
        return update

    def fetch(self, key: Any, time_from: int, time_to: int | None = None) -> Any:
        """``fetch(key, window_start)``: the value of one window (or None). ``fetch(key, time_from,
        time_to)``: ``(window_start, value)`` for the key's windows starting in ``[time_from, time_to]``,
        earliest first. Expired windows are never returned (see the module doc)."""
        if time_to is None:
            found = self.fetch_with_timestamp(key, time_from)
            return None if found is None else found.value
        return ((start, value.value) for start, value in self.fetch_timestamped(key, time_from, time_to))

    def fetch_timestamped(self, key: Any, time_from: int, time_to: int, owner: bool = False
                          ) -> Iterator[tuple[int, ValueAndTimestamp]]:
        """``(window_start, ValueAndTimestamp)`` for ``key``'s windows starting in ``[time_from, time_to]``.
        ``owner=True``: called by the stream thread that owns the store (the DSL's operators), which may
        take the cheaper :meth:`owned_scan`; other threads must not."""
        raw = self._key(key)
        time_from = max(time_from, self.expiry_floor())
        if time_to < time_from:
            return
        size = len(raw) + _SUFFIX
        lo = raw + _START_SEQ.pack(max(time_from, 0), 0)
        hi = raw + _START_SEQ.pack(min(time_to, _MAX_TIME), 0x7FFFFFFF)
        vde, unpack = self._vde, _LONG.unpack_from
        entries = self.owned_scan(raw, lo, hi) if owner else self.read_raw(lo, hi)
        for found, data in entries:
            if len(found) == size and found.startswith(raw):
                yield unpack(found, size - _SUFFIX)[0], ValueAndTimestamp(vde(data[8:]), unpack(data)[0])

    def fetch_range(self, key_from: Any, key_to: Any, time_from: int, time_to: int) -> Iterator[tuple[Windowed, Any]]:
        """``(Windowed(key, window), value)`` for keys in ``[key_from, key_to]`` (serialized order; None:
        open) and windows starting in ``[time_from, time_to]``."""
        lo_key = None if key_from is None else self._key(key_from)
        hi_key = None if key_to is None else self._key(key_to)
        return self._scan(lo_key, hi_key, time_from, time_to)

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[tuple[Windowed, Any]]:
        """Every window starting in ``[time_from, time_to]``."""
        return self._scan(None, None, time_from, time_to)

    def all(self) -> Iterator[tuple[Windowed, Any]]:
        return self._scan(None, None, 0, _MAX_TIME)

    def _scan(self, lo_key: bytes | None, hi_key: bytes | None, time_from: int, time_to: int
              ) -> Iterator[tuple[Windowed, Any]]:
        time_from = max(time_from, self.expiry_floor())
        if time_to < time_from:
            return
        lo = None if lo_key is None else lo_key + _START_SEQ.pack(max(time_from, 0), 0)
        hi = None if hi_key is None else hi_key + _START_SEQ.pack(min(time_to, _MAX_TIME), 0x7FFFFFFF)
        windowed, value = self._windowed, self._value_of
        for raw, data in self.read_raw(lo, hi):
            key_bytes = raw[:-_SUFFIX]
            if (lo_key is not None and key_bytes < lo_key) or (hi_key is not None and key_bytes > hi_key):
                continue
            if time_from <= window_start_of(raw) <= time_to:
                yield windowed(raw), value(data)

    def __repr__(self) -> str:
        return f"<WindowStore {self.name!r} over {type(self.inner).__name__}>"
