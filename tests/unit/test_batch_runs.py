"""Batch runs of a topology (``streaming.batch``): the same task code as the test driver, days run apart that give
what one uninterrupted run gives, and what batch refuses."""

from __future__ import annotations

import os
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from apps.orders import oracle
from apps.orders.pipeline import (
    APPLICATION_ID,
    CATEGORY_TOPICS,
    HOURLY_TOPIC,
    ITEMS_TOPIC,
    LATE_LINES_TOPIC,
    LINES_TOPIC,
    ORDERS_TOPIC,
    OUTPUT_TOPICS,
    USERS_TOPIC,
    WINDOW,
    topology,
)
from apps.orders.protection import ClearJsonSerde
from streaming import Serdes, Stores, StreamsBuilder, Topology
from streaming.batch import (
    BatchOutput,
    BatchPlan,
    BatchPlanError,
    BatchRecord,
    TaskState,
    batch_config,
    check_tasks,
    merge_partition,
    scratch_dir,
)
from streaming.batch import select_day as select
from streaming.batch.task_runner import SCRATCH_ENV, TMPFS, TMPFS_MIN_FREE
from streaming.errors import TopologyError
from streaming.processor import Processor, ProcessorContext, PunctuationType, Record
from streaming.testing import TopologyTestDriver, generators
from tests.unit.batch_inputs import as_partitions, per_key, run_days

String, Json, Long = Serdes.String(), Serdes.Json(), Serdes.Long()
Clear = ClearJsonSerde()  # the outputs' encrypted fields decrypted: ciphertexts differ run to run
HOUR = 3_600_000
OUTPUTS = OUTPUT_TOPICS
SETTINGS = {"application.id": APPLICATION_ID}
START = generators.ORDERS_START_MS


def catalog_and_orders(count: int = 1500) -> tuple[list[Any], list[Any], list[Any]]:
    """Users, items, and a day of orders a minute apart: 10% up to 5 min out of order, 2% two hours late."""
    users = generators.users(30, seed=5, start_ms=START - HOUR)
    items = generators.items(20, seed=5, start_ms=START - HOUR)
    orders = generators.orders(count, seed=5, users=30, items=20, catalog_seed=5, step_ms=60_000, out_of_order=0.1,
                               max_disorder_ms=5 * 60_000, late=0.02, lateness_ms=2 * HOUR, duplicates=0.05,
                               invalid=0.05)
    return users, items, orders


def partitioned(partitions: int) -> tuple[BatchPlan, dict[tuple[str, int], list[BatchRecord]], tuple[Any, ...]]:
    users, items, orders = catalog_and_orders()
    inputs = {**as_partitions(USERS_TOPIC, users, partitions, String, Json),
              **as_partitions(ITEMS_TOPIC, items, partitions, String, Json),
              **as_partitions(ORDERS_TOPIC, orders, partitions, String, Json)}
    counts = dict.fromkeys((USERS_TOPIC, ITEMS_TOPIC, ORDERS_TOPIC, *OUTPUTS), partitions)
    return BatchPlan(topology(), APPLICATION_ID, counts), inputs, (users, items, orders)


def test_a_batch_run_gives_what_the_test_driver_gives_record_for_record() -> None:
    """One partition per topic, a commit after every record (the driver's cadence): the same records, in order."""
    plan, inputs, (users, items, orders) = partitioned(1)
    with TopologyTestDriver(topology(), SETTINGS) as driver:
        for topic, records in ((USERS_TOPIC, users), (ITEMS_TOPIC, items), (ORDERS_TOPIC, orders)):
            source = driver.create_input_topic(topic, String, Json)
            for record in records:
                source.pipe_input(record.key, record.value, timestamp=record.timestamp)
        expected = {topic: [(r.key, r.value, r.timestamp) for r in
                            driver.create_output_topic(topic, String, Clear).read_records_to_list()] for topic in OUTPUTS}
    outputs = run_days(plan, SETTINGS, inputs, [2**62], chunk=1)
    got = {topic: [(String.deserialize(r.key), Clear.deserialize(r.value), r.timestamp) for r in outputs.get(topic, [])]
           for topic in OUTPUTS}
    assert all(expected[topic] for topic in OUTPUTS if topic not in CATEGORY_TOPICS), "every output has records"
    assert sum(len(expected[topic]) for topic in CATEGORY_TOPICS) == len(expected[LINES_TOPIC])
    assert got == expected


def test_days_run_apart_give_what_one_run_gives_and_the_oracles_results() -> None:
    """Four partitions; three runs cut at frontiers a late order straddles, each from the state the one before left."""
    plan, inputs, (users, items, orders) = partitioned(4)
    frontiers = [START + 7 * HOUR + 123, START + 15 * HOUR, 2**62]
    late_across = [o for o in orders if o.late and o.timestamp < frontiers[0] <= max(
        p.timestamp for p in orders[:orders.index(o)])]
    assert late_across, "a late order arrives after the first frontier with a timestamp before it"
    whole = run_days(plan, SETTINGS, inputs, [2**62])
    apart = run_days(plan, SETTINGS, inputs, frontiers)
    for topic in OUTPUTS:
        assert per_key(apart.get(topic, []), String, Clear) == per_key(whole.get(topic, []), String, Clear), topic

    on_time, late = oracle.split_by_lateness(orders, users, items)
    window_ms = int(WINDOW.total_seconds() * 1000)
    finals = [Json.deserialize(r.value) for r in apart[HOURLY_TOPIC]]
    buyers = oracle.hourly_buyers(on_time, window_ms)
    assert {(f["region"], f["window_start"]): f["users"] for f in finals} == \
        {window: len(buyers[window]) for window in {(f["region"], f["window_start"]) for f in finals}}
    assert len(finals) > 50
    assert sorted((Json.deserialize(r.value)["order_id"], Json.deserialize(r.value)["item"])
                  for r in apart[LATE_LINES_TOPIC]) == sorted((line.order_id, line.item) for line in late)


def test_a_record_sent_behind_its_senders_stream_time_is_merged_by_that_stream_time() -> None:
    """Model: what several tasks send to one partition, ordered by (sender's stream time, task id, order sent)."""
    sent = [BatchOutput("t", 0, ts, b"k", str(n).encode(), None, task, n, stream_time)
            for n, (task, ts, stream_time) in enumerate([
                ("0_1", 100, 100), ("0_10", 50, 100), ("0_2", 200, 200), ("0_1", 20, 300), ("0_2", 300, 300),
                ("0_10", 90, 90)])]
    model = sorted(sent, key=lambda o: (o.stream_time, int(o.task.split("_")[1]), o.sequence))
    merged = merge_partition(reversed(sent), 7)
    assert [(r.offset, r.value) for r in merged] == [(7 + i, o.value) for i, o in enumerate(model)]
    assert [r.value for r in merged] == [b"5", b"0", b"1", b"2", b"3", b"4"]


def _records(*timestamps: int, partition: int = 0) -> list[BatchRecord]:
    return [BatchRecord("t", partition, offset, ts, None, None) for offset, ts in enumerate(timestamps)]


def test_a_day_stops_each_partition_at_its_first_record_at_or_past_the_frontier() -> None:
    inputs = {("t", 0): _records(5, 9, 10, 3, 12), ("t", 1): _records(1, 2, partition=1), ("t", 2): []}
    day, stops = select(inputs, 10, {})
    assert [r.offset for r in day[("t", 0)]] == [0, 1]  # 10 is the frontier itself; 3, after it, waits
    assert [r.offset for r in day[("t", 1)]] == [0, 1] and day[("t", 2)] == []
    assert stops == {("t", 0): 2, ("t", 1): 2, ("t", 2): 0}  # a partition that ran out: after its last record
    day, stops = select(inputs, 100, stops)
    assert [r.timestamp for r in day[("t", 0)]] == [10, 3, 12] and day[("t", 1)] == []
    assert stops == {("t", 0): 5, ("t", 1): 2, ("t", 2): 0}


class EmitEveryTenSeconds(Processor[str, str]):
    """Counts words; every 10 s of stream time forwards every count (the README's tour, step 2)."""

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.counts = context.get_state_store("counts")
        context.schedule(10_000, PunctuationType.STREAM_TIME, self.emit)

    def process(self, record: Record[str, str]) -> None:
        self.counts.put(record.value, (self.counts.get(record.value) or 0) + 1)

    def emit(self, timestamp: int) -> None:
        for word, count in self.counts.all():
            self.context.forward(Record(word, count, timestamp))


def _counting(punctuation: PunctuationType = PunctuationType.STREAM_TIME) -> Topology:
    processor = EmitEveryTenSeconds if punctuation is PunctuationType.STREAM_TIME else WallClockCounter
    return (Topology()
            .add_source("words", "words", key_serde=String, value_serde=String)
            .add_processor("count", processor, "words")
            .add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), String, Long),
                             "count")
            .add_sink("out", "counts", "count", key_serde=String, value_serde=Long))


def test_stream_time_punctuators_go_on_from_where_the_last_run_left_them() -> None:
    """Without the schedules carried over, the second run's first record would fire an extra punctuation."""
    words = [generators.GeneratedRecord(None, w, ts) for ts, w in
             [(0, "a"), (4_000, "b"), (9_000, "a"), (12_000, "c"), (15_000, "a"), (23_000, "b"), (31_000, "a")]]
    inputs = as_partitions("words", words, 1, String, String)
    plan = BatchPlan(_counting(), "counting", {"words": 1, "counts": 1})
    whole = run_days(plan, {"application.id": "counting"}, inputs, [2**62], chunk=1)
    apart = run_days(plan, {"application.id": "counting"}, inputs, [15_000, 2**62], chunk=1)
    assert [(r.key, r.value, r.timestamp) for r in apart["counts"]] == \
        [(r.key, r.value, r.timestamp) for r in whole["counts"]]
    assert [r.timestamp for r in whole["counts"]] == [0, 12_000, 12_000, 12_000, 23_000, 23_000, 23_000, 31_000,
                                                      31_000, 31_000]


class WallClockCounter(EmitEveryTenSeconds):
    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.counts = context.get_state_store("counts")
        context.schedule(1_000, PunctuationType.WALL_CLOCK_TIME, self.emit)


def test_a_wall_clock_punctuator_is_refused_naming_the_processor() -> None:
    plan = BatchPlan(_counting(PunctuationType.WALL_CLOCK_TIME), "counting", {"words": 1, "counts": 1})
    with pytest.raises(TopologyError) as refused:
        check_tasks(plan, {"application.id": "counting"})
    message = str(refused.value)
    assert "processor 'count' schedules a wall-clock punctuator (every 1000 ms)" in message
    assert "batch reprocessing" in message and "PunctuationType.STREAM_TIME" in message


def test_sub_topologies_feeding_each_other_are_refused_naming_the_topics() -> None:
    cycle = (Topology()
             .add_source("a-in", "ping").add_sink("a-out", "pong", "a-in")
             .add_source("b-in", "pong").add_sink("b-out", "ping", "b-in"))
    with pytest.raises(BatchPlanError, match=r"feed each other in a cycle through topics \['ping', 'pong'\]"):
        BatchPlan(cycle, "cycle", {"ping": 1, "pong": 1})


def test_a_global_table_is_refused() -> None:
    builder = StreamsBuilder()
    builder.global_table("regions", materialized="regions")
    builder.stream("orders").to("out")
    with pytest.raises(BatchPlanError, match=r"global stores \['regions'\] cannot run in batch"):
        BatchPlan(builder.build(), "app", {"regions": 1, "orders": 1, "out": 1})


def test_a_task_state_survives_json() -> None:
    state = TaskState(partition_times={("orders", 3): 17}, observed={"KSTREAM-AGGREGATE-1": 12},
                      punctuations={"count": [20_000]}, next_offsets={("orders", 3): 41, ("app-x-repartition", 3): 9})
    assert TaskState.from_json(state.to_json()) == state


def test_the_plan_orders_stages_after_the_sub_topologies_feeding_them() -> None:
    plan, _, _ = partitioned(4)
    stages = [sub.id for sub in plan.stages]
    feeders: dict[int, set[int]] = defaultdict(set)
    for sub in plan.topology.subtopologies():
        for topic in sub.sink_topics:
            if topic in plan.fed_topics:
                feeders[plan.reader_of(topic)].add(sub.id)
    assert all(stages.index(f) < stages.index(s) for s, fs in feeders.items() for f in fs) and len(feeders) == 2
    assert plan.input_topics == (ITEMS_TOPIC, ORDERS_TOPIC, USERS_TOPIC)
    assert set(plan.output_topics) == set(OUTPUTS) - set(CATEGORY_TOPICS)
    assert plan.dynamic_output_topics == CATEGORY_TOPICS
    assert {sub: len(tasks) for sub, tasks in plan.tasks.items()} == dict.fromkeys(stages, 4)


def test_batch_tasks_keep_their_scratch_stores_on_tmpfs_or_where_brook_batch_scratch_says(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SCRATCH_ENV, str(tmp_path))
    assert scratch_dir() == str(tmp_path)
    assert Path(batch_config({"application.id": "a"})["state.dir"]).parent == tmp_path
    monkeypatch.delenv(SCRATCH_ENV)
    roomy = os.path.isdir(TMPFS) and shutil.disk_usage(TMPFS).free >= TMPFS_MIN_FREE
    assert scratch_dir() == (TMPFS if roomy else None)
