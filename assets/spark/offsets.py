"""Partitions and offset bounds of Kafka topics, read the way that is right on every broker.

The end of a partition is the high watermark carried by Fetch responses: a consumer assigned at the
end reads to partition EOF, whose offset is that watermark. ListOffsets "latest" is never trusted
for it (the embedded broker answers it with the last batch's base offset + 1; see docs/broker-limits.md): here
it only decides where the fetch starts, so at most one batch is read per partition. The earliest
offset is the log start offset the same fetches report.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, TopicPartition

from assets.spark.options import KafkaSourceError
from streaming.config import SECRET_KEYS

__all__ = ["PartitionBounds", "partition_bounds", "reader_config", "reader_consumer", "topic_partitions"]

DEFAULT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class PartitionBounds:
    """The offsets a partition holds now: ``earliest`` (log start) to ``end`` (exclusive)."""

    earliest: int
    end: int


def reader_config(client_config: Mapping[str, str], purpose: str) -> dict[str, Any]:
    """The librdkafka settings of a reader: ``client_config`` (bootstrap servers and security, from the
    ``kafka.*`` options) plus what an ``assign()`` read needs: no group join, no commits, EOF events,
    errors on bad offsets."""
    config: dict[str, Any] = {"fetch.queue.backoff.ms": 10, **client_config}
    config.update({
        # librdkafka wants a group id even for assign(); no group is ever joined with assign().
        "group.id": f"brook-spark-{purpose}-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
    })
    return config


def reader_consumer(client_config: Mapping[str, str], purpose: str) -> Consumer:
    """A consumer for ``assign()`` reads (:func:`reader_config`).

    Raises:
        KafkaSourceError: librdkafka rejected a setting (the message names it, never a secret value).
    """
    try:
        return Consumer(reader_config(client_config, purpose))
    except KafkaException as exc:
        raise KafkaSourceError(f"invalid Kafka client setting: {_redact(str(exc.args[0]), client_config)}") from None


def _redact(message: str, client_config: Mapping[str, str]) -> str:
    for key, value in client_config.items():
        if value and SECRET_KEYS.search(key):
            message = message.replace(str(value), "***")
    return message


def topic_partitions(consumer: Consumer, topics: Iterable[str], timeout: float = 10.0) -> dict[str, list[int]]:
    """Partition numbers of each topic, from cluster metadata.

    Raises:
        KafkaSourceError: a topic does not exist, or the cluster did not answer in time.
    """
    try:
        # All-topics metadata: asking for one topic could auto-create it on some brokers.
        metadata = consumer.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise KafkaSourceError(f"cannot read cluster metadata: {exc.args[0]}") from None
    found: dict[str, list[int]] = {}
    missing: list[str] = []
    for topic in topics:
        entry = metadata.topics.get(topic)
        if entry is None or entry.error is not None or not entry.partitions:
            missing.append(topic)
        else:
            found[topic] = sorted(entry.partitions)
    if missing:
        raise KafkaSourceError(f"topic(s) {missing} do not exist on the cluster")
    return found


def partition_bounds(consumer: Consumer, partitions: Iterable[tuple[str, int]],
                     timeout: float = DEFAULT_TIMEOUT_S) -> dict[tuple[str, int], PartitionBounds]:
    """Earliest and end offset of each ``(topic, partition)``, from fetch responses (see module doc).

    The consumer is re-assigned; pass one made by :func:`reader_consumer`.

    Raises:
        KafkaSourceError: a partition did not reach EOF within ``timeout`` seconds, or a fetch failed.
    """
    wanted = list(partitions)
    if not wanted:
        return {}
    consumer.assign([TopicPartition(topic, p, OFFSET_END) for topic, p in wanted])
    ends: dict[tuple[str, int], int] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(ends) < len(wanted):
            if time.monotonic() > deadline:
                late = [f"{t}[{p}]" for t, p in wanted if (t, p) not in ends]
                raise KafkaSourceError(f"partitions {late} did not report their end offset within {timeout:.0f} s")
            for message in consumer.consume(10_000, 0.02):  # short: consume() waits out its timeout
                error = message.error()
                if error is None:
                    continue  # a record of the last batch, before the end
                if error.code() == KafkaError._PARTITION_EOF:
                    # The first EOF is the end; later ones (records produced meanwhile) are not wanted.
                    ends.setdefault((message.topic(), message.partition()), message.offset())
                else:
                    raise KafkaSourceError(
                        f"finding the end of {message.topic()}[{message.partition()}]: {error.str()}")
        bounds = {}
        for topic, p in wanted:
            low, _high = consumer.get_watermark_offsets(TopicPartition(topic, p), cached=True)
            bounds[(topic, p)] = PartitionBounds(earliest=max(low, 0), end=ends[(topic, p)])
        return bounds
    finally:
        consumer.unassign()
