"""A stand-in for a stream task, as the readers that recover a task's state see it (``StreamTimeRecovery``,
``StoreChangelogReader``): tests of those readers on the real broker need no topology or stores."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RecoveringTask:
    """What StreamTimeRecovery and StoreChangelogReader read of a task; ``times`` is what stream-time recovery gave."""

    id: str
    partition: int
    partitions: list[tuple[str, int]]
    subtopology: object = field(default_factory=lambda: type("Sub", (), {"id": 0})())
    stream_time_topic: str | None = None
    times: dict[tuple[str, int], int] = field(default_factory=dict)

    def initialize_stream_time(self, times: dict[tuple[str, int], int], committed: dict[tuple[str, int], int],
                               observed: dict[str, int]) -> None:
        self.times = times
