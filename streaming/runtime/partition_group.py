"""PartitionGroup: per-partition record queues of one task; the next record is the lowest timestamp."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Any

# A buffered record: (timestamp, key, value, message). The message keeps topic/partition/offset/headers.
Buffered = tuple[int, Any, Any, Any]


class RecordQueue:
    """Decoded records of one input partition, in offset order."""

    __slots__ = ("partition", "partition_time", "processed_time", "records", "topic")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.records: deque[Buffered] = deque()
        self.partition_time = -1  # highest timestamp seen on this partition (buffered or processed)
        self.processed_time = -1  # highest timestamp processed from it: what a commit records as partition time


class PartitionGroup:
    """Chooses which buffered record a multi-partition task processes next.

    The record with the lowest timestamp among the heads of the queues goes first, so a task reading
    several co-partitioned topics processes them in event-time order. When a queue is empty, the task
    waits as Kafka Streams does (KIP-695) by ``max.task.idle.ms``:

    - ``-1``: never; process what is buffered.
    - ``0`` (the default): while the empty partition has records on the broker the consumer has not
      taken (``caught_up(tp)`` is False: its last fetch's high watermark is past the position, or it
      was not fetched yet). So a stream joined with a table reads the table's earlier updates first,
      also at start-up; a table read to its end holds nothing back.
    - ``> 0``: as ``0``, and also up to that many ms for a partition read to its end, for records not
      yet on the broker (an upstream app running behind).

    ``caught_up=None`` (the test driver, which has every record at hand) counts as caught up.
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
        idle_empty = False
        for tp, queue in self.queues.items():
            if not queue.records:
                if self._max_idle_ms < 0:
                    continue
                if caught_up is not None and not self._is_caught_up(tp, now_ms, caught_up):
                    return None  # records to fetch: wait for them
                idle_empty = True
            elif best is None or queue.records[0][0] < best.records[0][0]:
                best = queue
        if best is None:
            return None
        if idle_empty and self._max_idle_ms > 0:
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

    def lowest_head_besides(self, chosen: RecordQueue) -> float:
        """The lowest head timestamp of the queues other than ``chosen`` (infinity when they are all empty)."""
        return min((queue.records[0][0] for queue in self.queues.values() if queue is not chosen and queue.records),
                   default=math.inf)

    def pop(self, queue: RecordQueue) -> Buffered:
        self.buffered -= 1
        return queue.records.popleft()

    def clear(self) -> None:
        for queue in self.queues.values():
            queue.records.clear()
        self.buffered = 0
