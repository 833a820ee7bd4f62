"""Windowed aggregations: ``count``, ``reduce`` and ``aggregate`` of a stream grouped and windowed by
``TimeWindows`` (tumbling, hopping), ``SessionWindows`` or ``SlidingWindows``, into a window or session
store, forwarding ``Change(new, old)`` keyed by ``Windowed(key, window)``.

Closing (Kafka Streams 3.x): stream time is the aggregation's own observed stream time — the highest
timestamp of the records that reached it, this record's included (``observedStreamTime`` of
``AbstractKStreamTimeWindowAggregateProcessor`` and ``KStreamSessionWindowAggregate``), not the task's: a
record an upstream ``filter`` removed, or a table update in the same task, never closes a window here.
Records dropped for a None key or value do not move it. It is kept with every commit and a restarted task
goes on from it (:meth:`~streaming.processor.ProcessorContext.observed_stream_time`, keyed by the store).

A time window is closed once ``end <= stream time - grace`` (``KStreamWindowAggregate``: updated while
``windowEnd > closeTime``); a session once ``end < stream time - grace - gap``
(``KStreamSessionWindowAggregate``); a sliding window once ``end < stream time - grace``: its end is
inclusive, so a window ending exactly at the close time still takes the record
(``KStreamSlidingWindowAggregate.updateWindowAndForward``: ``windowEnd >= closeTime``), which with grace 0
is every in-order record's own left window. A record is dropped from
each closed window it falls in: the task's ``dropped_records`` counts it (once per closed window, as
Kafka Streams' dropped-records sensor), a debug log names its topic, partition and offset, and if the
windowing was given a ``late_records_topic`` the record goes there (once, as it came in).

Result timestamps: the highest record timestamp in the window (``max(record, previous aggregate)``);
a session's is its end, which is the same thing.

With a record cache, a time window's cached update is written through and forwarded when the window closes (when
stream time - grace first reaches its end: the oldest cached writes, up to the first of a window still open), not
only at the next commit or eviction. Nothing can change a closed window, so this forwards the same record the
commit would, sooner, and a close has only the open windows left to flush. Kafka Streams holds them until the commit
(``CachingWindowStore``); session and sliding windows here still do. The windows a record closes are flushed after
the record's own windows are cached, so the store's expiry floor counts it: those it puts behind the floor (with
grace 0 and the default retention, every tumbling window as it closes) are logged and forwarded but not written to
the store, as no read would return them (:meth:`~streaming.state.window.TimestampedTypedWindowStore.flush_closed`).

The closing record's own windows are forwarded right after the windows it closed (they stay cached and open; the
first record since the task started closes none). A ``suppress(until_window_closes)`` downstream keeps its own stream
time, the highest timestamp that reached it (``KTableSuppressProcessor``), and the closed windows' records are all
older than their end: it is the closing record's update that moves it past them. So the finals go out at the record
that closes their window, as without a cache (for tumbling windows the same records in the same order: tested
against an uncached run), not when a later window closes or at the commit. With hopping windows, a closed window
cached after one still open waits for the commit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streaming.dsl.change import Change, changed
from streaming.runtime.context import fan_out
from streaming.topology.nodes import Emit
from streaming.windows.specs import SessionWindows, SlidingWindows, TimeWindows
from streaming.windows.window import Window, Windowed, window_of, windowed_of

Step = Callable[[Any, Any, Any], Any]  # step(key, value, old aggregate or None) -> new aggregate
_NOT_YET = -(1 << 63)  # when the next window closes, before the first record


def aggregation_step(kind: str, initializer: Callable[[], Any] | None, function: Callable[..., Any] | None) -> Step:
    """The update of one aggregate by one value, for ``count``, ``reduce`` or ``aggregate``."""
    if kind == "count":
        return lambda key, value, old: 1 if old is None else old + 1
    if kind == "reduce":
        assert function is not None
        return lambda key, value, old: value if old is None else function(old, value)
    if kind == "aggregate":
        assert function is not None and initializer is not None
        return lambda key, value, old: function(key, value, initializer() if old is None else old)
    raise ValueError(f"unknown aggregation {kind!r}")


class _WindowedOperator:
    """An aggregation node owning window/session store ``store_name``; ``late_sink`` is the name of its
    child sink for late records, if the user asked for one."""

    def __init__(self, store_name: str, late_sink: str | None) -> None:
        self.store_name = store_name
        self.late_sink = late_sink
        self.send_old_values = False

    def _connect(self, children: dict[str, Emit], context: Any) -> tuple[Any, Emit, Emit | None, bool]:
        """The store, the downstream function, the late-records sink, whether the store caches."""
        store = context.get_state_store(self.store_name)
        late = children.get(self.late_sink) if self.late_sink is not None else None
        downstream = fan_out([emit for name, emit in children.items() if name != self.late_sink])

        cached = store.set_flush_listener(downstream, self.send_old_values)
        return store, downstream, late, cached


class TimeWindowAggregate(_WindowedOperator):
    """Tumbling and hopping windows (Kafka Streams' ``KStreamWindowAggregate``): a record updates every
    open window containing it (see the module doc for closing and timestamps)."""

    def __init__(self, store_name: str, windows: TimeWindows, kind: str, initializer: Callable[[], Any] | None = None,
                 function: Callable[..., Any] | None = None, late_sink: str | None = None) -> None:
        super().__init__(store_name, late_sink)
        self.windows = windows
        self.step = aggregation_step(kind, initializer, function)

    @property
    def close_delay_ms(self) -> int:
        """How long after a window's end it closes (what ``suppress(until_window_closes)`` waits)."""
        return self.windows.grace_ms

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        store, downstream, late, cached = self._connect(children, context)
        observed = context.observed_stream_time(self.store_name)
        key_bytes, drop, step = store.key_serializer(), context.record_dropped, self.step
        send_old, grace = self.send_old_values, self.windows.grace_ms
        size, advance = self.windows.size_ms, self.windows.advance_ms
        windows_for = self.windows.windows_for
        # With a record cache, windows that close are written through and forwarded as they close, not at the next
        # commit (see the module doc): when stream time - grace reaches the end of the next window to close.
        flush_closed = store.flush_closed if cached else None
        next_close = [_NOT_YET]

        def windows_closed(close: int, raw: bytes, starts: list[int]) -> None:
            """Forward the cached windows that ``close`` closed, then the closing record's windows (``raw``: its key
            serialized; ``starts``: its windows), as the store's ``flush_closed`` does. The first record since the
            task started closes none: it sets when the next window closes."""
            if next_close[0] != _NOT_YET:  # every window starting at close - size or before ends by close
                flush_closed(close - size, raw, starts)  # type: ignore[misc]
            next_close[0] = max(((close - size) // advance + 1) * advance, 0) + size  # windows start at 0 or later

        if cached:  # the flush forwards the window: read, aggregate and cache in one call
            update = store.owned_updater(step)
        else:
            fetch, put = store.fetch_serialized, store.put_serialized

            def update(key: Any, raw: bytes, value: Any, timestamp: int, start: int, headers: Any) -> None:
                """Aggregate the record into its open window starting at ``start`` (``raw``: the key serialized) and
                forward the update."""
                old = fetch(raw, start)
                if old is None:
                    new, new_timestamp = step(key, value, None), timestamp
                else:
                    new = step(key, value, old.value)
                    new_timestamp = max(timestamp, old.timestamp)
                put(raw, new, new_timestamp, start, headers)
                downstream(windowed_of((key, window_of((start, start + size)))),
                           changed((new, old.value if send_old and old is not None else None)), new_timestamp, headers)

        def late_record(timestamp: int, start: int, end: int, close: int) -> None:
            drop(f"record at {timestamp} for closed window [{start}, {end}) (stream time - grace = {close})", late=True)

        if size == advance:
            def tumbling_window_aggregate(key: Any, value: Any, timestamp: int, headers: Any) -> None:
                """:func:`time_window_aggregate` for the one window of a tumbling record."""
                if key is None or value is None:
                    drop("null key" if key is None else "null value")
                    return
                start = timestamp - timestamp % size
                if timestamp > observed.time:  # never late: its window ends after it
                    observed.time = timestamp
                    raw = key_bytes(key)
                    update(key, raw, value, timestamp, start, headers)
                    if flush_closed is not None and timestamp - grace >= next_close[0]:
                        windows_closed(timestamp - grace, raw, [start])  # after the record's window is cached: see the doc
                    return
                if start + size <= observed.time - grace:
                    late_record(timestamp, start, start + size, observed.time - grace)
                    if late is not None:
                        late(key, value, timestamp, headers)
                    return
                update(key, key_bytes(key), value, timestamp, start, headers)
            return tumbling_window_aggregate

        def time_window_aggregate(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            if key is None or value is None:
                drop("null key" if key is None else "null value")
                return
            advanced = timestamp > observed.time
            if advanced:
                observed.time = timestamp
            close = observed.time - grace
            dropped = False
            raw = None  # serialized once, for the first open window
            for start, end in windows_for(timestamp):
                if end <= close:
                    late_record(timestamp, start, end, close)
                    dropped = True
                    continue
                if raw is None:
                    raw = key_bytes(key)
                update(key, raw, value, timestamp, start, headers)
            if advanced and flush_closed is not None and timestamp - grace >= next_close[0]:
                # After the record's own windows are cached (see the doc). A record that moves stream time has an open
                # window (each of its windows ends after it), so raw is set.
                windows_closed(close, raw, [start for start, end in windows_for(timestamp) if end > close])  # type: ignore[arg-type]
            if dropped and late is not None:
                late(key, value, timestamp, headers)
        return time_window_aggregate


class SessionWindowAggregate(_WindowedOperator):
    """Session windows (Kafka Streams' ``KStreamSessionWindowAggregate``). A record at ``t`` finds the
    key's sessions within ``gap`` of it; they and the record merge into one session (``merger(key,
    agg1, agg2)`` combines their aggregates, then the record is aggregated in). Every session merged
    away is removed from the store and retracted downstream with a tombstone (``Change(None, old)``)
    before the merged session is forwarded. A record whose merged session would already be closed is
    dropped (see the module doc)."""

    def __init__(self, store_name: str, windows: SessionWindows, kind: str, initializer: Callable[[], Any] | None,
                 function: Callable[..., Any] | None, merger: Callable[[Any, Any, Any], Any] | None,
                 late_sink: str | None = None) -> None:
        super().__init__(store_name, late_sink)
        self.windows = windows
        self.step = aggregation_step(kind, initializer, function)
        # Merging starts from the initializer for ``aggregate`` (as Kafka Streams); count and reduce
        # start from the first session's aggregate.
        self.merge_start = initializer if kind == "aggregate" else None
        if merger is None:  # count and reduce merge like they aggregate
            merger = (lambda key, a, b: a + b) if kind == "count" else (lambda key, a, b: function(a, b))  # type: ignore[misc]
        self.merger = merger

    @property
    def close_delay_ms(self) -> int:
        return self.windows.grace_ms + self.windows.gap_ms

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        store, downstream, late, cached = self._connect(children, context)
        store.track_owned_writes()  # its keyed scans read the key's unflushed writes back
        observed = context.observed_stream_time(self.store_name)
        find, put, drop = store.find_sessions, store.put, context.record_dropped
        step, merger, send_old = self.step, self.merger, self.send_old_values
        gap, delay, merge_start = self.windows.gap_ms, self.close_delay_ms, self.merge_start

        def session_aggregate(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            if key is None or value is None:
                drop("null key" if key is None else "null value")
                return
            if timestamp > observed.time:
                observed.time = timestamp
            close = observed.time - delay
            start = end = timestamp
            merged = list(find(key, timestamp - gap, timestamp + gap, True))
            aggregate = merge_start() if merge_start is not None and merged else None
            for session, session_aggregate in merged:
                aggregate = session_aggregate if aggregate is None else merger(key, aggregate, session_aggregate)
                start = min(start, session[1][0])
                end = max(end, session[1][1])
            if end < close:
                drop(f"record at {timestamp} for closed session [{start}, {end}] (stream time - grace - gap = {close})",
                     late=True)
                if late is not None:
                    late(key, value, timestamp, headers)
                return
            window = Window(start, end)
            for session, session_aggregate in merged:
                if session[1] == window:
                    continue  # the record falls inside this session: it is updated, not retracted
                put(session, None, headers)
                if not cached:
                    downstream(session, Change(None, session_aggregate if send_old else None), session[1][1], headers)
            previous = next((a for s, a in merged if s[1] == window), None)
            new = step(key, value, aggregate)
            put(Windowed(key, window), new, headers)
            if not cached:
                downstream(Windowed(key, window), Change(new, previous if send_old else None), end, headers)
        return session_aggregate


class SlidingWindowAggregate(_WindowedOperator):
    """Sliding windows (KIP-450, Kafka Streams' ``KStreamSlidingWindowAggregate``). For a record at ``t``
    the key's windows starting in ``[t - 2 * max_difference, t + 1]`` are read: every open one that
    contains ``t`` is updated; the record's own left window ``[t - d, t]`` is created (from the
    aggregate of the window just before it when that window's records reach into it), as are the right
    window of the previous record (``[prev + 1, prev + 1 + d]``, if ``t`` falls in it) and the record's
    own right window (a copy of the aggregate of the later records within ``d``). Records earlier than
    ``d`` share the window ``[0, d]``. A record whose right window ``[t + 1, t + 1 + d]`` is already
    closed (``t + 1 + d <= stream time - grace``) is dropped whole; otherwise each closed window it would
    update (``end < stream time - grace``) counts one drop."""

    def __init__(self, store_name: str, windows: SlidingWindows, kind: str, initializer: Callable[[], Any] | None,
                 function: Callable[..., Any] | None, late_sink: str | None = None) -> None:
        super().__init__(store_name, late_sink)
        self.windows = windows
        self.step = aggregation_step(kind, initializer, function)

    @property
    def close_delay_ms(self) -> int:
        return self.windows.grace_ms

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        store, downstream, late, cached = self._connect(children, context)
        store.track_owned_writes()  # its keyed scans read the key's unflushed writes back
        observed = context.observed_stream_time(self.store_name)
        fetch, put, drop = store.fetch_timestamped, store.put_with_timestamp, context.record_dropped
        step, send_old = self.step, self.send_old_values
        diff, grace = self.windows.time_difference_ms, self.windows.grace_ms

        def update(key: Any, value: Any, timestamp: int, headers: Any, start: int, old: Any, old_timestamp: int,
                   close: int) -> bool:
            """Aggregate the record into window ``[start, start + diff]`` holding ``old`` (None: empty)."""
            end = start + diff
            if end < close:
                drop(f"record at {timestamp} for closed sliding window [{start}, {end}] (stream time - grace = {close})",
                     late=True)
                return False
            new = step(key, value, old)
            new_timestamp = max(timestamp, old_timestamp)
            put(key, new, new_timestamp, start, headers)
            if not cached:
                downstream(Windowed(key, Window(start, end)), Change(new, old if send_old else None), new_timestamp,
                           headers)
            return True

        def copy_right_window(key: Any, timestamp: int, aggregate: Any, aggregate_timestamp: int, headers: Any) -> None:
            start = timestamp + 1
            put(key, aggregate, aggregate_timestamp, start, headers)
            if not cached:
                downstream(Windowed(key, Window(start, start + diff)), Change(aggregate, None), aggregate_timestamp,
                           headers)

        def early(key: Any, value: Any, timestamp: int, headers: Any, close: int) -> bool:
            """A record before ``diff``: it goes into ``[0, diff]`` and the right windows after it."""
            combined = right = previous = None
            right_created = False
            starts = set()
            complete = True
            for start, found in list(fetch(key, 0, timestamp + 1, True)):
                starts.add(start)
                if start == 0:
                    combined = found
                    if found.timestamp < timestamp:
                        previous = found.timestamp
                elif start <= timestamp:
                    right = found
                    complete &= update(key, value, timestamp, headers, start, found.value, found.timestamp, close)
                elif start == timestamp + 1:
                    right_created = True
            if right is None and combined is not None and combined.timestamp > timestamp:
                right = combined
            if not right_created and right is not None and right.timestamp > timestamp:
                copy_right_window(key, timestamp, right.value, right.timestamp, headers)
            if previous is not None and previous + 1 not in starts:
                complete &= update(key, value, timestamp, headers, previous + 1, None, timestamp, close)
            if combined is None:
                complete &= update(key, value, timestamp, headers, 0, None, timestamp, close)
            else:
                complete &= update(key, value, timestamp, headers, 0, combined.value, combined.timestamp, close)
            return complete

        def sliding_window_aggregate(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            if key is None or value is None:
                drop("null key" if key is None else "null value")
                return
            if timestamp > observed.time:
                observed.time = timestamp
            close = observed.time - grace
            if timestamp + 1 + diff <= close:
                drop(f"record at {timestamp} for closed sliding windows (stream time - grace = {close})",
                     late=True)
                if late is not None:
                    late(key, value, timestamp, headers)
                return
            if timestamp < diff:
                if not early(key, value, timestamp, headers, close) and late is not None:
                    late(key, value, timestamp, headers)
                return
            left = right = previous = None
            left_created = right_created = False
            starts = set()
            complete = True
            for start, found in list(fetch(key, max(0, timestamp - 2 * diff), timestamp + 1, True)):
                starts.add(start)
                end = start + diff
                if end < timestamp:
                    left, previous = found, found.timestamp
                elif end == timestamp:
                    left_created = True
                    if found.timestamp < timestamp:
                        previous = found.timestamp
                    complete &= update(key, value, timestamp, headers, start, found.value, found.timestamp, close)
                elif start <= timestamp:
                    right = found
                    complete &= update(key, value, timestamp, headers, start, found.value, found.timestamp, close)
                elif start == timestamp + 1:
                    right_created = True
            if previous is not None and previous + 1 not in starts and previous + 1 + diff >= timestamp:
                complete &= update(key, value, timestamp, headers, previous + 1, None, timestamp, close)
            if not left_created:
                base = left.value if left is not None and previous is not None and timestamp - diff <= previous \
                    else None
                complete &= update(key, value, timestamp, headers, timestamp - diff, base, timestamp, close)
            if not right_created and right is not None and right.timestamp > timestamp:
                copy_right_window(key, timestamp, right.value, right.timestamp, headers)
            if not complete and late is not None:
                late(key, value, timestamp, headers)
        return sliding_window_aggregate
