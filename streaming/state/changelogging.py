"""Change logging: every write to a logged store also goes to its changelog topic."""

from __future__ import annotations

from typing import Any


class ChangeLogger:
    """Sends ``(key, value)`` to partition ``partition`` of the changelog (the task's partition).

    The record's timestamp is the write's: the timestamp of the record that made it, or for a cached
    store the cache entry's (for timestamped stores, the value's timestamp, which a restore reads back).
    The record collector batches the sends; the commit flushes the producer before committing input
    offsets, so a write always reaches the changelog before the commit that covers it.
    """

    __slots__ = ("topic", "partition", "_send")

    def __init__(self, collector: Any, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self._send = collector.send

    def log(self, key: bytes, value: bytes | None, timestamp: int) -> None:
        self._send(self.topic, key, value, timestamp if timestamp >= 0 else 0, None, self.partition)
