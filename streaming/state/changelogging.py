"""Change logging: every write to a logged store also goes to its changelog topic."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class ChangeLogger:
    """Sends ``(key, value)`` to partition ``partition`` of the changelog (the task's partition).

    The record collector batches the sends; the commit flushes the producer before committing input
    offsets, so a write always reaches the changelog before the commit that covers it.
    """

    __slots__ = ("topic", "partition", "_send", "_timestamp")

    def __init__(self, collector: Any, topic: str, partition: int, timestamp: Callable[[], int]) -> None:
        self.topic = topic
        self.partition = partition
        self._send = collector.send
        self._timestamp = timestamp

    def log(self, key: bytes, value: bytes | None) -> None:
        timestamp = self._timestamp()
        self._send(self.topic, key, value, timestamp if timestamp >= 0 else 0, None, self.partition)
