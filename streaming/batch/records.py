"""The records a batch run reads and writes, as Kafka holds them: serialized key and value, headers, partition,
offset and timestamp (epoch ms)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka import TIMESTAMP_CREATE_TIME, Message

__all__ = ["BatchOutput", "BatchRecord", "Headers", "as_message"]

Headers = list[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """One record of a topic partition, in offset order with the others of its partition: an archived input
    record, or a record the app wrote to a topic it reads itself (a repartition topic) with its batch offset."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled by its fields in order (a Spark run ships many): several times faster than the slots dataclass's
        # __getstate__/__setstate__, which look up the fields for every record.
        return BatchRecord, (self.topic, self.partition, self.offset, self.timestamp, self.key, self.value,
                             self.headers)


@dataclass(frozen=True, slots=True)
class BatchOutput:
    """A record a task sent: to ``topic`` partition ``partition`` (Kafka's default partitioner where the sink chose
    none), the ``sequence``-th record task ``task`` sent in the run, when the task's stream time was
    ``stream_time``."""

    topic: str
    partition: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers | None
    task: str
    sequence: int
    stream_time: int

    def __reduce__(self) -> tuple[Any, ...]:
        # as BatchRecord's
        return BatchOutput, (self.topic, self.partition, self.timestamp, self.key, self.value, self.headers,
                             self.task, self.sequence, self.stream_time)

    def at(self, offset: int) -> BatchRecord:
        """This record as the ``offset``-th record of its partition (its place in the merged partition)."""
        return BatchRecord(self.topic, self.partition, offset, self.timestamp, self.key, self.value, self.headers)


def as_message(record: BatchRecord) -> Any:
    """The confluent-kafka ``Message`` a stream task takes (create-time timestamp, as a producer sets it)."""
    return Message(topic=record.topic, partition=record.partition, offset=record.offset, key=record.key,
                   value=record.value, timestamp=(TIMESTAMP_CREATE_TIME, record.timestamp),
                   headers=record.headers or None)
