"""Snapshot sources: where a task that has no local state starts its restore before the changelog tail.

The Dagster platform compacts changelogs with Spark into Parquet snapshots, each with a manifest of
the changelog offsets it covers (layout: :mod:`streaming.state.snapshots`). A :class:`SnapshotSource`
hands the runtime the newest snapshot of one changelog partition; the store loads it and restores only
the changelog records after it. Workers find the snapshots through the config key
``state.snapshot.location`` (unset: no snapshots, restore starts at the checkpoint or offset 0).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from streaming.errors import ConfigError
from streaming.naming import store_of_changelog

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Snapshot:
    """State of one changelog partition up to (not including) ``next_offset``."""

    topic: str
    partition: int
    next_offset: int
    # Batches of (key, value, timestamp of its changelog record); no tombstones.
    entries: Iterator[list[tuple[bytes, bytes, int]]]
    snapshot_id: str = ""
    keys: int = 0


class SnapshotSource(Protocol):
    def latest(self, topic: str, partition: int) -> Snapshot | None:
        """The newest snapshot of a changelog partition, or None."""


class NoSnapshots:
    """The default source: there are none."""

    def latest(self, topic: str, partition: int) -> Snapshot | None:
        return None


class ParquetSnapshots:
    """The snapshots the platform's compaction writes under ``location`` (a local path or an
    ``s3://``/``hdfs://`` URI), for the stores of application ``application_id``."""

    def __init__(self, location: str, application_id: str) -> None:
        try:  # pyarrow reads the Parquet: a worker without snapshots never imports it
            from streaming.state import snapshots as layout
        except ImportError as exc:
            raise ConfigError(f"config key 'state.snapshot.location' needs pyarrow to read snapshots: "
                              f"pip install 'brook[snapshots]' ({exc})") from None
        self._layout = layout
        self.location = location
        self.application_id = application_id

    def latest(self, topic: str, partition: int) -> Snapshot | None:
        store = store_of_changelog(self.application_id, topic)
        if store is None:
            return None
        layout = self._layout
        manifest = layout.latest_manifest(self.location, self.application_id, store)
        if manifest is None or partition not in manifest.partitions:
            return None
        if manifest.changelog_topic != topic:
            log.warning("snapshot %s of store %r covers changelog %r, not %r: ignored", manifest.snapshot_id,
                        store, manifest.changelog_topic, topic)
            return None
        covered = manifest.partitions[partition]
        return Snapshot(topic, partition, covered.next_offset,
                        layout.read_partition(self.location, manifest, partition), manifest.snapshot_id, covered.keys)


def snapshot_source(location: str, application_id: str) -> SnapshotSource:
    """The source for config key ``state.snapshot.location`` (empty: :class:`NoSnapshots`)."""
    return ParquetSnapshots(location, application_id) if location else NoSnapshots()


def seed_from_snapshots(source: SnapshotSource, offsets: dict[TopicPartition, int],
                        stores: dict[TopicPartition, Any], listener: Any = None) -> dict[TopicPartition, int]:
    """Load snapshots into stores that would otherwise restore from offset 0; return the new offsets.

    A restore listener with an ``on_snapshot_restored(topic_partition, store_name, snapshot_id,
    next_offset, num_restored)`` method hears of each snapshot loaded (the changelog tail after it is
    reported as usual, from ``next_offset``).
    """
    seeded = dict(offsets)
    for tp, start in offsets.items():
        if start != 0:
            continue
        snapshot = source.latest(*tp)
        if snapshot is None or snapshot.next_offset <= 0:
            continue
        store = stores[tp]
        began = time.monotonic()
        loaded = 0
        timestamped = store.timestamped
        for batch in snapshot.entries:
            store.restore_batch(batch if timestamped else [(key, value) for key, value, _ in batch])
            loaded += len(batch)
        seeded[tp] = snapshot.next_offset
        log.info("store %r: loaded snapshot %s of %s[%d] (%d keys, offsets < %d) in %.2f s; restoring the tail",
                 store.name, snapshot.snapshot_id, tp[0], tp[1], loaded, snapshot.next_offset,
                 time.monotonic() - began)
        report = getattr(listener, "on_snapshot_restored", None)
        if report is not None:
            report(tp, store.name, snapshot.snapshot_id, snapshot.next_offset, loaded)
    return seeded
