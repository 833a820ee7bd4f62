"""PartitionGroup: per-partition record queues of one task; the next record is the lowest timestamp."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

# A buffered record: (timestamp, key, value, message). The message keeps topic/partition/offset/headers.
Buffered = tuple[int, Any, Any, Any]


class RecordQueue:
    """Decoded records of one input partition, in offset order."""

    __slots__ = ("topic", "partition", "records", "partition_time")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.records: deque[Buffered] = deque()
        self.partition_time = -1  # highest timestamp seen on this partition


class PartitionGroup:
    """Chooses which buffered record a multi-partition task processes next.

    The record with the lowest timestamp among the heads of the queues goes first, so a task reading
    several co-partitioned topics processes them in event-time order. When some queues are empty, the
    task waits up to ``max.task.idle.ms`` for them before processing what it has (0 or -1: don't wait;
    Brook does not emulate Kafka Streams' "wait while a fetch is pending" for 0). As in Kafka Streams
    (KIP-695), an empty partition that is caught up — ``caught_up(tp)``: everything up to the high
    watermark of its last fetch was taken — is not waited for: there is nothing to wait for, so a
    stream joined with a table that rarely changes is not held back after every table update.
    """

    def __init__(self, partitions: list[tuple[str, int]], max_idle_ms: int) -> None:
        self.queues = {tp: RecordQueue(*tp) for tp in partitions}
        self._max_idle_ms = max_idle_ms
        self._idle_since: int | None = None
        self.buffered = 0
        self._caught_up_at = -1  # the time of the answers in _caught_up (asked once per processing round)
        self._caught_up: dict[tuple[str, int], bool] = {}

    def add(self, tp: tuple[str, int], records: list[Buffered]) -> None:
        queue = self.queues[tp]
        queue.records.extend(records)
        self.buffered += len(records)

    def size(self, tp: tuple[str, int]) -> int:
        return len(self.queues[tp].records)

    def next_queue(self, now_ms: int, caught_up: Callable[[tuple[str, int]], bool] | None = None
                   ) -> RecordQueue | None:
        """The queue whose head should be processed next, or None to wait (or when all are empty)."""
        best: RecordQueue | None = None
        missing = False
        for tp, queue in self.queues.items():
            if not queue.records:
                if not missing and not (caught_up is not None and self._is_caught_up(tp, now_ms, caught_up)):
                    missing = True
            elif best is None or queue.records[0][0] < best.records[0][0]:
                best = queue
        if best is None:
            return None
        if missing and self._max_idle_ms > 0:
            if self._idle_since is None:
                self._idle_since = now_ms
            if now_ms - self._idle_since < self._max_idle_ms:
                return None
        else:
            self._idle_since = None
        return best

    def _is_caught_up(self, tp: tuple[str, int], now_ms: int, caught_up: Callable[[tuple[str, int]], bool]) -> bool:
        """``caught_up(tp)``, asked once per partition per processing round (per ``now_ms``): an empty queue
        gets no records while its task processes."""
        if now_ms != self._caught_up_at:
            self._caught_up.clear()
            self._caught_up_at = now_ms
        known = self._caught_up.get(tp)
        if known is None:
            known = self._caught_up[tp] = caught_up(tp)
        return known

    def pop(self, queue: RecordQueue) -> Buffered:
        self.buffered -= 1
        return queue.records.popleft()

    def clear(self) -> None:
        for queue in self.queues.values():
            queue.records.clear()
        self.buffered = 0
