"""The stages of a scaling plan around the Spark work that talk to Kafka directly (no Spark)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import Producer

from streaming.admin import read_to_end
from streaming.scaling.errors import ScalingError
from streaming.scaling.plan import ScalingPlan, TopicScaling
from streaming.scaling.stream_time import new_stream_time_records, old_stream_times

__all__ = ["write_stream_time"]


def write_stream_time(client_config: Mapping[str, Any], plan: ScalingPlan, topic: TopicScaling,
                      committed: Mapping[tuple[str, int], int]) -> dict[int, bytes]:
    """The plan's stream-time stage for ``topic`` (a ``stream-time`` topic of the plan): read the old tasks' records
    (the plan's ``[earliest, end)``), and write one record per new task to ``topic.new_physical``, every new task
    starting from the highest time of the old tasks (:mod:`streaming.scaling.stream_time`). ``committed``: the
    group's offsets on the new generation, ``(new topic, partition)`` -> offset (the copy's ends). Returns the
    key of the record written per partition.

    Raises:
        ScalingError: ``topic`` is not a stream-time topic of ``plan``, or a write failed.
    """
    if topic.role != "stream-time" or topic not in plan.topics or topic.subtopology is None:
        raise ScalingError(f"topic {topic.topic} is not a stream-time topic of the plan of group {plan.group!r}")
    config = dict(client_config)
    starts = [(topic.physical, p, offset) for p, offset in enumerate(topic.earliest) if offset < topic.end[p]]
    old = [(m.key(), m.value()) for m in read_to_end(config, starts) if m.offset() < topic.end[m.partition()]] \
        if starts else []
    topic_times, node_times = old_stream_times(old, topic.physical)
    renamed = {t.physical: t.new_physical for t in plan.topics if t.role in ("input", "intermediate", "repartition")}
    records = new_stream_time_records(topic.subtopology, topic_times, node_times, renamed, committed, topic.new_partitions)
    failures: list[str] = []
    producer = Producer({**config, "enable.idempotence": True})
    for partition, (key, value) in records.items():
        producer.produce(topic.new_physical, value, key, partition=partition,
                         on_delivery=lambda error, _: failures.append(error.str()) if error else None)
    if producer.flush(60) or failures:
        raise ScalingError(f"writing {topic.new_physical} failed: {failures[0] if failures else 'timeout'}")
    return {partition: key for partition, (key, _) in records.items()}
