"""Snapshot sources: where a task that has no local state starts its restore before the changelog tail.

The Dagster platform compacts changelogs with Spark into Parquet snapshots, each with a manifest of
the changelog offsets it covers. A :class:`SnapshotSource` hands the runtime the newest snapshot of
one changelog partition; the task loads it into the store and restores only the changelog records
after it. Without a source (today's default) restore starts at the checkpoint or offset 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Snapshot:
    """State of one changelog partition up to (not including) ``next_offset``."""

    topic: str
    partition: int
    next_offset: int
    # Batches of (key, value, timestamp of its changelog record); no tombstones.
    entries: Iterator[list[tuple[bytes, bytes, int]]]


class SnapshotSource(Protocol):
    def latest(self, topic: str, partition: int) -> Snapshot | None:
        """The newest snapshot of a changelog partition, or None."""


class NoSnapshots:
    """The default source: there are none."""

    def latest(self, topic: str, partition: int) -> Snapshot | None:
        return None


def seed_from_snapshots(source: SnapshotSource, offsets: dict[tuple[str, int], int],
                        stores: dict[tuple[str, int], object]) -> dict[tuple[str, int], int]:
    """Load snapshots into stores that would otherwise restore from offset 0; return the new offsets."""
    seeded = dict(offsets)
    for tp, start in offsets.items():
        if start != 0:
            continue
        snapshot = source.latest(*tp)
        if snapshot is None or snapshot.next_offset <= 0:
            continue
        store = stores[tp]
        timestamped = store.timestamped  # type: ignore[attr-defined]
        for batch in snapshot.entries:
            store.restore_batch(batch if timestamped else [(key, value) for key, value, _ in batch])  # type: ignore[attr-defined]
        seeded[tp] = snapshot.next_offset
    return seeded
