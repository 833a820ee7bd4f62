"""Load shedding: ``processing.overflow.policy=shed`` drops the input a stream thread takes beyond its rate limit.

Under the default policy (``backpressure``) a thread over its rate limit (:mod:`streaming.runtime.rate_limit`)
waits: nothing is lost, lag grows. Under ``shed`` it polls without waiting and :meth:`LoadShedder.admit` lets
through, of each poll, as many records as the limit allows now (in the order the poll returned them); the rest
are shed — never processed, but consumed: their offsets are committed like processed ones (:meth:`settle`), so a
restart does not read them again. Every shed record is

- counted per source topic and partition (``brook_shed_records_total{topic,partition}``),
- logged with its offsets: at most one line per partition every :data:`SHED_LOG_INTERVAL_S`, naming the
  first..last offset shed in that interval and how many,
- with ``processing.overflow.shed.divert=true``, written to ``<application.id>-shed`` (same partition number as
  its source, modulo the shed topic's partitions) with its original key, value, headers and timestamp plus the
  headers :data:`SOURCE_TOPIC`, :data:`SOURCE_PARTITION` and :data:`SOURCE_OFFSET`. The divert goes through the
  record collector like every output: under at-least-once it is acknowledged before the offsets past it are
  committed; under exactly-once it belongs to the same transaction as those offsets.

Records of partitions whose task is not running (restoring, or revoked since the poll) are neither admitted
nor shed: they go where the stream thread puts such records (:meth:`StreamThread._hand_over`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from streaming.runtime.rate_limit import InputRateLimiter

log = logging.getLogger(__name__)

#: At most one log line per shedding partition in this many seconds.
SHED_LOG_INTERVAL_S = 5.0
SOURCE_TOPIC = "brook.shed.source.topic"
SOURCE_PARTITION = "brook.shed.source.partition"
SOURCE_OFFSET = "brook.shed.source.offset"

TopicPartition = tuple[str, int]
Send = Callable[[str, bytes | None, bytes | None, int, Any, int], None]


class _Task(Protocol):
    """What the shedder needs of a :class:`~streaming.runtime.task.StreamTask`."""

    initialized: bool
    consumed: dict[TopicPartition, int]

    def buffered_count(self, tp: TopicPartition) -> int: ...


class LoadShedder:
    """Admits a stream thread's input up to ``limiter``'s limit and sheds the rest (see the module doc).
    ``divert``: ``(send, topic, partitions)`` to write shed records to the shed topic; None: count and log only."""

    def __init__(self, limiter: InputRateLimiter, divert: tuple[Send, str, int] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._limiter = limiter
        self._divert = divert
        self._clock = clock
        self.shed: dict[TopicPartition, int] = {}
        """Records shed so far, per source partition (read by the metrics collector)."""
        # Per partition: the task that shed and the offset past its last shed record, not yet in task.consumed.
        self._pending: dict[TopicPartition, tuple[_Task, int]] = {}
        self._unlogged: dict[TopicPartition, list[int]] = {}  # [first offset, last offset, count] since the last log
        self._logged_at = float("-inf")

    def admit(self, messages: list[Any], task_of: dict[TopicPartition, _Task]) -> list[Any]:
        """The messages of one poll to process: those the limit allows now, errors, and those of partitions
        without a running task. The others are shed (counted, logged, diverted) here."""
        allowed = self._limiter.allowance(len(messages))
        admitted: list[Any] = []
        taken: list[Any] = []
        for message in messages:
            if message.error() is None:
                task = task_of.get((message.topic(), message.partition()))
                if task is not None and task.initialized:
                    if not allowed:
                        self._shed(message, task)
                        continue
                    allowed -= 1
                    taken.append(message)
            admitted.append(message)
        self._limiter.charge(taken)
        if self._unlogged and self._clock() - self._logged_at >= SHED_LOG_INTERVAL_S:
            self.log_shed()
        return admitted

    def _shed(self, message: Any, task: _Task) -> None:
        tp = (message.topic(), message.partition())
        offset = message.offset()
        self.shed[tp] = self.shed.get(tp, 0) + 1
        self._pending[tp] = (task, offset + 1)
        span = self._unlogged.get(tp)
        if span is None:
            self._unlogged[tp] = [offset, offset, 1]
        else:
            span[1] = offset
            span[2] += 1
        if self._divert is not None:
            send, topic, partitions = self._divert
            headers = [*(message.headers() or []), (SOURCE_TOPIC, tp[0].encode()),
                       (SOURCE_PARTITION, str(tp[1]).encode()), (SOURCE_OFFSET, str(offset).encode())]
            send(topic, message.key(), message.value(), max(message.timestamp()[1], 0), headers,
                 tp[1] % partitions)

    def log_shed(self) -> None:
        """Log what was shed since the last call: one line per partition (first..last offset, count)."""
        for (topic, partition), (first, last, count) in sorted(self._unlogged.items()):
            log.warning("shed %d records of %s[%d] beyond the rate limit (offsets %d..%d)%s", count, topic,
                        partition, first, last, f", diverted to {self._divert[1]}" if self._divert else "")
        self._unlogged.clear()
        self._logged_at = self._clock()

    def settle(self, task_of: dict[TopicPartition, _Task]) -> None:
        """Mark shed records consumed in their task (so the next commit covers them) once no record of their
        partition waits in the task's buffer (those may come before them: committing past them would lose them).
        Shed records of a partition revoked since (its task is gone or another one) are left uncommitted: whoever
        owns it next reads them again."""
        if not self._pending:
            return
        for tp, (task, end) in list(self._pending.items()):
            if task_of.get(tp) is not task or task.consumed.get(tp, -1) >= end:
                del self._pending[tp]
            elif task.buffered_count(tp) == 0:
                task.consumed[tp] = end
                del self._pending[tp]
