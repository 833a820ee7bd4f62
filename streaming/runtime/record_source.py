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

from functools import partial
from operator import itemgetter
from typing import Any


class RecordSource(tuple):
    """Where a record came from: the task that processed it, its topic, partition, offset, timestamp (epoch ms, as
    the task processed it: ``timestamp_ms``) and headers. A tuple underneath, so that a flush makes one per entry
    without a Python constructor call (:data:`record_source_of`)."""

    __slots__ = ()

    def __new__(cls, task_id: str, topic: str, partition: int, offset: int, timestamp_ms: int,
                headers: Any) -> RecordSource:
        return tuple.__new__(cls, (task_id, topic, partition, offset, timestamp_ms, headers))

    task_id: str = property(itemgetter(0))  # type: ignore[assignment]
    timestamp_ms: int = property(itemgetter(4))  # type: ignore[assignment]

    def topic(self) -> str:
        return self[1]  # type: ignore[no-any-return]

    def partition(self) -> int:
        return self[2]  # type: ignore[no-any-return]

    def offset(self) -> int:
        return self[3]  # type: ignore[no-any-return]

    def headers(self) -> Any:
        return self[5]

    def __repr__(self) -> str:
        return (f"RecordSource(task_id={self[0]!r}, topic={self[1]!r}, partition={self[2]}, offset={self[3]}, "
                f"timestamp_ms={self[4]}, headers={self[5]!r})")


#: ``record_source_of((task_id, topic, partition, offset, timestamp_ms, headers))`` is that :class:`RecordSource`,
#: made without a Python call (a flush's path, once per forwarded entry).
record_source_of = partial(tuple.__new__, RecordSource)


def output_of(source: Any, task_id: str) -> str:
    """What a production error message adds about the input record ``source`` (a ``Message`` or a
    :class:`RecordSource`) of task ``task_id`` whose output failed."""
    return (f" (output of the record at topic {source.topic()!r} partition {source.partition()} offset "
            f"{source.offset()}, task {task_id})")
