"""The stages of a scaling plan around the Spark work that talk to Kafka directly (no Spark)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from streaming.admin import read_to_end
from streaming.reset.cluster import committed_offsets
from streaming.reset.errors import ResetError
from streaming.scaling.errors import ScalingError
from streaming.scaling.plan import ScalingPlan, TopicScaling
from streaming.scaling.stream_time import new_stream_time_records, old_stream_times

__all__ = ["commit_offsets", "write_stream_time"]


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


def commit_offsets(client_config: Mapping[str, Any], application_id: str, offsets: Mapping[tuple[str, int], int],
                   timeout: float = 30.0) -> dict[str, int]:
    """The plan's commit stage: the group ``application_id``'s offsets on the new generation (the copy's ends, so
    nothing copied is processed again), committed as Kafka's ``StreamsResetter`` does (a consumer with the group id
    that never joins: ``commit``; a broker takes it only while the group has no members, which the plan checked),
    then read back. Returns them as ``topic[partition]`` -> offset.

    Raises:
        ScalingError: the broker refused an offset, or what it reads back differs (names the partitions).
    """
    config = dict(client_config)
    consumer = Consumer({**config, "group.id": application_id, "enable.auto.commit": False,
                         "client.id": f"brook-scaling-{uuid.uuid4().hex[:8]}"})
    try:
        result = consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                                 asynchronous=False)
    finally:
        consumer.close()
    failed = [f"{tp.topic}[{tp.partition}]: {tp.error.str()}" for tp in result or [] if tp.error is not None]
    if failed:
        raise ScalingError(f"the broker refused offsets of group {application_id!r}: {'; '.join(failed[:3])}")
    try:
        committed = committed_offsets(AdminClient(config), application_id, timeout)
    except ResetError as exc:
        raise ScalingError(str(exc)) from None
    wanted = {f"{t}[{p}]": o for (t, p), o in offsets.items()}
    wrong = [f"{key} is {committed.get(key, '-')}, not {offset}" for key, offset in wanted.items()
             if committed.get(key) != offset]
    if wrong:
        raise ScalingError(f"committed offsets of group {application_id!r} read back differ: {'; '.join(wrong[:3])}")
    return wanted
