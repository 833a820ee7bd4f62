"""A state restore listener that counts: how a restore went, for tests, demos and benchmarks."""

from __future__ import annotations

TP = tuple[str, int]


class RestoreCounter:
    """Counts what restores read: keys loaded from snapshots and records replayed from changelogs.

    Pass it to ``KafkaStreams.set_global_state_restore_listener``; the counters are updated from the
    stream threads.
    """

    def __init__(self) -> None:
        self.snapshot_keys = 0
        self.snapshots: set[str] = set()
        self.changelog_records = 0
        self.restores_done = 0

    def on_snapshot_restored(self, topic_partition: TP, store_name: str, snapshot_id: str, next_offset: int,
                             num_restored: int) -> None:
        self.snapshot_keys += num_restored
        self.snapshots.add(snapshot_id)

    def on_restore_start(self, topic_partition: TP, store_name: str, start_offset: int, end_offset: int) -> None:
        """Nothing to count until records arrive."""

    def on_batch_restored(self, topic_partition: TP, store_name: str, batch_end_offset: int,
                          num_restored: int) -> None:
        self.changelog_records += num_restored

    def on_restore_end(self, topic_partition: TP, store_name: str, total_restored: int) -> None:
        self.restores_done += 1
