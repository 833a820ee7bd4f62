"""A record collector that keeps what a topology sends instead of producing it to Kafka.

The test driver (``streaming.testing``) and batch reprocessing (``streaming.batch``) run the production task
code (:class:`~streaming.runtime.task.StreamTask`) and the production commit path
(:func:`streaming.runtime.checkpoint.commit`) with this collector in place of
:class:`~streaming.runtime.record_collector.KafkaRecordCollector`: a send is kept in order, a flush has nothing to
wait for, and a commit records the committed offsets.

A record sent without a partition gets the one Kafka's producer would give it: ``murmur2(key) % partitions`` (the
Java client's default partitioner, and librdkafka's ``murmur2_random``, which Brook's producers use), with the
topic's partition count from ``partition_counts``; a topic not in it has one partition (the test driver's world).
A null key goes to partition 0 (a producer would pick one at random).
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import TopicPartition

from streaming.errors import ProductionError
from streaming.runtime.partitioning import partition_for_key
from streaming.runtime.record_collector import UNASSIGNED

__all__ = ["MemoryProducer", "MemoryRecordCollector", "SentRecord"]


@dataclass
class SentRecord:
    """A record as a topology sent it: serialized key and value, timestamp (ms), headers, its partition, and the
    sender's stream time when it sent it (-1: not known)."""

    __test__ = False  # not a pytest test class

    key: Any
    value: Any
    timestamp: int | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    partition: int = 0
    stream_time: int = -1


class MemoryProducer:
    """The :class:`~streaming.runtime.streams_producer.StreamsProducer` of a :class:`MemoryRecordCollector`:
    nothing is outstanding, and a commit records the committed offsets."""

    def __init__(self) -> None:
        self.committed: dict[tuple[str, int], int] = {}

    def begin(self) -> None:
        """Nothing to begin (no transactions)."""

    def commit(self, offsets: list[TopicPartition]) -> bool:
        self.committed.update({(tp.topic, tp.partition): tp.offset for tp in offsets})
        return True


class MemoryRecordCollector:
    """Keeps every record sent, per topic (``outputs``) and in send order (``pending``, for a caller that feeds
    records back to the topics the topology reads), instead of sending them to Kafka.

    ``partition_counts``: topic -> partitions, for records sent without a partition (see the module doc).
    ``existing_topics``: the topics a dynamic sink may send to (:meth:`topic_exists`); None: every topic exists,
    as Kafka's test driver creates every output topic on the fly.
    ``discard(topic)``: topics whose records are dropped at once (batch runs drop changelog writes: their state
    is carried by snapshots of the stores themselves). With ``max_message_bytes`` (``producer.message.max.bytes``)
    a record whose key, value and headers exceed it is refused as librdkafka refuses it at send time
    (:class:`ProductionError`), so the production error handler can be tested; the size is an approximation of
    librdkafka's (which adds a few bytes of framing).
    """

    def __init__(self, max_message_bytes: int | None = None, partition_counts: Mapping[str, int] | None = None,
                 discard: Callable[[str], bool] = lambda topic: False,
                 existing_topics: Iterable[str] | None = None) -> None:
        self.outputs: dict[str, deque[SentRecord]] = defaultdict(deque)
        self.pending: deque[tuple[str, SentRecord]] = deque()
        self.produced: set[str] = set()  # every topic written to, read or not
        self.producer = MemoryProducer()
        self.keep_outputs = True  # batch runs read ``pending`` only
        self.stream_time: Callable[[], int] = lambda: -1  # the sender's stream time, kept with each record
        self._max_bytes = max_message_bytes
        self._partition_counts = dict(partition_counts or {})
        self._discard = discard
        self._existing = None if existing_topics is None else frozenset(existing_topics)

    def send(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int, headers: Any,
             partition: int = UNASSIGNED) -> None:
        if self._max_bytes is not None:
            size = len(key or b"") + len(value or b"") + sum(len(k) + len(v or b"") for k, v in headers or [])
            if size > self._max_bytes:
                raise ProductionError(f"cannot send to topic {topic!r} (partition {partition}): KafkaError"
                                      f"{{code=MSG_SIZE_TOO_LARGE,val=10,str=\"Broker: Message size too large\"}} "
                                      f"({size} bytes > producer.message.max.bytes={self._max_bytes})")
        self.produced.add(topic)
        if self._discard(topic):
            return
        if partition == UNASSIGNED:
            count = self.partition_count(topic)
            partition = 0 if key is None or count == 1 else partition_for_key(key, count)
        record = SentRecord(key, value, timestamp, list(headers) if headers else [], partition, self.stream_time())
        if self.keep_outputs:
            self.outputs[topic].append(record)
        self.pending.append((topic, record))

    def partition_count(self, topic: str) -> int:
        return self._partition_counts.get(topic, 1)

    def topic_exists(self, topic: str) -> bool:
        """Whether a dynamic sink may send to ``topic``: any topic, unless ``existing_topics`` was given."""
        return self._existing is None or topic in self._existing

    def flush(self) -> None:
        """Nothing to wait for."""
