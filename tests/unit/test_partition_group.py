"""PartitionGroup: which buffered record a multi-partition task (a join) takes next, and when it waits."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from confluent_kafka import TIMESTAMP_CREATE_TIME, Message

from streaming import Serdes, StreamsBuilder
from streaming.config import StreamsConfig
from streaming.runtime.memory_collector import MemoryRecordCollector
from streaming.runtime.partition_group import PartitionGroup
from streaming.runtime.task import StreamTask

STREAM, TABLE = ("orders", 0), ("users", 0)


def group_with_a_stream_record(max_idle_ms: int) -> PartitionGroup:
    group = PartitionGroup([STREAM, TABLE], max_idle_ms)
    group.add(STREAM, [(10, "k", "v", None)])
    return group


def test_an_empty_partition_with_records_still_to_fetch_is_waited_for_until_they_come() -> None:
    lagging = lambda tp: False  # the table partition has records the consumer has not fetched (or lag unknown)
    for max_idle_ms in (0, 1_000):
        group = group_with_a_stream_record(max_idle_ms)
        assert group.next_queue(0, lagging) is None
        assert group.next_queue(60_000, lagging) is None
        group.add(TABLE, [(5, "k", "user", None)])
        assert group.next_queue(60_000, lagging) is group.queues[TABLE]  # the earlier table update first


def test_with_max_task_idle_minus_one_nothing_is_waited_for() -> None:
    group = group_with_a_stream_record(-1)
    assert group.next_queue(0, lambda tp: False) is group.queues[STREAM]


def test_an_empty_partition_that_is_caught_up_is_not_waited_for_by_default() -> None:
    asked: list[tuple[str, int]] = []

    def caught_up(tp: tuple[str, int]) -> bool:
        asked.append(tp)
        return True
    group = group_with_a_stream_record(0)
    group.add(STREAM, [(11, "k", "w", None)])
    assert group.next_queue(0, caught_up) is group.queues[STREAM]
    group.pop(group.queues[STREAM])
    assert group.next_queue(0, caught_up) is group.queues[STREAM]
    assert asked == [TABLE]  # asked once per processing round (same clock), not once per record
    group.next_queue(5, caught_up)
    assert asked == [TABLE, TABLE]


def test_max_task_idle_waits_that_long_for_a_caught_up_partition() -> None:
    group = group_with_a_stream_record(1_000)
    assert group.next_queue(0, lambda tp: True) is None
    assert group.next_queue(999, lambda tp: True) is None
    assert group.next_queue(1_000, lambda tp: True) is group.queues[STREAM]


def test_without_lag_information_an_empty_partition_counts_as_caught_up() -> None:
    assert group_with_a_stream_record(0).next_queue(0) is not None
    group = group_with_a_stream_record(1_000)
    assert group.next_queue(0) is None
    assert group.next_queue(1_000) is group.queues[STREAM]


def test_a_task_processes_buffered_runs_in_the_order_choosing_per_record_gives(tmp_path: Path) -> None:
    """Three partitions buffered in batches with random timestamps (ties and out-of-order included), processed in
    chunks of random size: the order is a model's, which takes the lowest head timestamp, a tie going to the
    partition listed first, one record at a time (``PartitionGroup.next_queue``; Kafka Streams' PartitionGroup)."""
    rng = random.Random(7)
    topics = ["a", "b", "c"]
    seen: list[tuple[str, int]] = []

    class Record:
        def init(self, context: Any) -> None:
            self.context = context

        def process(self, record: Any) -> None:
            seen.append((self.context.topic, self.context.offset))

    builder = StreamsBuilder()
    builder.stream(topics, key_serde=Serdes.String(), value_serde=Serdes.String()).process(Record)
    topology = builder.build().bind("order")
    config = StreamsConfig({"application.id": "order", "state.dir": str(tmp_path)}, require_bootstrap=False)
    [sub] = topology.subtopologies()
    task = StreamTask(sub, 0, topology, config, MemoryRecordCollector(), lambda: 0)
    task.open_stores()
    task.initialize_topology()
    queues: dict[str, list[tuple[int, int]]] = {topic: [] for topic in topics}  # the model: (timestamp, offset)
    offsets = dict.fromkeys(topics, 0)
    expected: list[tuple[str, int]] = []
    for _ in range(30):
        topic = rng.choice(topics)
        batch = []
        for _ in range(rng.randint(1, 40)):
            timestamp = rng.randint(0, 60)
            batch.append(Message(topic=topic, partition=0, offset=offsets[topic], key=b"k", value=b"v",
                                 timestamp=(TIMESTAMP_CREATE_TIME, timestamp)))
            queues[topic].append((timestamp, offsets[topic]))
            offsets[topic] += 1
        task.add_messages(batch)
        budget = rng.randint(1, 50)
        task.process_buffered(budget, lambda tp: True)
        for _ in range(budget):
            heads = [(queues[t][0][0], index, t) for index, (t, _) in enumerate(task.group.queues) if queues[t]]
            if not heads:
                break
            _, _, topic_of = min(heads)
            expected.append((topic_of, queues[topic_of].pop(0)[1]))
    assert seen == expected
    task.close()
