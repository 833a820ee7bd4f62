"""PartitionGroup: which buffered record a multi-partition task (a join) takes next, and when it waits."""

from __future__ import annotations

from streaming.runtime.partition_group import PartitionGroup

STREAM, TABLE = ("orders", 0), ("users", 0)


def group_with_a_stream_record(max_idle_ms: int) -> PartitionGroup:
    group = PartitionGroup([STREAM, TABLE], max_idle_ms)
    group.add(STREAM, [(10, "k", "v", None)])
    return group


def test_an_empty_partition_with_records_still_to_fetch_is_waited_for_until_they_come() -> None:
    lagging = lambda tp: False  # the table partition has records the consumer has not fetched (or lag unknown)
    for max_idle_ms in (0, 1_000):
        group = group_with_a_stream_record(max_idle_ms)
        assert group.next_queue(0, lagging) is None
        assert group.next_queue(60_000, lagging) is None
        group.add(TABLE, [(5, "k", "user", None)])
        assert group.next_queue(60_000, lagging) is group.queues[TABLE]  # the earlier table update first


def test_with_max_task_idle_minus_one_nothing_is_waited_for() -> None:
    group = group_with_a_stream_record(-1)
    assert group.next_queue(0, lambda tp: False) is group.queues[STREAM]


def test_an_empty_partition_that_is_caught_up_is_not_waited_for_by_default() -> None:
    asked: list[tuple[str, int]] = []

    def caught_up(tp: tuple[str, int]) -> bool:
        asked.append(tp)
        return True
    group = group_with_a_stream_record(0)
    group.add(STREAM, [(11, "k", "w", None)])
    assert group.next_queue(0, caught_up) is group.queues[STREAM]
    group.pop(group.queues[STREAM])
    assert group.next_queue(0, caught_up) is group.queues[STREAM]
    assert asked == [TABLE]  # asked once per processing round (same clock), not once per record
    group.next_queue(5, caught_up)
    assert asked == [TABLE, TABLE]


def test_max_task_idle_waits_that_long_for_a_caught_up_partition() -> None:
    group = group_with_a_stream_record(1_000)
    assert group.next_queue(0, lambda tp: True) is None
    assert group.next_queue(999, lambda tp: True) is None
    assert group.next_queue(1_000, lambda tp: True) is group.queues[STREAM]


def test_without_lag_information_an_empty_partition_counts_as_caught_up() -> None:
    assert group_with_a_stream_record(0).next_queue(0) is not None
    group = group_with_a_stream_record(1_000)
    assert group.next_queue(0) is None
    assert group.next_queue(1_000) is group.queues[STREAM]
