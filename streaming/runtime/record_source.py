"""RecordSource: the input record behind a cached write (Kafka Streams' ProcessorRecordContext), and how errors name
an input record.

Kafka Streams keeps a record context with every cache entry (``LRUCacheEntry``: topic, partition, offset,
timestamp and headers of the write, without the raw key and value bytes) and sets it as the current
context while a flush forwards the entry (``CachingKeyValueStore.putAndMaybeForward``), so an error
downstream reaches ``processing.exception.handler`` naming that record (``ProcessorNode.process``). Brook
does the same: a cache entry keeps its input record's topic, partition, offset and timestamp
(``StreamTask._record_source``, taken once per input record; the entry has the write's headers), and a
RecordSource is what the task makes its current record of while a flush forwards the entry.

Its methods are named as confluent-kafka ``Message``'s, so ``context.topic``/``partition``/``offset``/``headers``
answer with the entry's source meanwhile, as in Kafka Streams. It holds no key or value bytes.
"""

from __future__ import annotations

from typing import Any


class RecordSource:
    """Where a record came from: the task that processed it, its topic, partition, offset, timestamp (epoch ms, as
    the task processed it: ``timestamp_ms``) and headers."""

    __slots__ = ("_headers", "_offset", "_partition", "_topic", "task_id", "timestamp_ms")

    def __init__(self, task_id: str | None, topic: str, partition: int, offset: int, timestamp_ms: int,
                 headers: Any) -> None:
        self.task_id = task_id
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self.timestamp_ms = timestamp_ms
        self._headers = headers

    @classmethod
    def of(cls, task_id: str | None, record: Any) -> RecordSource:
        """The source of a consumed (or test-driver) ``Message``, or of a RecordSource, in task ``task_id``."""
        if isinstance(record, RecordSource):
            return record
        return cls(task_id, record.topic(), record.partition(), record.offset(), record.timestamp()[1],
                   record.headers())

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def headers(self) -> Any:
        return self._headers

    def __str__(self) -> str:
        return describe(self, self.task_id)


def describe(record: Any, task_id: str | None) -> str:
    """``record`` (a ``Message`` or a :class:`RecordSource`) as error messages name an input record."""
    return (f"the record at topic {record.topic()!r} partition {record.partition()} offset {record.offset()}, "
            f"task {task_id}")


def output_of(source: Any, task_id: str | None) -> str:
    """What a production error message adds about the input record ``source`` (a ``Message`` or a
    :class:`RecordSource`) of a failed output; "" when there is none (changelog writes, dead letters, the
    stream-time topic, a punctuator's outputs)."""
    return "" if source is None else f" (output of {describe(source, task_id)})"
