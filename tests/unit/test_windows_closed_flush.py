"""A cached time-window aggregate forwards a window's update when the window closes, not at the next commit
(``streaming.dsl.window_aggregate``), checked record by record against a model, with no commit in between.

The rule of closing is Kafka Streams' (``KStreamWindowAggregate``: a window is closed once ``end <= stream time -
grace``); what this adds is when the cache forwards. The model: when a record moves stream time - grace to or past the
end of the next window to close (the first record since the start closes none), the cached windows that closed are
forwarded, oldest write first up to the first cached window still open, and then the record's own windows, with
their counts then; a commit forwards every cached window. So every closed window that got records has been forwarded
with its final count, once since its last update. A ``suppress(until_window_closes)`` downstream (modelled as
Kafka Streams' ``KTableSuppressProcessor``: its stream time is the highest timestamp of what reached it, and it emits
a window once ``end <= that - grace``) therefore emits each final at the record that closes the window, as it would
without a cache. With hopping windows, the forwarded windows are closed and final, or the closing record's own.
"""

from __future__ import annotations

import struct
from collections import Counter

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message

from streaming import Materialized, Serdes, StreamsBuilder, Suppressed, TimeWindows
from streaming.runtime import checkpoint
from streaming.testing.driver import TopologyTestDriver

SIZE = 60_000


def driver(windows: TimeWindows, suppress: bool, cache_bytes: int = 10 << 20) -> TopologyTestDriver:
    builder = StreamsBuilder()
    counts = (builder.stream("in", key_serde=Serdes.String(), value_serde=Serdes.String()).group_by_key()
              .windowed_by(windows).count(materialized="counts"))
    if suppress:
        counts = counts.suppress(Suppressed.until_window_closes())
    counts.to_stream().to("out", value_serde=Serdes.Long())
    return TopologyTestDriver(builder.build(), {"statestore.cache.max.bytes": str(cache_bytes)})


def process(test_driver: TopologyTestDriver, offset: int, key: str, timestamp: int) -> None:
    """One record through the task, with no commit after it (the driver's pipe commits after every record)."""
    message = Message(topic="in", partition=0, offset=offset, key=key.encode(), value=b"v",
                      timestamp=(TIMESTAMP_CREATE_TIME, timestamp))
    test_driver._tasks[0].process_messages([message])


def forwarded(test_driver: TopologyTestDriver) -> list[tuple[tuple[str, int], int | None]]:
    """((key, window start), count) of every record written to ``out`` so far (a windowed key: key bytes + start)."""
    return [((r.key[:-8].decode(), struct.unpack(">q", r.key[-8:])[0]),
             None if r.value is None else struct.unpack(">q", r.value)[0])
            for r in test_driver._collector.outputs["out"]]


RECORDS = [("a", 0), ("a", 10), ("b", 59_999), ("a", 60_000), ("b", 61_000), ("c", 65_000), ("a", 119_999),
           ("b", 120_000), ("c", 121_000), ("a", 130_000), ("b", 185_000), ("a", 300_000)]


class NextClose:
    """When the aggregate forwards closed windows (see the module doc): at a record that moves stream time - grace to or
    past the end of the next window to close; the first record since the start closes none."""

    def __init__(self, size: int, advance: int) -> None:
        self.size, self.advance = size, advance
        self.at: int | None = None  # the end of the next window to close

    def passed(self, advanced: bool, close: int) -> bool:
        if not advanced or (self.at is not None and close < self.at):
            return False
        first = self.at is None
        self.at = max(((close - self.size) // self.advance + 1) * self.advance, 0) + self.size
        return not first


class ForwardModel:
    """What the cached tumbling aggregate forwards (see the module doc), and what a suppress downstream emits of it."""

    def __init__(self, grace: int) -> None:
        self.grace = grace
        self.counts: Counter[tuple[str, int]] = Counter()
        self.latest: dict[tuple[str, int], int] = {}  # a window's result timestamp: its highest record timestamp
        self.cached: dict[tuple[str, int], None] = {}  # windows written since they were last forwarded, write order
        self.stream_time = -1
        self.next_close = NextClose(SIZE, SIZE)
        self.forwarded: list[tuple[tuple[str, int], int]] = []
        self.sent: dict[tuple[str, int], int] = {}  # windows forwarded early, still cached: the count sent
        self.suppress_time = -1
        self.held: dict[tuple[str, int], int] = {}
        self.finals: list[tuple[tuple[str, int], int]] = []

    def record(self, key: str, timestamp: int) -> None:
        advanced = timestamp > self.stream_time
        self.stream_time = max(self.stream_time, timestamp)
        window = (key, timestamp - timestamp % SIZE)
        close = self.stream_time - self.grace
        if window[1] + SIZE <= close:
            return  # late: dropped
        self.counts[window] += 1
        self.latest[window] = max(self.latest.get(window, -1), timestamp)
        self.cached.pop(window, None)
        self.cached[window] = None
        if not self.next_close.passed(advanced, close):
            return
        closed = []
        for cached in self.cached:
            if cached[1] > close - SIZE:
                break
            closed.append(cached)
        for each in closed:
            self.forward(each)
        self.forward(window, early=True)

    def commit(self) -> None:
        for window in list(self.cached):
            self.forward(window)

    def forward(self, window: tuple[str, int], early: bool = False) -> None:
        """Forward the window's count: written through (it leaves the cache), or ``early``, the closing record's
        window, which stays cached; a write-through does not forward again what an early forward sent unchanged."""
        sent = self.sent.pop(window, None)
        if early:
            self.sent[window] = self.counts[window]
        else:
            del self.cached[window]
        if sent == self.counts[window]:
            return
        self.forwarded.append((window, self.counts[window]))
        self.held[window] = self.counts[window]
        self.suppress_time = max(self.suppress_time, self.latest[window])
        # by buffer time (the window's end), then key bytes
        for due in sorted((w for w in self.held if w[1] + SIZE <= self.suppress_time - self.grace),
                          key=lambda w: (w[1], w[0].encode())):
            self.finals.append((due, self.held.pop(due)))


@pytest.mark.parametrize("grace", [0, 5_000, 60_000])
@pytest.mark.parametrize("suppress", [False, True])
def test_a_tumbling_window_is_forwarded_once_when_it_closes(grace: int, suppress: bool) -> None:
    test_driver = driver(TimeWindows.of(SIZE, grace=grace), suppress)
    model = ForwardModel(grace)
    try:
        for offset, (key, timestamp) in enumerate(RECORDS):
            process(test_driver, offset, key, timestamp)
            model.record(key, timestamp)
            out = forwarded(test_driver)
            assert out == (model.finals if suppress else model.forwarded), (offset, key, timestamp)
            closed = {w: c for w, c in model.counts.items() if w[1] + SIZE <= model.stream_time - grace}
            assert {w: c for w, c in out if w in closed} == closed, (offset, key, timestamp)  # every final is out
        checkpoint.commit(test_driver._tasks, test_driver._collector)
        model.commit()
        out = forwarded(test_driver)
        assert out == (model.finals if suppress else model.forwarded)
        assert dict(out) == ({w: c for w, c in model.counts.items() if w in dict(model.finals)} if suppress
                             else model.counts)
    finally:
        test_driver.close()


@pytest.mark.parametrize("grace", [0, 5_000, 60_000])
def test_suppressed_tumbling_finals_with_a_cache_are_those_without_one_record_by_record(grace: int) -> None:
    """``suppress(until_window_closes)`` of tumbling windows emits the same finals, in the same order, after the same
    input record, with a record cache as without one (every update reaching the suppression as it happens, the
    closing record's too). Not so for hopping windows: a closed window cached after one still open waits for the
    commit (see the module doc)."""
    windows = TimeWindows.of(SIZE, grace=grace)
    cached, uncached = driver(windows, True), driver(windows, True, cache_bytes=0)
    try:
        for offset, (key, timestamp) in enumerate(RECORDS):
            process(cached, offset, key, timestamp)
            process(uncached, offset, key, timestamp)
            assert forwarded(cached) == forwarded(uncached), (offset, key, timestamp)
        assert forwarded(cached), "no final was emitted"
    finally:
        cached.close()
        uncached.close()


def test_hopping_windows_forwarded_early_are_closed_and_final() -> None:
    """Every window forwarded before the commit is closed and final, or one of the closing record's own windows."""
    size, advance = 30_000, 10_000
    test_driver = driver(TimeWindows.of(size, grace=0).advance_by(advance), False)
    counts: Counter[tuple[str, int]] = Counter()
    stream_time = -1
    next_close = NextClose(size, advance)
    seen = 0
    try:
        for offset, (key, timestamp) in enumerate(RECORDS):
            process(test_driver, offset, key, timestamp)
            advanced = timestamp > stream_time
            stream_time = max(stream_time, timestamp)
            own = [(key, start) for start in range(timestamp - timestamp % advance - size + advance, timestamp + 1,
                                                   advance) if start >= 0 and start + size > stream_time]
            for window in own:
                counts[window] += 1
            out = forwarded(test_driver)
            assert len(out) == len(set(out)), offset
            new, seen = out[seen:], len(out)
            if next_close.passed(advanced, stream_time):  # the closed windows, then the record's own with its counts
                assert new[len(new) - len(own):] == [(window, counts[window]) for window in own], offset
                new = new[:len(new) - len(own)]
            assert all(window[1] + size <= stream_time and counts[window] == count for window, count in new), offset
        assert forwarded(test_driver), "no window was forwarded before the commit"
        checkpoint.commit(test_driver._tasks, test_driver._collector)
        assert dict(forwarded(test_driver)) == counts  # each window's last update: its final count
    finally:
        test_driver.close()



@pytest.mark.parametrize("grace", [0, 5_000])
@pytest.mark.parametrize("retention", [None, 10 * SIZE])
def test_a_window_behind_the_expiry_floor_is_logged_and_forwarded_but_not_stored(grace: int,
                                                                                 retention: int | None) -> None:
    """A window that closes behind its store's expiry floor (Kafka Streams' ``getActualFrom``: reads begin at the
    highest window start written - retention + 1) is logged and forwarded but not written to the store: no read
    would return it. The model, after each record: every window reads as its count if it starts at or after the
    floor, else as nothing; the store's segments hold, per window, what the flushes stored (a commit stores the cached
    windows; a window's close stores it unless it is behind the floor once the closing record is cached). A commit in
    the middle stores earlier values of some windows, never read afterwards.
    After the last commit the changelog holds every window's final count, as Kafka Streams' does."""
    kept = retention if retention is not None else SIZE + grace  # the default: size + grace
    builder = StreamsBuilder()
    materialized = Materialized.as_("counts") if retention is None else \
        Materialized.as_("counts").with_retention(retention)
    (builder.stream("in", key_serde=Serdes.String(), value_serde=Serdes.String()).group_by_key()
     .windowed_by(TimeWindows.of(SIZE, grace=grace)).count(materialized)
     .to_stream().to("out", value_serde=Serdes.Long()))
    test_driver = TopologyTestDriver(builder.build(), {"statestore.cache.max.bytes": str(10 << 20)})
    store = test_driver.get_window_store("counts")
    segments = store.inner  # the segmented store below the cache and the changelog: what reads do not filter
    counts: Counter[tuple[str, int]] = Counter()
    stored: dict[tuple[str, int], int] = {}
    cached: set[tuple[str, int]] = set()  # written since their last flush
    stream_time, highest_start = -1, -1

    def in_segments() -> dict[tuple[str, int], int]:
        # the store's key: record key, window start (8 bytes), sequence number (4); the value: timestamp (8), count
        found = dict(segments.range(None, None))
        found.update(segments.pending())  # the segments' writes not flushed to RocksDB yet
        return {(raw[:-12].decode(), struct.unpack(">q", raw[-12:-4])[0]): struct.unpack(">q", data[8:])[0]
                for raw, data in found.items() if data is not None}

    def live(window: tuple[str, int]) -> bool:
        return window[1] // segments.segment_interval_ms in segments.segment_ids

    try:
        for offset, (key, timestamp) in enumerate(RECORDS):
            process(test_driver, offset, key, timestamp)
            stream_time = max(stream_time, timestamp)
            window = (key, timestamp - timestamp % SIZE)
            if window[1] + SIZE > stream_time - grace:  # not late
                counts[window] += 1
                cached.add(window)
                highest_start = max(highest_start, window[1])
            floor = highest_start - kept + 1
            for closed in sorted(w for w in cached if w[1] + SIZE <= stream_time - grace):
                cached.discard(closed)
                if closed[1] >= floor:
                    stored[closed] = counts[closed]
            for (k, start), count in counts.items():
                found = store.fetch_with_timestamp(k, start)
                assert (None if found is None else found.value) == (count if start >= floor else None), (
                    offset, k, start)
            assert in_segments() == {w: c for w, c in stored.items() if live(w)}, offset
            if offset == 5:
                checkpoint.commit(test_driver._tasks, test_driver._collector)
                stored.update({w: counts[w] for w in cached})
                cached.clear()
        checkpoint.commit(test_driver._tasks, test_driver._collector)
        stored.update({w: counts[w] for w in cached})
        assert in_segments() == {w: c for w, c in stored.items() if live(w)}
        logged = {}
        for record in test_driver._collector.outputs["topology-test-driver-counts-changelog"]:
            logged[(record.key[:-12].decode(), struct.unpack(">q", record.key[-12:-4])[0])] = \
                struct.unpack(">q", record.value)[0]
        assert logged == counts
        if retention is None and grace == 0:  # every window closed behind the floor: the store holds commits' values
            assert {w: c for w, c in stored.items() if c != counts[w]}, "no earlier value was left in the store"
        assert dict(forwarded(test_driver)) == counts  # each window's last update: its final count
    finally:
        test_driver.close()


def test_a_dirty_entry_forwarded_early_is_the_old_value_of_its_write_through_and_not_forwarded_again_unchanged() -> None:
    """``CachingBytesStore.forward_dirty``: the entry stays cached and dirty; the write-through that later writes it
    forwards it with the early value as its old one (what downstream last saw), skips it if it did not change, and
    reports its delete, which a key never forwarded and never written would not get."""
    from streaming.state.caching import CacheBudget, CachingBytesStore
    from streaming.state.memory import InMemoryBytesStore

    inner = InMemoryBytesStore("s")
    inner.open(None)
    inner.put(b"k", b"v0")
    cached = CachingBytesStore(inner, CacheBudget(1 << 20))
    got: list[tuple[bytes, object, object]] = []
    cached.listener = lambda key, new, old, timestamp, headers: got.append((key, new, old))
    cached.send_old_values = True
    for key, value in ((b"k", b"v1"), (b"same", b"s1"), (b"gone", b"g1")):
        cached.put(key, value, 1)
    cached.forward_dirty([b"k", b"same", b"gone", b"absent"])
    assert got == [(b"k", b"v1", b"v0"), (b"same", b"s1", None), (b"gone", b"g1", None)]
    assert inner.get(b"k") == b"v0" and len(cached.cache) == 3  # not written through
    got.clear()
    cached.forward_dirty([b"k"])  # nothing changed since
    assert got == []
    cached.put(b"k", b"v2", 2)
    cached.put(b"gone", None, 2)
    cached.flush()
    assert got == [(b"k", b"v2", b"v1"), (b"gone", None, b"g1")]  # "same" is unchanged since its early forward
    assert inner.get(b"k") == b"v2" and inner.get(b"same") == b"s1" and inner.get(b"gone") is None


def test_a_closed_suppression_leaves_its_held_windows_to_reference_counting_not_to_the_cycle_collector() -> None:
    """The suppression node and its task reference each other, so what the node holds would wait for the cycle
    collector once the task closed: on the tumbling benchmark, a pass of 40-80 ms over ~7,500 held windows, paid by
    whatever allocated next (the close itself). The buffer's store drops the node's copy when it closes: the
    collector finds none of the held windows' keys."""
    import gc

    from streaming.windows.window import Windowed

    test_driver = driver(TimeWindows.of(SIZE, grace=0), True)
    held = 5_000
    for offset in range(held):
        process(test_driver, offset, f"key-{offset}", 1_000 + offset)
    checkpoint.commit(test_driver._tasks, test_driver._collector)  # every window reaches the suppression, open
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds stays in gc.garbage
    try:
        test_driver.close()
        del test_driver
        gc.collect()
        found = sum(type(o) is Windowed for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if enabled:
            gc.enable()
    assert found == 0, f"the cycle collector found {found} held windows' keys after the close"
