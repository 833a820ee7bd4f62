"""A cached time-window aggregate forwards a window's update when the window closes, not at the next commit
(``streaming.dsl.window_aggregate``), checked record by record against a model, with no commit in between.

The rule of closing is Kafka Streams' (``KStreamWindowAggregate``: a window is closed once ``end <= stream time -
grace``); what this adds is when the cache forwards: a closed window can never change, so its cached update is
forwarded as it closes. The model: after each record (in time order), every closed window that got records has been
forwarded exactly once, with its final count, and no open window has been forwarded; a
``suppress(until_window_closes)`` downstream emits its final then. With hopping windows, which the cache holds in
write order across several open windows, the forwarded ones are closed and final, and the commit forwards the rest.
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


def driver(windows: TimeWindows, suppress: bool) -> TopologyTestDriver:
    builder = StreamsBuilder()
    counts = (builder.stream("in", key_serde=Serdes.String(), value_serde=Serdes.String()).group_by_key()
              .windowed_by(windows).count(materialized="counts"))
    if suppress:
        counts = counts.suppress(Suppressed.until_window_closes())
    counts.to_stream().to("out", value_serde=Serdes.Long())
    return TopologyTestDriver(builder.build(), {"statestore.cache.max.bytes": str(10 << 20)})


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


@pytest.mark.parametrize("grace", [0, 5_000, 60_000])
@pytest.mark.parametrize("suppress", [False, True])
def test_a_tumbling_window_is_forwarded_once_when_it_closes(grace: int, suppress: bool) -> None:
    test_driver = driver(TimeWindows.of(SIZE, grace=grace), suppress)
    counts: Counter[tuple[str, int]] = Counter()
    latest: dict[tuple[str, int], int] = {}  # a window's result timestamp: its highest record timestamp
    stream_time = -1

    def finals(flushed: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """What a suppress emits of the windows forwarded to it: its stream time is the highest timestamp of what
        reached it (KTableSuppressProcessor), and it emits a window once ``end <= that - grace``."""
        suppress_time = max((latest[window] for window in flushed), default=-1)
        return {window: count for window, count in flushed.items() if window[1] + SIZE <= suppress_time - grace}

    try:
        for offset, (key, timestamp) in enumerate(RECORDS):
            process(test_driver, offset, key, timestamp)
            stream_time = max(stream_time, timestamp)
            window = (key, timestamp - timestamp % SIZE)
            if window[1] + SIZE > stream_time - grace:  # not late
                counts[window] += 1
                latest[window] = max(latest.get(window, -1), timestamp)
            closed = {window: count for window, count in counts.items() if window[1] + SIZE <= stream_time - grace}
            expected = finals(closed) if suppress else closed
            assert sorted(forwarded(test_driver)) == sorted(expected.items()), (offset, key, timestamp)
        checkpoint.commit(test_driver._tasks, test_driver._collector)
        expected = finals(dict(counts)) if suppress else counts  # the commit forwards the open windows too
        out = forwarded(test_driver)
        assert sorted(out) == sorted(expected.items()) and len(out) == len(expected)
    finally:
        test_driver.close()


def test_hopping_windows_forwarded_early_are_closed_and_final() -> None:
    size, advance = 30_000, 10_000
    test_driver = driver(TimeWindows.of(size, grace=0).advance_by(advance), False)
    counts: Counter[tuple[str, int]] = Counter()
    stream_time = -1
    try:
        for offset, (key, timestamp) in enumerate(RECORDS):
            process(test_driver, offset, key, timestamp)
            stream_time = max(stream_time, timestamp)
            for start in range(timestamp - timestamp % advance - size + advance, timestamp + 1, advance):
                if start >= 0 and start + size > stream_time:
                    counts[(key, start)] += 1
            out = forwarded(test_driver)
            assert len(out) == len(set(out)), offset
            assert all(window[1] + size <= stream_time and counts[window] == count for window, count in out), offset
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
    the middle stores earlier values of some windows, never read afterwards. After the last commit the changelog
    holds every window's final count, as Kafka Streams' does."""
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
