"""Snapshot sources: where a task that has no local state starts its restore before the changelog tail.

The Dagster platform compacts changelogs with Spark into Parquet snapshots, each with a manifest of
the changelog offsets it covers (layout: :mod:`streaming.state.snapshots`). A :class:`SnapshotSource`
hands the runtime the snapshots of one changelog partition, newest first; the store loads the newest that
is the changelog's (identity) and whole (row count and checksum), and restores only the changelog records
after it, else the whole changelog. Workers find the snapshots through the config key
``state.snapshot.location`` (unset: no snapshots, restore starts at the checkpoint or offset 0).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from streaming.errors import ConfigError
from streaming.naming import logical_of, store_of_changelog
from streaming.state.store_identity import NONE, StoreIdentity, StoreIdentityError, live_identity

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
    """Rows the manifest says the partition holds: a load that reads another number is refused."""
    checksum: int | None = None
    """The manifest's checksum of the rows (``streaming.state.snapshots.row_checksum`` summed), if it has one."""


class SnapshotSource(Protocol):
    def candidates(self, topic: str, partition: int) -> Iterator[Snapshot]:
        """The snapshots a restore of a changelog partition may start from, newest first; the restore uses the
        first one that loads whole (see :func:`seed_from_snapshots`)."""

    def at_reset_epoch(self, epoch: str) -> SnapshotSource:
        """This source for an application at reset epoch ``epoch``: snapshots made under another are not offered."""


class NoSnapshots:
    """The default source: there are none."""

    def candidates(self, topic: str, partition: int) -> Iterator[Snapshot]:
        return iter(())

    def at_reset_epoch(self, epoch: str) -> SnapshotSource:
        return self


class ParquetSnapshots:
    """The snapshots the platform's compaction writes under ``location`` (a local path or an
    ``s3://``/``hdfs://`` URI), for the stores of application ``application_id``.

    A snapshot is offered only if its identity matches the changelog's as the broker describes it now, at the
    application's reset epoch ``reset_epoch`` (:meth:`streaming.state.store_identity.StoreIdentity.conflict`:
    the same rule compaction applies; a snapshot made before the last reset is never loaded) and the
    partition's data files hold the manifest's row count; every snapshot passed over is logged as an error
    naming the snapshot, the partition and why. ``client_config``: librdkafka settings of an admin client
    (bootstrap servers and security), to describe the changelog.
    """

    IDENTITY_TTL_S = 30.0

    def __init__(self, location: str, application_id: str, client_config: dict[str, Any],
                 reset_epoch: str = NONE) -> None:
        try:  # pyarrow reads the Parquet: a worker without snapshots never imports it
            from streaming.state import snapshots as layout
        except ImportError as exc:
            raise ConfigError(f"config key 'state.snapshot.location' needs pyarrow to read snapshots: "
                              f"pip install 'brook[snapshots]' ({exc})") from None
        self._layout = layout
        self.location = location
        self.application_id = application_id
        self._client_config = client_config
        self.reset_epoch = reset_epoch
        self._identities: dict[str, tuple[float, StoreIdentity]] = {}

    def at_reset_epoch(self, epoch: str) -> SnapshotSource:
        return ParquetSnapshots(self.location, self.application_id, self._client_config, reset_epoch=epoch)

    def _live(self, store: str, topic: str) -> StoreIdentity | None:
        cached = self._identities.get(topic)
        if cached is not None and time.monotonic() - cached[0] < self.IDENTITY_TTL_S:
            return cached[1]
        try:
            identity = live_identity(self._client_config, self.application_id, store, topic,
                                     reset_epoch=self.reset_epoch)
        except StoreIdentityError as exc:
            log.error("store %r: snapshots not used, restoring from the changelog: %s", store, exc)
            return None
        self._identities[topic] = (time.monotonic(), identity)
        return identity

    def candidates(self, topic: str, partition: int) -> Iterator[Snapshot]:
        store = store_of_changelog(self.application_id, logical_of(topic)[0])  # a generation's changelog too
        if store is None:
            return
        layout = self._layout
        ids = layout.list_snapshot_ids(self.location, self.application_id, store)
        live = self._live(store, topic) if ids else None
        if live is None:
            return
        for snapshot_id in reversed(ids):
            try:
                manifest = layout.read_manifest(self.location, self.application_id, store, snapshot_id)
                conflict = manifest.store_identity.conflict(live)
                problem = conflict or layout.damaged_partitions(self.location, manifest, [partition]).get(partition)
            except layout.SnapshotError as exc:  # e.g. pruned since it was listed
                problem = str(exc)
            if problem:
                log.error("snapshot %s of store %r is not used for %s[%d]: %s; trying an older snapshot, else "
                          "the whole changelog", snapshot_id, store, topic, partition, problem)
                continue
            covered = manifest.partitions[partition]
            yield Snapshot(topic, partition, covered.next_offset,
                           layout.read_partition(self.location, manifest, partition), snapshot_id, covered.keys,
                           covered.checksum)


def snapshot_source(location: str, application_id: str, client_config: dict[str, Any]) -> SnapshotSource:
    """The source for config key ``state.snapshot.location`` (empty: :class:`NoSnapshots`); ``client_config``:
    the admin client's librdkafka settings."""
    return ParquetSnapshots(location, application_id, client_config) if location else NoSnapshots()


def seed_from_snapshots(source: SnapshotSource, offsets: dict[TopicPartition, int],
                        stores: dict[TopicPartition, Any], listener: Any = None) -> dict[TopicPartition, int]:
    """Load snapshots into stores that would otherwise restore from offset 0; return the new offsets.

    Each store takes the newest snapshot that loads whole: the rows read must be as many as the manifest's
    ``keys`` for the partition, with its checksum where it has one. One that does not (a data file deleted or
    truncated, pruned while being read, rows changed) is logged as an error naming the snapshot and the
    partition, its rows are removed from the store again, and the next older snapshot is tried, else the whole
    changelog is restored from offset 0. A store never runs on a short snapshot.

    A restore listener with an ``on_snapshot_restored(topic_partition, store_name, snapshot_id,
    next_offset, num_restored)`` method hears of each snapshot loaded (the changelog tail after it is
    reported as usual, from ``next_offset``).
    """
    seeded = dict(offsets)
    for tp, start in offsets.items():
        if start != 0:
            continue
        store = stores[tp]
        rejected: list[str] = []
        for snapshot in source.candidates(*tp):
            if snapshot.next_offset <= 0:
                break  # covers nothing: the changelog from 0 is the same
            began = time.monotonic()
            problem = _load(store, snapshot)
            if problem is not None:
                log.error("store %r: snapshot %s of %s[%d] is not used: %s; its rows are removed from the store, "
                          "trying an older snapshot, else the whole changelog", store.name, snapshot.snapshot_id,
                          tp[0], tp[1], problem)
                _clear(store)
                rejected.append(snapshot.snapshot_id)
                continue
            seeded[tp] = snapshot.next_offset
            log.info("store %r: loaded snapshot %s of %s[%d] (%d keys, offsets < %d) in %.2f s; restoring the tail",
                     store.name, snapshot.snapshot_id, tp[0], tp[1], snapshot.keys, snapshot.next_offset,
                     time.monotonic() - began)
            report = getattr(listener, "on_snapshot_restored", None)
            if report is not None:
                report(tp, store.name, snapshot.snapshot_id, snapshot.next_offset, snapshot.keys)
            break
        else:
            if rejected:
                log.error("store %r: no snapshot of %s[%d] loaded whole (rejected: %s): restoring the whole "
                          "changelog from offset 0", store.name, tp[0], tp[1], ", ".join(rejected))
    return seeded


def _load(store: Any, snapshot: Snapshot) -> str | None:
    """Load ``snapshot`` into ``store``; what was wrong with it, or None when it loaded whole."""
    from streaming.state.snapshots import SnapshotError, row_checksum

    loaded = checksum = 0
    timestamped = store.timestamped
    try:
        for batch in snapshot.entries:
            store.restore_batch(batch if timestamped else [(key, value) for key, value, _ in batch])
            loaded += len(batch)
            if snapshot.checksum is not None:
                checksum += sum(row_checksum(key, value) for key, value, _ in batch)
    except SnapshotError as exc:
        return f"it could not be read whole after {loaded} rows ({exc})"
    if loaded != snapshot.keys:
        return f"it held {loaded} rows, its manifest says {snapshot.keys}"
    if snapshot.checksum is not None and checksum != snapshot.checksum:
        return f"its rows do not match the manifest's checksum ({checksum} read, {snapshot.checksum} written)"
    return None


def _clear(store: Any) -> None:
    """Remove every key from a store that was empty before a snapshot was loaded into it."""
    inner = store.inner
    inner.flush()
    keys = [key for key, _ in inner.range(None, None)]
    inner.write_batch([(key, None) for key in keys])
