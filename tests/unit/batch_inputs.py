"""Helpers of the batch tests: generated records as a topic's partitions hold them, and outputs per key."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from streaming.batch import BatchPlan, BatchRecord, DayState, run_day, select_day
from streaming.runtime.partitioning import partition_for_key
from streaming.serdes import Serde
from streaming.testing import GeneratedRecord

TopicPartition = tuple[str, int]


def as_partitions(topic: str, records: Iterable[GeneratedRecord], partitions: int, key_serde: Serde[Any],
                  value_serde: Serde[Any]) -> dict[TopicPartition, list[BatchRecord]]:
    """``records`` as a producer with Kafka's default partitioner leaves them in ``topic`` (a null key: partition
    0), each partition numbered from offset 0."""
    placed: dict[TopicPartition, list[BatchRecord]] = defaultdict(list)
    for record in records:
        key = key_serde.serialize(record.key)
        partition = 0 if key is None else partition_for_key(key, partitions)
        tp = (topic, partition)
        placed[tp].append(BatchRecord(topic, partition, len(placed[tp]), record.timestamp, key,
                                      value_serde.serialize(record.value), record.headers or None))
    return dict(placed)


def run_days(plan: BatchPlan, settings: dict[str, Any], inputs: dict[TopicPartition, list[BatchRecord]],
             frontiers: Sequence[int], chunk: int = 1000) -> dict[str, list[BatchRecord]]:
    """One batch run per frontier, each from where the one before stopped and with the state it left; every
    run's outputs, concatenated per topic."""
    state: DayState | None = None
    starts: dict[TopicPartition, int] = {}
    outputs: dict[str, list[BatchRecord]] = defaultdict(list)
    for frontier in frontiers:
        day, starts = select_day(inputs, frontier, starts)
        result = run_day(plan, settings, day, state, chunk)
        state = result.state
        for topic, records in result.outputs.items():
            outputs[topic].extend(records)
    return dict(outputs)


def per_key(records: Iterable[Any], key_serde: Serde[Any], value_serde: Serde[Any]) -> dict[Any, list[tuple[Any, int]]]:
    """Each key's ``(value, timestamp)`` in the order the records came (serialized ``key``/``value``)."""
    keyed: dict[Any, list[tuple[Any, int]]] = defaultdict(list)
    for record in records:
        keyed[key_serde.deserialize(record.key)].append((value_serde.deserialize(record.value), record.timestamp))
    return dict(keyed)
