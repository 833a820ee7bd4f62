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

    def __init__(self, task_id: str, topic: str, partition: int, offset: int, timestamp_ms: int,
                 headers: Any) -> None:
        self.task_id = task_id
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self.timestamp_ms = timestamp_ms
        self._headers = headers

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def headers(self) -> Any:
        return self._headers


def output_of(source: Any, task_id: str) -> str:
    """What a production error message adds about the input record ``source`` (a ``Message`` or a
    :class:`RecordSource`) of task ``task_id`` whose output failed."""
    return (f" (output of the record at topic {source.topic()!r} partition {source.partition()} offset "
            f"{source.offset()}, task {task_id})")
