"""Changelog compaction with Spark: the previous snapshot plus the changelog tail -> a new snapshot.

A store's changelog holds every update of every key; restoring a store from it replays all of them.
:func:`compact_changelog` folds the changelog into a snapshot (the layout of
:mod:`streaming.state.snapshots`) that holds only the latest value of each key:

1. Plan, on the driver. The changelog's identity (:mod:`streaming.state.store_identity`: its topic id,
   partition count, ...) is read from the broker; the base is the newest snapshot whose data files hold
   its manifest's rows (a damaged one is skipped, loudly, for the one before it, else the whole changelog is
   read, if it still starts at offset 0), and whose identity matches the changelog's, by the same rule
   the workers apply (a mismatch is an error: the snapshots are of another changelog). The base's
   ``next_offset`` per partition (``earliest`` without one) is where the tail starts; the changelog's end
   (the fetched high watermark) is where it ends. The offsets are checked against the topic, so a
   truncated changelog is an error, not a silently wrong snapshot. Then a new snapshot id is claimed
   (:func:`streaming.state.snapshots.claim_snapshot_id`), so concurrent runs write different snapshots.
2. Spark reads the tail through the ``brook-kafka`` source, unions it with the base snapshot's
   rows, and keeps per (partition, key) the row with the highest offset (with its record timestamp,
   which a timestamped store restores as the value's); only then are tombstones
   (null values) dropped, so a tombstone in the tail deletes a key of the previous snapshot. The base's
   rows are counted and checksummed per partition on the way: if they are not what its manifest says
   (files lost since the plan), the run fails before writing anything.
3. The rows are written as Parquet (``partitionBy("partition")``, sorted by key), synced to disk, their
   row counts checked against what Spark kept (from the Parquet footers), and the manifest, with the
   store's identity and each partition's row count and checksum, is written last, atomically. Snapshots
   past ``keep`` are pruned once superseded for longer than the grace period.

Nothing here imports Dagster: the asset (``assets/compaction.py``) and the benchmark both call it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from assets.spark.kafka_source import SOURCE_NAME
from assets.spark.offsets import PartitionBounds, partition_bounds, reader_consumer
from assets.spark.options import client_options
from streaming.errors import StreamsError
from streaming.runtime.reset_epoch import read_reset_epoch
from streaming.state import snapshots
from streaming.state.snapshots import PartitionSnapshot, SnapshotError, SnapshotManifest
from streaming.state.store_identity import StoreIdentity, StoreIdentityError, live_identity

__all__ = ["CompactionError", "CompactionResult", "ReadChangelog", "choose_base", "compact_changelog", "plan_tail",
           "row_checksum_column"]

log = logging.getLogger(__name__)

_SNAPSHOT_SCHEMA = "key binary, value binary, offset long, timestamp long, partition int"
_TAIL_SCHEMA = "partition int, key binary, value binary, offset long, timestamp timestamp"  # what compaction needs


@dataclass(frozen=True)
class ReadChangelog:
    """A changelog's records already read (columns ``partition``, ``key``, ``value``, ``offset``, ``timestamp`` in
    epoch milliseconds), from ``starts`` to ``ends`` per partition: the scaling job's read-back of a changelog it
    wrote, which compaction then need not read again."""

    records: DataFrame
    starts: dict[int, int]
    ends: dict[int, int]


class CompactionError(Exception):
    """The changelog cannot continue the previous snapshot, or holds a record a changelog cannot."""


@dataclass(frozen=True)
class CompactionResult:
    """What one compaction did."""

    manifest: SnapshotManifest
    start_offsets: dict[int, int]
    """Where the tail was read from, per partition (the base snapshot's ``next_offset``s)."""
    base_rows: dict[int, int]
    """Rows read from the base snapshot per partition, as Spark counted them (empty without a base)."""
    skipped: dict[str, str]
    """Newer snapshots passed over as damaged, and why (the base is older than the newest)."""
    snapshot_uri: str
    """The new snapshot's data directory."""
    pruned: list[str]

    @property
    def previous_keys(self) -> int:
        """Rows of the base snapshot merged in (0 without one): what was read, not what its manifest says."""
        return sum(self.base_rows.values())

    @property
    def compaction_ratio(self) -> float:
        """Rows in (changelog tail + base snapshot) per key kept."""
        rows_in = self.manifest.records_read + self.previous_keys
        return rows_in / self.manifest.keys if self.manifest.keys else float(rows_in)


def choose_base(location: str, application_id: str, store: str,
                live: StoreIdentity) -> tuple[SnapshotManifest | None, dict[str, str]]:
    """The snapshot to continue (None: read the whole changelog) and the newer ones skipped as damaged, with why.

    Newest first: a snapshot whose data files do not hold its manifest's rows (a file or partition directory
    lost) is skipped for the one before it.

    Raises:
        CompactionError: a snapshot's identity does not match the changelog's (``live``; names both).
        SnapshotError: the location cannot be listed.
    """
    skipped: dict[str, str] = {}
    for snapshot_id in reversed(snapshots.list_snapshot_ids(location, application_id, store)):
        try:
            manifest = snapshots.read_manifest(location, application_id, store, snapshot_id)
        except SnapshotError as exc:  # pruned by another run since it was listed, or unreadable
            skipped[snapshot_id] = str(exc)
            continue
        conflict = manifest.store_identity.conflict(live)
        if conflict:
            raise CompactionError(
                f"snapshot {snapshot_id} of store {store!r} cannot be continued: {conflict}. Delete the store's "
                f"snapshots ({snapshots.store_uri(location, application_id, store)}) to start over from the "
                "changelog")
        damaged = snapshots.damaged_partitions(location, manifest)
        if not damaged:
            return manifest, skipped
        skipped[snapshot_id] = "; ".join(f"partition {p}: {why}" for p, why in sorted(damaged.items()))
        log.error("snapshot %s of store %r is damaged, compacting from an older one: %s", snapshot_id, store,
                  skipped[snapshot_id])
    return None, skipped


def plan_tail(client_config: Mapping[str, str], live: StoreIdentity,
              previous: SnapshotManifest | None) -> tuple[dict[int, int], dict[int, int]]:
    """Start and end offset per partition of the changelog tail after ``previous``.

    Raises:
        CompactionError: ``previous`` is not a snapshot of this changelog (its identity conflicts with ``live``,
            e.g. it covers more partitions than the changelog has), or the changelog does not continue it (ends
            before its ``next_offset``, or starts after it: recreated, truncated or deleted by retention).
        KafkaSourceError: the broker did not answer.
    """
    topic = live.changelog_topic
    if previous is not None:
        conflict = previous.store_identity.conflict(live)
        if conflict:
            raise CompactionError(f"snapshot {previous.snapshot_id} cannot be continued: {conflict}")
    partitions = list(range(live.partitions))
    consumer = reader_consumer(client_config, "compaction")
    try:
        bounds = partition_bounds(consumer, [(topic, p) for p in partitions])
    finally:
        consumer.close()
    starts: dict[int, int] = {}
    ends: dict[int, int] = {}
    covered = previous.next_offsets if previous else {}
    for p in partitions:
        bound: PartitionBounds = bounds[(topic, p)]
        start = covered.get(p, bound.earliest)
        if start > bound.end:
            raise CompactionError(
                f"changelog {topic}[{p}] ends at offset {bound.end}, before snapshot "
                f"{previous.snapshot_id}'s next offset {start}: the topic was recreated or truncated; "  # type: ignore[union-attr]
                "delete the store's snapshots to start over")
        if start < bound.earliest:
            raise CompactionError(
                f"changelog {topic}[{p}] starts at offset {bound.earliest}, after snapshot "
                f"{previous.snapshot_id}'s next offset {start}: records in between were deleted")  # type: ignore[union-attr]
        starts[p], ends[p] = start, bound.end
    return starts, ends


def row_checksum_column(key: Column, value: Column) -> Column:
    """:func:`streaming.state.snapshots.row_checksum` in Spark: CRC-32 of len(key) (4 bytes) || key || value."""
    return F.crc32(F.concat(F.unhex(F.lpad(F.hex(F.length(key)), 8, "0")), key, value))


def compact_changelog(spark: SparkSession, *, client_config: Mapping[str, Any], location: str,
                      application_id: str, store: str, changelog_topic: str, keep: int,
                      prune_grace_s: float = 0.0, read: ReadChangelog | None = None) -> CompactionResult:
    """Compact ``changelog_topic`` into a new snapshot of ``store`` under ``location`` (module doc).

    ``spark`` must have the ``brook-kafka`` source registered (``assets.spark.session.spark_session``
    does it). ``client_config`` holds librdkafka settings (bootstrap servers and security).
    ``prune_grace_s``: how long a superseded snapshot is kept for restores that may be reading it.
    ``read``: the changelog's records already read; used when they are exactly the range to compact (no base
    snapshot, the same starts and ends), else the changelog is read.

    Raises:
        SnapshotError: the location is not writable or a write failed (names the path); the
            previous snapshot is left as it was.
        CompactionError: the changelog does not continue the base snapshot, the base snapshot read is not
            what its manifest says, or the changelog has a record without a key (names topic, partition and
            offset).
    """
    started = time.monotonic()
    config = {key: str(value) for key, value in client_config.items()}
    snapshots.ensure_writable(location, application_id, store)
    try:
        live = live_identity(config, application_id, store, changelog_topic,
                             reset_epoch=read_reset_epoch(config, application_id).epoch)
    except (StoreIdentityError, StreamsError) as exc:
        raise CompactionError(str(exc)) from None
    base, skipped = choose_base(location, application_id, store, live)
    starts, ends = plan_tail(config, live, base)
    if skipped and base is None and any(starts.values()):
        raise CompactionError(
            f"no intact snapshot of store {store!r} is left ({'; '.join(f'{i}: {w}' for i, w in skipped.items())}) "
            f"and changelog {changelog_topic} no longer starts at offset 0 ({starts}): its earlier records are "
            "gone, so the store cannot be rebuilt from it; nothing was written")
    snapshot_id = snapshots.claim_snapshot_id(location, application_id, store)
    data_uri = f"{snapshots.store_uri(location, application_id, store)}/{snapshots.DATA_DIR}/{snapshot_id}"

    if read is not None and base is None and (read.starts, read.ends) == (dict(starts), dict(ends)):
        records = read.records.select("partition", "key", "value", "offset", "timestamp")
    else:
        records = (spark.read.format(SOURCE_NAME).schema(_TAIL_SCHEMA).options(**client_options(config))
                   .option("subscribe", changelog_topic)
                   .option("startingOffsets", json.dumps({changelog_topic: {str(p): o for p, o in starts.items()}}))
                   .option("endingOffsets", json.dumps({changelog_topic: {str(p): o for p, o in ends.items()}}))
                   .load()
                   .select("partition", "key", "value", "offset", F.unix_millis("timestamp").alias("timestamp")))
    tail = records.select("*", F.lit(1).alias("from_tail"), F.lit(0).cast("long").alias("base_checksum"))
    merged = tail
    if base is not None and base.keys:
        old = spark.read.schema(_SNAPSHOT_SCHEMA).parquet(snapshots.data_uri(location, base))
        merged = old.select("partition", "key", "value", "offset", "timestamp", F.lit(0).alias("from_tail"),
                            row_checksum_column(F.col("key"), F.col("value")).alias("base_checksum")).unionByName(tail)

    latest = (merged.groupBy("partition", "key")
              .agg(F.max(F.struct("offset", "value", "timestamp")).alias("latest"),
                   F.sum("from_tail").alias("tail_records"),
                   F.sum(1 - F.col("from_tail")).alias("base_rows"),
                   F.sum("base_checksum").alias("base_checksum"))
              .persist(StorageLevel.MEMORY_AND_DISK))
    try:
        stats = _partition_stats(latest, changelog_topic)
        _verify_base(base, stats)
        kept = (latest.where(F.col("key").isNotNull() & F.col("latest.value").isNotNull())
                .select("partition", "key", F.col("latest.value").alias("value"), F.col("latest.offset").alias("offset"),
                        F.col("latest.timestamp").alias("timestamp")))
        _write(kept, data_uri)
    finally:
        latest.unpersist()
    snapshots.make_durable(location, application_id, store, snapshot_id)

    empty = _Stats(0, 0, 0, 0, 0)
    partitions = {
        p: PartitionSnapshot(next_offset=ends[p], keys=stats.get(p, empty).keys,
                             records_read=stats.get(p, empty).records_read, checksum=stats.get(p, empty).checksum)
        for p in sorted(ends)
    }
    manifest = SnapshotManifest(
        snapshot_id=snapshot_id, application_id=application_id, store=store, changelog_topic=changelog_topic,
        created_at=snapshots.utc_now_iso(), previous=base.snapshot_id if base else None,
        partitions=partitions, records_read=sum(s.records_read for s in partitions.values()),
        keys=sum(s.keys for s in partitions.values()), duration_s=time.monotonic() - started, identity=live)
    damaged = snapshots.damaged_partitions(location, manifest)
    if damaged:  # e.g. another writer's prune took files: never publish what was not written whole
        raise SnapshotError(f"snapshot {snapshot_id} of store {store!r} is not published: "
                            + "; ".join(f"partition {p}: {why}" for p, why in sorted(damaged.items())))
    snapshots.write_manifest(location, manifest)
    pruned = snapshots.prune(location, application_id, store, keep, grace_s=prune_grace_s)
    base_rows = {p: stats[p].base_rows for p in sorted(base.partitions) if p in stats} if base else {}
    return CompactionResult(manifest, starts, base_rows, skipped, data_uri, pruned)


@dataclass(frozen=True)
class _Stats:
    """Per partition: tail records read, keys kept and their checksum, and the base snapshot's rows and checksum."""

    records_read: int
    keys: int
    checksum: int
    base_rows: int
    base_checksum: int


def _partition_stats(latest: DataFrame, topic: str) -> dict[int, _Stats]:
    """:class:`_Stats` per partition; fails on records without a key."""
    kept = F.col("key").isNotNull() & F.col("latest.value").isNotNull()
    rows = (latest.groupBy("partition")
            .agg(F.sum("tail_records").alias("records_read"),
                 F.count(F.when(kept, 1)).alias("keys"),
                 F.sum(F.when(kept, row_checksum_column(F.col("key"), F.col("latest.value")))).alias("checksum"),
                 F.sum("base_rows").alias("base_rows"),
                 F.sum("base_checksum").alias("base_checksum"),
                 F.max(F.when(F.col("key").isNull(), F.col("latest.offset"))).alias("keyless_offset"))
            .collect())
    for row in rows:
        if row.keyless_offset is not None:
            raise CompactionError(f"changelog {topic}[{row.partition}] has a record without a key (the last at "
                                  f"offset {row.keyless_offset}): a changelog's records always have keys")
    return {row.partition: _Stats(int(row.records_read or 0), int(row.keys), int(row.checksum or 0),
                                  int(row.base_rows or 0), int(row.base_checksum or 0)) for row in rows}


def _verify_base(base: SnapshotManifest | None, stats: dict[int, _Stats]) -> None:
    """Fail unless the base snapshot's rows, as Spark read them, are what its manifest says, per partition."""
    if base is None:
        return
    wrong = []
    for p, covered in sorted(base.partitions.items()):
        read = stats.get(p, _Stats(0, 0, 0, 0, 0))
        if read.base_rows != covered.keys:
            wrong.append(f"partition {p}: {read.base_rows} rows read, the manifest says {covered.keys}")
        elif covered.checksum is not None and read.base_checksum != covered.checksum:
            wrong.append(f"partition {p}: the rows read do not match the manifest's checksum")
    if wrong:
        raise CompactionError(f"snapshot {base.snapshot_id} changed while it was read (another run pruned it, or "
                              f"its files were touched): {'; '.join(wrong)}; nothing was written, run again")


def _write(kept: DataFrame, data_uri: str) -> None:
    try:
        (kept.repartition("partition").sortWithinPartitions("partition", "key")
         .write.mode("overwrite").partitionBy("partition").parquet(data_uri))
    except Exception as exc:  # Spark raises Py4J/Spark errors with Java stack traces
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SnapshotError(f"writing snapshot data to {data_uri} failed: {first_line}") from exc
