"""The offsets holding a day's records in each partition, found by the records' own timestamps.

The assumption (``archive.max_disorder_minutes`` = M): in each partition, a record's timestamp is at
most M behind the largest timestamp before it. Then, for a day ``[D, D + 1 day)``:

- no record before the first record with timestamp ``>= D - M`` can belong to the day, and
- no record at or after the first record with timestamp ``>= D + 1 day + M`` can either,

so reading between those two offsets and keeping the records whose timestamp is in the day gives
exactly the day, records out of order across midnight included. Neither bound needs the exact
"first record at or after T" (which only a full scan finds when timestamps are out of order): any
*transition* for ``T`` -- an offset whose record is ``>= T`` while the record just before it is
``< T`` -- bounds the day as well (see :func:`transition`), and a binary search over record
timestamps finds one in ~log2(n) single-record fetches. The broker's ``offsets_for_times`` answer is
tried first, as a hint kept only when those two records confirm it (Apache Kafka answers exactly;
the embedded broker answers by append time at batch granularity, and 0 past the end).

The archive verifies the assumption on what it reads (:mod:`assets.archive.materialize`): a record
further behind than M fails the run, naming it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

__all__ = ["DayRange", "Probe", "day_offset_ranges", "transition"]

DAY_MS = 86_400_000
PROBE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class DayRange:
    """Offsets ``[start, end)`` of one partition that hold every record of the day (and some around it)."""

    partition: int
    start: int
    end: int
    closed: bool
    """A record with timestamp ``>= day end + M`` exists: no record of the day can still be appended."""
    probes: int
    """Single records fetched to find the two bounds."""
    hints_kept: int
    """Bounds (0-2) where the broker's ``offsets_for_times`` answer was confirmed and used."""


class Probe:
    """Fetches the first record at or after an offset of one partition (its offset and timestamp).

    The consumer must come from ``assets.spark.offsets.reader_consumer`` (assign only, EOF events).
    """

    def __init__(self, consumer: Consumer, topic: str, partition: int, end: int,
                 timeout: float = PROBE_TIMEOUT_S) -> None:
        self.consumer = consumer
        self.topic = topic
        self.partition = partition
        self.end = end
        self.timeout = timeout
        self.count = 0

    def first_at(self, offset: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after ``offset`` and before ``end``, or None."""
        if offset >= self.end:
            return None
        self.count += 1
        self.consumer.assign([TopicPartition(self.topic, self.partition, offset)])
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            message = self.consumer.poll(0.2)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return None
                raise RuntimeError(f"reading {self.topic}[{self.partition}] at offset {offset}: {error.str()}")
            if message.offset() < offset:
                continue  # fetched for an earlier assignment
            return None if message.offset() >= self.end else (message.offset(), message.timestamp()[1])
        raise TimeoutError(f"no record or end of {self.topic}[{self.partition}] from offset {offset} "
                           f"within {self.timeout:.0f} s")


def _confirmed(probe: Probe, hint: int, threshold: int, earliest: int) -> bool:
    """Whether ``hint`` is a transition for ``threshold``: its record is ``>= threshold`` (or it is
    the end) and the record just before it exists and is ``< threshold`` (or it is the earliest)."""
    if not earliest <= hint <= probe.end:
        return False
    at = probe.first_at(hint)
    if at is not None and at[1] < threshold:
        return False
    if hint == earliest:
        return True
    before = probe.first_at(hint - 1)
    return before is not None and before[0] == hint - 1 and before[1] < threshold


def transition(probe: Probe, threshold: int, earliest: int, hint: int | None = None) -> tuple[int, bool]:
    """An offset ``o`` in ``[earliest, end]`` whose first record is ``>= threshold`` (or ``o`` is the
    end) while the record before ``o`` is ``< threshold`` (or ``o`` is ``earliest``).

    Returns ``(o, hint_kept)``. With timestamps at most M out of order: no record before ``o`` has a
    timestamp ``>= threshold + M`` (it would hold every later record, the one just before ``o``
    included, at ``>= threshold``), and no record from ``o`` on has one ``< threshold - M``.
    """
    if hint is not None and _confirmed(probe, hint, threshold, earliest):
        return hint, True
    low, high = earliest, probe.end  # the record before `low` is < threshold; the first at `high` is >= it
    while low < high:
        middle = (low + high) // 2
        found = probe.first_at(middle)
        if found is None or found[0] >= high or found[1] >= threshold:
            high = middle
        else:
            low = found[0] + 1
    return low, False


def _hints(consumer: Consumer, topic: str, partitions: list[int], threshold: int) -> dict[int, int | None]:
    """The broker's ``offsets_for_times`` answer per partition (None when it has none or fails)."""
    try:
        answers = consumer.offsets_for_times([TopicPartition(topic, p, threshold) for p in partitions], timeout=10)
    except KafkaException:  # a hint only: the binary search does without it
        return dict.fromkeys(partitions)
    return {tp.partition: (tp.offset if tp.offset >= 0 and tp.error is None else None) for tp in answers}


def day_offset_ranges(consumer: Consumer, topic: str, bounds: Mapping[int, tuple[int, int]], day_start_ms: int,
                      max_disorder_ms: int) -> dict[int, DayRange]:
    """Per partition, offsets that hold every record of the day starting at ``day_start_ms``.

    ``bounds`` maps each partition to its ``(earliest, end)`` offsets (from fetched high watermarks).
    """
    partitions = sorted(bounds)
    low_threshold = day_start_ms - max_disorder_ms
    high_threshold = day_start_ms + DAY_MS + max_disorder_ms
    low_hints = _hints(consumer, topic, partitions, low_threshold)
    high_hints = _hints(consumer, topic, partitions, high_threshold)
    ranges = {}
    try:
        for partition in partitions:
            earliest, end = bounds[partition]
            probe = Probe(consumer, topic, partition, end)
            start, low_kept = transition(probe, low_threshold, earliest, low_hints.get(partition))
            stop, high_kept = transition(probe, high_threshold, earliest, high_hints.get(partition))
            ranges[partition] = DayRange(partition=partition, start=start, end=max(start, stop), closed=stop < end,
                                         probes=probe.count, hints_kept=low_kept + high_kept)
    finally:
        consumer.unassign()
    return ranges
