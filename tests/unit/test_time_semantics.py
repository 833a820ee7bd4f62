"""Time semantics against Kafka Streams' rules (tests/unit/kafka_streams_models.py), record by record, through the
public API: window close boundaries (sliding windows keep a window ending exactly at the close time), each
time-driven node's own observed stream time (a filtered record or a table update elsewhere in the task closes
nothing), deletes in a suppression buffer, windows past their retention, and a join's time that dies with its task.
Restarts are in tests/unit/test_stream_time.py (the commit's record of node times) and
tests/integration/test_stream_time_recovery.py (a worker on the broker)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message

from streaming import (
    JoinWindows,
    Materialized,
    Serdes,
    SessionWindows,
    SlidingWindows,
    StreamsBuilder,
    StreamsConfig,
    Suppressed,
    TimeWindows,
)
from streaming.testing import TopologyTestDriver
from tests.unit.kafka_streams_models import InnerStreamJoin, SessionCount, SlidingCount, TimeWindowCount

String, Long, Json = Serdes.String(), Serdes.Long(), Serdes.Json()
BufferConfig = Suppressed.BufferConfig


def uncached(name: str) -> Materialized:
    return Materialized.as_(name).with_caching_disabled()


def plain_windows(table: Any) -> Any:
    """A windowed table's updates as a stream keyed ``key@start-end`` (a delete's value is None)."""
    return table.to_stream().map(lambda w, v: (f"{w.key}@{w.window.start}-{w.window.end}", v))


def read(driver: TopologyTestDriver, topic: str = "out", serde: Any = Long) -> list[tuple[str, Any]]:
    return driver.create_output_topic(topic, String, serde).read_key_values()


# -- 1. close boundaries ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("grace", [0, 3])
def test_sliding_windows_keep_a_window_that_ends_exactly_at_the_close_time(grace: int) -> None:
    rng = random.Random(grace)
    d = 10
    data = []
    for n in range(600):  # mostly in order, some records up to 25 ms behind, some more than once per millisecond
        data.append((rng.choice("abc"), 100 + n // 2 - (rng.randint(0, 25) if rng.random() < 0.15 else 0)))
    builder = StreamsBuilder()
    plain_windows(builder.stream("in", key_serde=String, value_serde=String).group_by_key()
                  .windowed_by(SlidingWindows.of(d, grace=grace)).count(uncached("sliding"))).to("out",
                                                                                                value_serde=Long)
    model = SlidingCount(d, grace)
    expected = [(f"{k}@{s}-{e}", c) for key, t in data for k, s, e, c in model.process(key, t)]
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", String, String)
        for key, t in data:
            source.pipe_input(key, "v", timestamp=t)
        assert read(driver) == expected
        assert driver.metrics()["late_records"] == model.drops > 0


def test_sliding_window_grace_zero_in_order_loses_nothing() -> None:
    builder = StreamsBuilder()
    plain_windows(builder.stream("in", key_serde=String, value_serde=String).group_by_key()
                  .windowed_by(SlidingWindows.of(10)).count(uncached("sliding"))).to("out", value_serde=Long)
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", String, String)
        for t in (100, 105, 120):
            source.pipe_input("a", "v", timestamp=t)
        # each record's left window ends at the close time (time - grace 0): kept (windowEnd >= closeTime); 105 also
        # makes 100's right window, and its left window starts from 100's
        assert read(driver) == [("a@90-100", 1), ("a@101-111", 1), ("a@95-105", 2), ("a@110-120", 1)]
        assert driver.metrics()["late_records"] == 0


def test_time_and_session_windows_close_at_kafka_streams_boundaries() -> None:
    builder = StreamsBuilder()
    stream = builder.stream("in", key_serde=String, value_serde=String)
    plain_windows(stream.group_by_key().windowed_by(TimeWindows.of(10)).count(uncached("tumbling"))).to(
        "time", value_serde=Long)
    plain_windows(stream.group_by_key().windowed_by(SessionWindows.with_inactivity_gap(5)).count(
        uncached("sessions"))).to("sessions", value_serde=Long)
    records = [("a", 5), ("b", 10), ("a", 9), ("c", 5), ("c", 4), ("b", 11)]
    time_model, session_model = TimeWindowCount(10, 10, 0), SessionCount(5, 0)
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", String, String)
        for key, t in records:
            source.pipe_input(key, "v", timestamp=t)
        # at 10 the time window [0, 10) is closed (end <= close): a@9, c@5 and c@4 are dropped from it
        assert read(driver, "time") == [(f"{k}@{s}-{s + 10}", c) for key, t in records
                                         for k, s, c in time_model.process(key, t)] == [("a@0-10", 1), ("b@10-20", 1),
                                                                                         ("b@10-20", 2)]
        # sessions close at 10 - 5 = 5: c@5 makes [5, 5], ending exactly at the close time (kept: end < close drops);
        # c@4 is dropped. a@9 does not merge with [5, 5]: the store no longer returns a session ending before its
        # time 10 - retention 5 + 1 (getActualFrom), so it starts [9, 9]
        assert read(driver, "sessions") == [(f"{k}@{s}-{e}", c) for key, t in records
                                            for k, s, e, c in session_model.process(key, t)] == [
            ("a@5-5", 1), ("b@10-10", 1), ("a@9-9", 1), ("c@5-5", 1), ("b@10-10", None), ("b@10-11", 2)]
        assert driver.metrics()["late_records"] == time_model.drops + session_model.drops == 3 + 1


# -- 2. each node's own observed stream time --------------------------------------------------------------------------
def disordered(count: int, seed: int) -> list[tuple[str, int, str]]:
    """Keys, timestamps mostly rising with some disorder, and one record in ten far ahead, marked "skip"."""
    rng = random.Random(seed)
    out = []
    for n in range(count):
        t = 1_000 + 3 * n - (rng.randint(0, 40) if rng.random() < 0.2 else 0)
        if rng.random() < 0.1:
            out.append((f"k{rng.randrange(4)}", t + 5_000, "skip"))
        else:
            out.append((f"k{rng.randrange(4)}", t, "v"))
    return out


@pytest.mark.parametrize("size,advance", [(50, 50), (60, 20)], ids=["tumbling", "hopping"])
def test_a_filtered_record_does_not_close_windows_of_the_aggregation_after_the_filter(size: int, advance: int) -> None:
    data = disordered(1_500, seed=size)
    builder = StreamsBuilder()
    plain_windows(builder.stream("in", key_serde=String, value_serde=String).filter(lambda k, v: v != "skip")
                  .group_by_key().windowed_by(TimeWindows.of(size, grace=15).advance_by(advance))
                  .count(uncached("counts"))).to("out", value_serde=Long)
    model = TimeWindowCount(size, advance, 15)
    expected = [(f"{k}@{s}-{s + size}", c) for key, t, v in data if v != "skip" for k, s, c in model.process(key, t)]
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", String, String)
        for key, t, value in data:
            source.pipe_input(key, value, timestamp=t)
        assert read(driver) == expected
        assert driver.metrics()["late_records"] == model.drops > 0


def test_a_filtered_record_does_not_close_sessions_after_the_filter() -> None:
    data = disordered(1_500, seed=3)
    builder = StreamsBuilder()
    plain_windows(builder.stream("in", key_serde=String, value_serde=String).filter(lambda k, v: v != "skip")
                  .group_by_key().windowed_by(SessionWindows.with_inactivity_gap(4, grace=10))
                  .count(uncached("sessions"))).to("out", value_serde=Long)
    model = SessionCount(4, 10)
    expected = [(f"{k}@{s}-{e}", c) for key, t, v in data if v != "skip" for k, s, e, c in model.process(key, t)]
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", String, String)
        for key, t, value in data:
            source.pipe_input(key, value, timestamp=t)
        assert read(driver) == expected
        assert driver.metrics()["late_records"] == model.drops > 0
        store = driver.get_session_store("sessions")
        assert {(w.key, w.window.start, w.window.end): c for w, c in store.all()} == model.kept()


def test_a_table_update_in_the_same_task_does_not_close_windows_of_the_joined_stream() -> None:
    builder = StreamsBuilder()
    users = builder.table("users", key_serde=String, value_serde=String)
    orders = builder.stream("orders", key_serde=String, value_serde=String)
    plain_windows(orders.join(users, lambda order, region: region).group_by_key()
                  .windowed_by(TimeWindows.of(100)).count(uncached("per-region"))).to("out", value_serde=Long)
    model = TimeWindowCount(100, 100, 0)
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("users", String, String).pipe_input("u1", "north", timestamp=0)
        orders_in = driver.create_input_topic("orders", String, String)
        orders_in.pipe_input("u1", "o1", timestamp=50)
        driver.create_input_topic("users", String, String).pipe_input("u1", "south", timestamp=10_000)
        orders_in.pipe_input("u1", "o2", timestamp=60)  # the task is at 10 s; the aggregation has seen 50 ms
        expected = [(f"{k}@{s}-{s + 100}", c) for t in (50, 60) for k, s, c in model.process("u1", t)]
        assert read(driver) == expected == [("u1@0-100", 1), ("u1@0-100", 2)]
        assert driver.metrics()["late_records"] == 0


def test_suppression_goes_by_the_updates_it_saw_not_a_filtered_record() -> None:
    builder = StreamsBuilder()
    (plain_windows(builder.stream("in", key_serde=String, value_serde=String).filter(lambda k, v: v != "skip")
                   .group_by_key().windowed_by(TimeWindows.of(10)).count(Materialized.as_("c"))
                   .suppress(Suppressed.until_window_closes()))
     .to("out", value_serde=Long))
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", String, String)
        source.pipe_input("a", "v", timestamp=1)
        source.pipe_input("a", "skip", timestamp=500)  # filtered: neither the count nor the suppression sees it
        source.pipe_input("a", "v", timestamp=5)
        assert read(driver) == []
        source.pipe_input("a", "v", timestamp=10)  # closes [0, 10): its final is 2
        assert read(driver) == [("a@0-10", 2)]


# -- 3. deletes in a suppression buffer -------------------------------------------------------------------------------
def test_final_results_of_sessions_drop_the_deletes_of_merged_sessions() -> None:
    builder = StreamsBuilder()
    (plain_windows(builder.stream("in", key_serde=String, value_serde=String).group_by_key()
                   .windowed_by(SessionWindows.with_inactivity_gap(10)).count(uncached("s"))
                   .suppress(Suppressed.until_window_closes()))
     .to("out", value_serde=Long))
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", String, String)
        source.pipe_input("a", "v", timestamp=100)
        source.pipe_input("a", "v", timestamp=105)  # merges [100, 100] away: its delete is held, then dropped
        source.pipe_input("a", "v", timestamp=200)  # closes [100, 105] (200 - 10 > 105)
        assert read(driver) == [("a@100-105", 2)]


def test_time_limit_suppression_forwards_a_held_delete_as_a_delete() -> None:
    builder = StreamsBuilder()
    (builder.table("in", key_serde=String, value_serde=Json, materialized=Materialized.as_("t"))
     .suppress(Suppressed.until_time_limit(10, BufferConfig.unbounded())).to_stream().to("out", value_serde=Json))
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", String, Json)
        source.pipe_input("k", {"n": 1}, timestamp=0)
        source.pipe_input("k", None, timestamp=5)  # the table's delete replaces the held update
        source.pipe_input("other", {"n": 2}, timestamp=20)  # 20 - 10 >= 0: "k" leaves the buffer
        assert read(driver, serde=Json) == [("k", None)]


# -- 4. windows past their retention ----------------------------------------------------------------------------------
def join_topology(kind: str, windows: JoinWindows) -> Any:
    builder = StreamsBuilder()
    left = builder.stream("left", key_serde=String, value_serde=String)
    right = builder.stream("right", key_serde=String, value_serde=String)
    getattr(left, kind)(right, lambda a, b: f"{a}+{b}", windows).to("out", value_serde=String)
    return builder.build()


def pipe_sides(driver: TopologyTestDriver, records: list[tuple[str, str, int, str]]) -> list[tuple[str, str, int]]:
    topics = {"l": driver.create_input_topic("left", String, String),
              "r": driver.create_input_topic("right", String, String)}
    for side, key, t, value in records:
        topics[side].pipe_input(key, value, timestamp=t)
    return [(r.key, r.value, r.timestamp) for r in driver.create_output_topic("out", String, String)
            .read_records_to_list()]


def test_a_join_does_not_match_a_record_its_store_no_longer_keeps() -> None:
    records = [("r", "k", 0, "R0"), ("r", "k", 1000, "R1000"), ("l", "k", 5, "L5")]
    with TopologyTestDriver(join_topology("join", JoinWindows.of(10))) as driver:
        assert pipe_sides(driver, records) == []  # R0 is behind 1000 - 20 + 1 in its store: expired
    with TopologyTestDriver(join_topology("left_join", JoinWindows.of(10))) as driver:
        assert pipe_sides(driver, records) == [("k", "L5+None", 5)]  # no partner, window long closed: at once


def test_inner_joins_match_the_model_with_store_retention() -> None:
    rng = random.Random(5)
    records = []
    for n in range(2_000):
        t = 100 + n // 2 - (rng.randint(0, 30) if rng.random() < 0.15 else 0)
        records.append(("l" if rng.random() < 0.5 else "r", f"k{rng.randrange(6)}", t, f"v{n}"))
    windows = JoinWindows.of(0, grace=4).before(6).after(3)
    model = InnerStreamJoin(6, 3, 4)
    expected = [result for side, key, t, value in records for result in model.process(side, key, t, value)]
    with TopologyTestDriver(join_topology("join", windows)) as driver:
        assert pipe_sides(driver, records) == expected
    naive = InnerStreamJoin(6, 3, 10**9)  # a store that kept everything would have joined more
    assert len([r for side, key, t, value in records for r in naive.process(side, key, t, value)]) > len(expected)


@pytest.mark.parametrize("store_type", ["rocksdb", "in_memory"])
def test_window_store_reads_hide_windows_past_retention(store_type: str) -> None:
    builder = StreamsBuilder()
    (builder.stream("in", key_serde=String, value_serde=String).group_by_key()
     .windowed_by(TimeWindows.of(10, grace=5)).count(Materialized.as_("w").with_store_type(store_type)))
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", String, String)
        for t in (0, 12, 30):
            source.pipe_input("a", "v", timestamp=t)
        store = driver.get_window_store("w")
        # retention 15, the store's time 30 (the start of [30, 40)): windows starting before 16 are expired
        assert list(store.fetch("a", 0, 100)) == [(30, 1)]
        assert store.fetch("a", 0) is None and store.fetch("a", 10) is None
        assert [(w.key, w.window.start) for w, _ in store.all()] == [("a", 30)]
        assert [(w.key, w.window.start) for w, _ in store.fetch_all(0, 100)] == [("a", 30)]
        assert [(w.key, w.window.start) for w, _ in store.fetch_range("a", "a", 0, 100)] == [("a", 30)]


# -- 5. a join's time belongs to its task -----------------------------------------------------------------------------
def test_a_join_task_created_again_starts_from_its_committed_time_not_its_predecessors(tmp_path: Path) -> None:
    from streaming.runtime.task import StreamTask

    topology = join_topology("left_join", JoinWindows.of(10)).bind("join-app")
    config = StreamsConfig({"application.id": "join-app", "state.dir": str(tmp_path)}, require_bootstrap=False)
    [sub] = topology.subtopologies()

    class Collector:
        def __init__(self) -> None:
            self.out: list[tuple[bytes | None, bytes | None, int]] = []

        def send(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int, headers: Any,
                 partition: int = -1) -> None:
            if topic == "out":
                self.out.append((key, value, timestamp))

        def partition_count(self, topic: str) -> int:
            return 1

    def message(topic: str, offset: int, value: str, t: int) -> Message:
        return Message(topic=topic, partition=0, offset=offset, key=b"k", value=value.encode(),
                       timestamp=(TIMESTAMP_CREATE_TIME, t))

    replay = [message("left", 0, "L100", 100), message("right", 0, "R105", 105), message("right", 1, "R500", 500)]
    first_collector, second_collector = Collector(), Collector()
    first = StreamTask(sub, 0, topology, config, first_collector, lambda: 0, input_partitions=sub_partitions(sub))
    first.open_stores()
    first.initialize_topology()
    for m in replay:
        first.add_messages([m])
    first.process_buffered(10)
    assert first_collector.out == [(b"k", b"L100+R105", 105)]
    first.close()  # an exactly-once abort: nothing committed, the task is made again and replays its input

    second = StreamTask(sub, 0, topology, config, second_collector, lambda: 0, input_partitions=sub_partitions(sub))
    second.open_stores()
    second.initialize_topology()
    for m in replay:
        second.add_messages([m])
    second.process_buffered(10)
    # with its predecessor's time (500), L100 would have been emitted unjoined at once (110 < 500): spurious
    assert second_collector.out == [(b"k", b"L100+R105", 105)]
    second.close()


def sub_partitions(sub: Any) -> list[tuple[str, int]]:
    return sorted((topic, 0) for topic in sub.source_topics)
