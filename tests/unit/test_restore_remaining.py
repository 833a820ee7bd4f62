"""``brook_restore_remaining_records`` counts every changelog partition registered for restore, also those whose
restore has not started (no record applied yet): from the first fetch that tells the partition's end."""

from __future__ import annotations

from typing import Any

from streaming.runtime.changelog_reader import StoreChangelogReader

WAITING = ("app-counts-changelog", 0)  # its end is known from a fetch, no record of it arrived yet
UNKNOWN = ("app-counts-changelog", 1)  # no fetch answered for it yet


class Task:
    id = "0_0"


class Store:
    name = "counts"
    timestamped = False


class Consumer:
    """The restore consumer, without a broker: fetches answered with no records, high watermarks cached."""

    def __init__(self, highs: dict[tuple[str, int], int]) -> None:
        self.highs = highs

    def consume(self, max_records: int, timeout: float) -> list[Any]:
        return []

    def get_watermark_offsets(self, partition: Any, cached: bool = False, timeout: float = 0) -> tuple[int, int]:
        return 0, self.highs.get((partition.topic, partition.partition), -1001)

    def incremental_assign(self, partitions: list[Any]) -> None:
        pass

    def incremental_unassign(self, partitions: list[Any]) -> None:
        pass

    def close(self) -> None:
        pass


def test_partitions_whose_restore_has_not_started_count_their_records() -> None:
    reader = StoreChangelogReader({"bootstrap.servers": "127.0.0.1:1", "group.id": "app"}, None)
    reader._consumer.close()
    reader._consumer = Consumer({WAITING: 500})  # type: ignore[assignment]
    reader.register(Task(), {WAITING: 17, UNKNOWN: 0}, {WAITING: Store(), UNKNOWN: Store()})
    assert reader.restore(100, 0) == []
    remaining = {(r.topic, r.partition): r.remaining for r in reader.progress()}
    assert remaining == {WAITING: 500 - 17, UNKNOWN: 0}  # both listed; the end of UNKNOWN is not known yet
    reader._consumer.highs[UNKNOWN] = 40  # type: ignore[attr-defined]
    reader.restore(100, 0)
    assert {(r.topic, r.partition): r.remaining for r in reader.progress()} == {WAITING: 483, UNKNOWN: 40}
    assert all(not r.standby and r.task == "0_0" and r.store == "counts" for r in reader.progress())
