"""Windowed aggregations and suppress through the test driver, against plain-Python oracles over a few
thousand random events with out-of-order and late timestamps."""

from __future__ import annotations

import random
import struct
from collections import Counter, defaultdict
from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message

from streaming import (
    BufferConfig,
    DeserializationError,
    Materialized,
    Serdes,
    SessionWindows,
    SlidingWindows,
    StreamsBuilder,
    StreamsError,
    Suppressed,
    TimeWindows,
    TopologyError,
    Window,
    Windowed,
    WindowedSerdes,
)
from streaming.runtime import checkpoint
from streaming.testing import TopologyTestDriver

String, Long = Serdes.String(), Serdes.Long()
CACHING = pytest.mark.parametrize("caching", [True, False], ids=["cached", "uncached"])


def events(count: int, seed: int, keys: int = 6, disorder: int = 40, late_share: float = 0.05) -> list[tuple[str, int]]:
    """Timestamps mostly rising ~1 per event; some out of order by up to ``disorder``, some far late."""
    rng = random.Random(seed)
    out = []
    for n in range(count):
        ts = 1000 + n
        roll = rng.random()
        if roll < late_share:
            ts = max(0, ts - rng.randint(disorder, 4 * disorder))
        elif roll < 0.3:
            ts = max(0, ts - rng.randint(0, disorder))
        out.append((f"k{rng.randrange(keys)}", ts))
    return out


def materialized(caching: bool, name: str = "agg") -> Materialized:
    spec = Materialized.as_(name).with_store_type("in_memory")
    return spec if caching else spec.with_caching_disabled()


def time_window_oracle(data: list[tuple[str, int]], size: int, advance: int, grace: int
                       ) -> tuple[dict[tuple[str, int], int], int]:
    """Count per (key, window start) and the number of (record, closed window) drops."""
    stream_time, counts, drops = -1, Counter(), 0
    for key, ts in data:
        stream_time = max(stream_time, ts)
        start = max(0, ts - size + advance)
        start -= start % advance
        while start <= ts:
            if start + size <= stream_time - grace:
                drops += 1
            else:
                counts[(key, start)] += 1
            start += advance
    return dict(counts), drops


def last_per_window(records: list[tuple[Windowed, Any]]) -> dict[tuple[str, int], Any]:
    return {(windowed.key, windowed.window.start): value for windowed, value in records}


@CACHING
@pytest.mark.parametrize("size,advance", [(50, 50), (60, 20)], ids=["tumbling", "hopping"])
def test_time_windows_match_the_oracle(caching: bool, size: int, advance: int) -> None:
    data = events(3000, seed=size + advance)
    grace = 25
    windows = TimeWindows.of(size, grace=grace)
    if advance != size:
        windows = windows.advance_by(advance)
    builder = StreamsBuilder()
    (builder.stream("in", key_serde=String, value_serde=String).group_by_key().windowed_by(windows)
     .count(materialized(caching)).to_stream().to("out"))
    expected, drops = time_window_oracle(data, size, advance, grace)
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", String, String)
        out = driver.create_output_topic("out", WindowedSerdes.time_windowed(String, size), Long)
        for key, ts in data:
            source.pipe_input(key, "v", timestamp=ts)
        records = out.read_key_values()
        assert last_per_window(records) == expected
        assert all(windowed.window.end - windowed.window.start == size for windowed, _ in records)
        assert driver.metrics()["dropped_records"] == drops > 0
        store = driver.get_window_store("agg")
        retained = {(w.key, w.window.start): c for w, c in store.all()}
        assert retained and all(expected[window] == count for window, count in retained.items())
        key, start = next(iter(retained))
        assert store.fetch(key, start) == expected[(key, start)]


def test_grace_is_exact_at_the_boundary() -> None:
    """Window [0, 10), grace 5: it closes when stream time reaches 15 = end + grace."""
    builder = StreamsBuilder()
    (builder.stream("in", key_serde=String, value_serde=String).group_by_key()
     .windowed_by(TimeWindows.of(10, grace=5), late_records_topic="late").count(materialized(False)))
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", String, String)
        late = driver.create_output_topic("late", String, String)
        store = driver.get_state_store("agg")
        source.pipe_input("a", "first", timestamp=0)
        source.pipe_input("b", "advance", timestamp=14)     # stream time 14 = end + grace - 1
        source.pipe_input("a", "at end - 1", timestamp=9)   # still accepted
        source.pipe_input(None, "no key", timestamp=9)      # dropped, not late
        assert store.fetch("a", 0) == 2
        source.pipe_input("b", "advance", timestamp=15)     # stream time 15 = end + grace
        source.pipe_input("a", "too late", timestamp=9)
        assert store.fetch("a", 0) == 2
        assert driver.metrics()["dropped_records"] == 2 and driver.metrics()["late_records"] == 1
        assert late.read_key_values() == [("a", "too late")]


def test_windowed_results_carry_the_windows_highest_timestamp() -> None:
    builder = StreamsBuilder()
    (builder.stream("in", key_serde=String, value_serde=String).group_by_key()
     .windowed_by(TimeWindows.of(100, grace=100)).count(materialized(False)).to_stream().to("out"))
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", String, String)
        out = driver.create_output_topic("out", WindowedSerdes.time_windowed(String, 100), Long)
        for ts in (50, 20, 70, 10):
            source.pipe_input("a", "v", timestamp=ts)
        assert [(r.value, r.timestamp) for r in out.read_records_to_list()] == [(1, 50), (2, 50), (3, 70), (4, 70)]


def test_a_cached_window_flushed_as_it_closes_carries_its_highest_timestamp() -> None:
    """With a record cache and no commit in between, the window's one result, flushed as it closes, has the highest
    timestamp of its records: the in-order ones (50, 70) and the out-of-order ones into the open window (20, 10),
    which must not lower it."""
    builder = StreamsBuilder()
    (builder.stream("in", key_serde=String, value_serde=String).group_by_key()
     .windowed_by(TimeWindows.of(100, grace=100)).count(materialized(True)).to_stream().to("out"))
    with TopologyTestDriver(builder.build()) as driver:
        out = driver.create_output_topic("out", WindowedSerdes.time_windowed(String, 100), Long)
        task = driver._tasks[0]
        for offset, (key, ts) in enumerate((("a", 50), ("a", 20), ("a", 70), ("a", 10), ("b", 200))):
            task.process_messages([Message(topic="in", partition=0, offset=offset, key=key.encode(), value=b"v",
                                           timestamp=(TIMESTAMP_CREATE_TIME, ts))])
        # stream time 200 = end + grace: [0, 100) closed and was flushed, then the record that closed it (b's window)
        assert [(r.key.key, r.value, r.timestamp) for r in out.read_records_to_list()] == [("a", 4, 70), ("b", 1, 200)]


def test_windowed_keys_are_written_in_kafkas_format_without_naming_a_serde() -> None:
    builder = StreamsBuilder()
    (builder.stream("in", key_serde=String, value_serde=String).group_by_key()
     .windowed_by(TimeWindows.of(60_000)).count().to_stream().to("out", value_serde=Long))
    with TopologyTestDriver(builder.build(), {"default.key.serde": "String"}) as driver:
        driver.create_input_topic("in", String, String).pipe_input("user", "v", timestamp=61_000)
        record = driver.create_output_topic("out", Serdes.Bytes(), Long).read_record()
        assert record.key == b"user" + (60_000).to_bytes(8, "big")
        assert WindowedSerdes.time_windowed(String, 60_000).deserialize(record.key) == Windowed.of("user", 60_000,
                                                                                                     120_000)


def test_reduce_and_aggregate_per_window() -> None:
    builder = StreamsBuilder()
    grouped = builder.stream("in", key_serde=String, value_serde=Long).group_by_key()
    windowed = grouped.windowed_by(TimeWindows.of(10, grace=10))  # retention 20: window [0, 10) still readable
    windowed.reduce(lambda a, b: a + b, Materialized.as_("sums"))
    windowed.aggregate(list, lambda k, v, agg: [*agg, v], Materialized.as_("lists").with_value_serde(Serdes.Json()))
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", String, Long)
        for ts, value in ((1, 5), (2, 7), (12, 1)):
            source.pipe_input("a", value, timestamp=ts)
        assert list(driver.get_state_store("sums").fetch("a", 0, 100)) == [(0, 12), (10, 1)]
        assert driver.get_state_store("lists").fetch("a", 0) == [5, 7]


def test_an_aggregator_that_changes_its_aggregate_in_place_and_fails_leaves_the_window_as_it_was() -> None:
    """A skipped record (processing.exception.handler=log_and_continue) changes no window, with no commit between
    the records (the cache holds the window; the driver's pipe would commit after each): a mutable aggregate is
    cached as bytes, so what the aggregator changed in place before it raised is lost with its copy. A count in the
    same cache is kept as an object; reads from outside the operator see its bytes."""

    def add(key: str, value: int, totals: dict[str, Any]) -> dict[str, Any]:
        totals["n"] += 1
        if value < 0:
            raise ValueError(f"negative amount {value}")
        totals["sum"] += value
        return totals

    builder = StreamsBuilder()
    grouped = builder.stream("in", key_serde=String, value_serde=Long).group_by_key()
    windowed = grouped.windowed_by(TimeWindows.of(10, grace=10))
    windowed.aggregate(lambda: {"n": 0, "sum": 0}, add, Materialized.as_("totals").with_value_serde(Serdes.Json()))
    windowed.count(Materialized.as_("counts"))  # a sibling after the aggregate: the skipped record never reaches it
    with TopologyTestDriver(builder.build(), {"processing.exception.handler": "log_and_continue"}) as driver:
        task = driver._tasks[0]
        for offset, (ts, value) in enumerate(((1, 5), (2, -1), (3, 7))):
            task.process_messages([Message(topic="in", partition=0, offset=offset, key=b"a",
                                           value=struct.pack(">q", value), timestamp=(TIMESTAMP_CREATE_TIME, ts))])
        totals, counts = driver.get_state_store("totals"), driver.get_state_store("counts")
        assert len(totals._caching.cache) == len(counts._caching.cache) == 1  # both windows still cached
        assert totals.fetch("a", 0) == {"n": 2, "sum": 12}
        assert counts.fetch("a", 0) == 2 and counts.fetch_with_timestamp("a", 0).timestamp == 3
        assert list(counts.fetch_all(0, 100)) == [(Windowed("a", Window(0, 10)), 2)]
        checkpoint.commit(driver._tasks, driver._collector)
        assert totals.fetch("a", 0) == {"n": 2, "sum": 12} and counts.fetch("a", 0) == 2


def session_oracle(data: list[tuple[str, int]], gap: int, grace: int
                   ) -> tuple[dict[tuple[str, int, int], int], dict[tuple[str, int, int], int], int]:
    """Sessions per key as Kafka Streams builds them, record by record: every session emitted and not retracted,
    the sessions the store still returns, and the drops.

    KStreamSessionWindowAggregate: the aggregation's observed time closes a session at ``end < time - grace -
    gap``; ``findSessions(key, t - gap, t + gap)`` reads the session store, which returns no session that ends
    before the store's own observed time (its highest session end written) ``- retention + 1``, retention being
    ``gap + grace`` (AbstractRocksDBSegmentedBytesStore.getActualFrom)."""
    sessions: dict[str, list[list[int]]] = defaultdict(list)  # key -> [start, end, count]
    stream_time, store_time, drops = -1, -1, 0
    retention = gap + grace
    for key, ts in data:
        stream_time = max(stream_time, ts)
        close = stream_time - grace - gap
        floor = store_time - retention + 1
        touching = [s for s in sessions[key] if s[1] >= max(ts - gap, floor) and s[0] <= ts + gap]
        start = min([ts] + [s[0] for s in touching])
        end = max([ts] + [s[1] for s in touching])
        if end < close:
            drops += 1
            continue
        for s in touching:
            sessions[key].remove(s)
        sessions[key].append([start, end, sum(s[2] for s in touching) + 1])
        store_time = max(store_time, end)
    emitted = {(key, s[0], s[1]): s[2] for key, found in sessions.items() for s in found}
    kept = {window: count for window, count in emitted.items() if window[2] >= store_time - retention + 1}
    return emitted, kept, drops


@CACHING
def test_sessions_match_the_oracle_and_retract_merged_sessions(caching: bool) -> None:
    rng = random.Random(11)
    data = [(f"k{rng.randrange(4)}", max(0, 1000 + n * 3 - (rng.randint(0, 60) if rng.random() < 0.2 else 0)))
            for n in range(2000)]
    gap, grace = 8, 20
    expected, kept, drops = session_oracle(data, gap, grace)
    builder = StreamsBuilder()
    (builder.stream("in", key_serde=String, value_serde=String).group_by_key()
     .windowed_by(SessionWindows.with_inactivity_gap(gap, grace=grace)).count(materialized(caching))
     .to_stream().to("out"))
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", String, String)
        out = driver.create_output_topic("out", WindowedSerdes.session_windowed(String), Long)
        for key, ts in data:
            source.pipe_input(key, "v", timestamp=ts)
        table: dict[tuple[str, int, int], int] = {}
        for windowed, count in out.read_key_values():
            window_key = (windowed.key, windowed.window.start, windowed.window.end)
            if count is None:
                table.pop(window_key)  # a retraction names a session that was emitted before
            else:
                table[window_key] = count
        assert table == expected
        assert driver.metrics()["dropped_records"] == drops > 0
        store = driver.get_state_store("agg")
        assert {(w.key, w.window.start, w.window.end): c for w, c in store.all()} == kept != expected


def test_a_bridging_record_merges_two_sessions_and_retracts_both() -> None:
    builder = StreamsBuilder()
    (builder.stream("in", key_serde=String, value_serde=Long).group_by_key()
     .windowed_by(SessionWindows.with_inactivity_gap(10, grace=20))  # [100, 100] still open when 110 comes
     .aggregate(lambda: 0, lambda k, v, agg: agg + v, lambda k, a, b: a + b,
                materialized(False).with_value_serde(Long))
     .to_stream().to("out", value_serde=Long))
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", String, Long)
        out = driver.create_output_topic("out", WindowedSerdes.session_windowed(String), Long)
        source.pipe_input("a", 1, timestamp=100)
        source.pipe_input("a", 2, timestamp=120)
        source.pipe_input("a", 4, timestamp=110)  # within 10 of both: bridges them
        assert [(w.window, v) for w, v in out.read_key_values()] == [
            (Window(100, 100), 1), (Window(120, 120), 2),
            (Window(100, 100), None), (Window(120, 120), None), (Window(100, 120), 7)]
        assert list(driver.get_session_store("agg").fetch("a")) == [(Windowed.of("a", 100, 120), 7)]
        with pytest.raises(TypeError, match="not a window store"):
            driver.get_window_store("agg")


def sliding_oracle(data: list[tuple[str, int]], diff: int) -> dict[tuple[str, int], int]:
    """Every window of KIP-450: each record's left window, and the right window of each record that has a
    later record within ``diff``; the count is the records in ``[start, start + diff]``."""
    result = {}
    for key in {k for k, _ in data}:
        times = sorted(ts for k, ts in data if k == key)
        starts = {ts - diff for ts in times}
        starts |= {ts + 1 for ts in times if any(ts < later <= ts + 1 + diff for later in times)}
        for start in starts:
            result[(key, start)] = sum(1 for ts in times if start <= ts <= start + diff)
    return result


@CACHING
def test_sliding_windows_match_the_oracle(caching: bool) -> None:
    rng = random.Random(5)
    diff = 15
    data = [(f"k{rng.randrange(3)}", 100 + n * 2 - rng.randint(0, 30)) for n in range(800)]
    builder = StreamsBuilder()
    (builder.stream("in", key_serde=String, value_serde=String).group_by_key()
     .windowed_by(SlidingWindows.of(diff, grace=100)).count(materialized(caching)).to_stream().to("out"))
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", String, String)
        out = driver.create_output_topic("out", WindowedSerdes.time_windowed(String, diff), Long)
        for key, ts in data:
            source.pipe_input(key, "v", timestamp=ts)
        assert last_per_window(out.read_key_values()) == sliding_oracle(data, diff)
        assert driver.metrics()["dropped_records"] == 0


def test_sliding_windows_drop_records_behind_grace() -> None:
    builder = StreamsBuilder()
    (builder.stream("in", key_serde=String, value_serde=String).group_by_key()
     .windowed_by(SlidingWindows.of(10, grace=5)).count(materialized(False)))
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", String, String)
        source.pipe_input("a", "v", timestamp=100)
        source.pipe_input("a", "v", timestamp=84)  # 84 + 1 + 10 <= 100 - 5: every window it could touch closed
        assert driver.metrics()["dropped_records"] == 1
        assert list(driver.get_state_store("agg").fetch("a", 0, 200)) == [(90, 1)]


def test_suppress_emits_exactly_one_final_per_window() -> None:
    size, grace = 50, 25
    data = events(3000, seed=3)
    builder = StreamsBuilder()
    (builder.stream("in", key_serde=String, value_serde=String).group_by_key()
     .windowed_by(TimeWindows.of(size, grace=grace)).count(materialized(True))
     .suppress(Suppressed.until_window_closes()).to_stream().to("finals"))
    expected, _ = time_window_oracle(data, size, size, grace)
    final_time = max(ts for _, ts in data)
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", String, String)
        out = driver.create_output_topic("finals", WindowedSerdes.time_windowed(String, size), Long)
        for key, ts in data:
            source.pipe_input(key, "v", timestamp=ts)
        finals = out.read_key_values()
    windows = Counter((w.key, w.window.start) for w, _ in finals)
    assert windows and max(windows.values()) == 1
    closed = {window: count for window, count in expected.items() if window[1] + size <= final_time - grace}
    assert last_per_window(finals) == closed


def test_suppress_until_time_limit_with_a_bounded_buffer() -> None:
    builder = StreamsBuilder()
    table = builder.stream("in", key_serde=String, value_serde=Long).to_table(
        Materialized.as_("t").with_caching_disabled())
    table.suppress(Suppressed.until_time_limit(100, BufferConfig.max_records(2))).to_stream().to(
        "out", value_serde=Long)
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", String, Long)
        out = driver.create_output_topic("out", String, Long)
        source.pipe_input("a", 1, timestamp=0)
        source.pipe_input("a", 2, timestamp=50)     # same key: replaces the held value
        source.pipe_input("b", 1, timestamp=60)
        assert out.read_key_values() == []
        source.pipe_input("c", 1, timestamp=70)     # 3 keys > max 2: the oldest leaves early
        assert out.read_key_values() == [("a", 2)]
        source.pipe_input("d", 1, timestamp=165)    # b's limit (60 + 100) passed
        assert out.read_key_values() == [("b", 1)]


def test_the_buffer_store_takes_what_is_held_at_a_commit_only() -> None:
    """What a commit finds held reaches the buffer's changelog (and leaves it with a tombstone); an update
    already due when it arrives is forwarded without touching it."""
    builder = StreamsBuilder()
    table = builder.stream("in", key_serde=String, value_serde=Long).to_table(
        Materialized.as_("t").with_caching_disabled())
    table.suppress(Suppressed.until_time_limit(10, BufferConfig.unbounded()).with_name("s")).to_stream().to(
        "out", value_serde=Long)
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", String, Long)
        out = driver.create_output_topic("out", String, Long)
        changelog = driver.create_output_topic("topology-test-driver-s-store-changelog", Serdes.Bytes(),
                                               Serdes.Bytes())

        def logged() -> dict[bytes, bool]:
            return {key: value is not None for key, value in changelog.read_key_values()}
        source.pipe_input("a", 1, timestamp=0)
        assert (out.read_key_values(), logged()) == ([], {b"a": True})
        source.pipe_input("b", 2, timestamp=20)  # a's limit passed: forwarded, its entry deleted; b held
        assert (out.read_key_values(), logged()) == ([("a", 1)], {b"a": False, b"b": True})
        source.pipe_input("x", 3, timestamp=5)  # 5 <= 20 - 10: due as it arrives
        assert (out.read_key_values(), logged()) == ([("x", 3)], {})


def test_a_full_buffer_that_shuts_down_fails_naming_the_buffer() -> None:
    builder = StreamsBuilder()
    (builder.stream("in", key_serde=String, value_serde=String).group_by_key()
     .windowed_by(TimeWindows.of(100)).count(materialized(False))
     .suppress(Suppressed.until_window_closes(BufferConfig.max_records(1).shut_down_when_full()).with_name("s")))
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", String, String)
        source.pipe_input("a", "v", timestamp=0)
        with pytest.raises(StreamsError, match="suppression buffer 's-store' is full"):
            source.pipe_input("b", "v", timestamp=1)


def test_suppress_needs_a_windowed_table_and_a_strict_buffer() -> None:
    builder = StreamsBuilder()
    table = builder.table("t", key_serde=String, value_serde=String)
    with pytest.raises(TopologyError, match="needs a windowed table"):
        table.suppress(Suppressed.until_window_closes())
    with pytest.raises(ValueError, match="must shut_down_when_full"):
        Suppressed.until_window_closes(BufferConfig.max_records(10))


def test_a_negative_timestamp_goes_down_the_deserialization_path() -> None:
    builder = StreamsBuilder()
    (builder.stream("orders", key_serde=String, value_serde=String).group_by_key()
     .windowed_by(TimeWindows.of(10)).count())
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("orders", String, String).pipe_input("a", "v", timestamp=5)
        with pytest.raises(DeserializationError, match="invalid timestamp -1") as failure:
            driver.pipe_raw("orders", b"a", b"v", -1)
        assert (failure.value.topic, failure.value.partition, failure.value.offset) == ("orders", 0, 1)


def test_retention_shorter_than_size_plus_grace_is_refused() -> None:
    builder = StreamsBuilder()
    windowed = builder.stream("in").group_by_key().windowed_by(TimeWindows.of(100, grace=50))
    with pytest.raises(TopologyError, match="retention 120 ms is shorter than the window size plus grace"):
        windowed.count(Materialized.as_("c").with_retention(120))
