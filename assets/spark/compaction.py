"""Changelog compaction with Spark: the previous snapshot plus the changelog tail -> a new snapshot.

A store's changelog holds every update of every key; restoring a store from it replays all of them.
:func:`compact_changelog` folds the changelog into a snapshot (the layout of
:mod:`streaming.state.snapshots`) that holds only the latest value of each key:

1. Plan, on the driver: the newest snapshot's ``next_offset`` per partition (``earliest`` without
   one) is where the tail starts; the changelog's end (the fetched high watermark) is where it ends.
   The offsets are checked against the topic, so a recreated or truncated changelog is an error,
   not a silently wrong snapshot.
2. Spark reads the tail through the ``brook-kafka`` source, unions it with the previous snapshot's
   rows, and keeps per (partition, key) the row with the highest offset (with its record timestamp,
   which a timestamped store restores as the value's); only then are tombstones
   (null values) dropped, so a tombstone in the tail deletes a key of the previous snapshot.
3. The rows are written as Parquet (``partitionBy("partition")``, sorted by key), synced to disk,
   and the manifest is written last, atomically. Snapshots past ``keep`` are pruned.

Nothing here imports Dagster: the asset (``assets/compaction.py``) and the benchmark both call it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from assets.spark.kafka_source import SOURCE_NAME
from assets.spark.offsets import PartitionBounds, partition_bounds, reader_consumer, topic_partitions
from assets.spark.options import client_options
from streaming.state import snapshots
from streaming.state.snapshots import PartitionSnapshot, SnapshotError, SnapshotManifest

__all__ = ["CompactionError", "CompactionResult", "compact_changelog", "plan_tail"]

_SNAPSHOT_SCHEMA = "key binary, value binary, offset long, timestamp long, partition int"
_TAIL_SCHEMA = "partition int, key binary, value binary, offset long, timestamp timestamp"  # what compaction needs


class CompactionError(Exception):
    """The changelog cannot continue the previous snapshot, or holds a record a changelog cannot."""


@dataclass(frozen=True)
class CompactionResult:
    """What one compaction did."""

    manifest: SnapshotManifest
    start_offsets: dict[int, int]
    """Where the tail was read from, per partition (the previous snapshot's ``next_offset``s)."""
    previous_keys: int
    """Rows of the previous snapshot merged in (0 without one)."""
    snapshot_uri: str
    """The new snapshot's data directory."""
    pruned: list[str]

    @property
    def compaction_ratio(self) -> float:
        """Rows in (changelog tail + previous snapshot) per key kept."""
        rows_in = self.manifest.records_read + self.previous_keys
        return rows_in / self.manifest.keys if self.manifest.keys else float(rows_in)


def plan_tail(client_config: Mapping[str, str], topic: str,
              previous: SnapshotManifest | None) -> tuple[dict[int, int], dict[int, int]]:
    """Start and end offset per partition of the changelog tail after ``previous``.

    Raises:
        CompactionError: the changelog does not continue ``previous`` (fewer partitions, ends before
            its ``next_offset``, or starts after it: recreated, truncated or deleted by retention).
        KafkaSourceError: the topic does not exist or the broker did not answer.
    """
    consumer = reader_consumer(client_config, "compaction")
    try:
        partitions = topic_partitions(consumer, [topic])[topic]
        bounds = partition_bounds(consumer, [(topic, p) for p in partitions])
    finally:
        consumer.close()
    starts: dict[int, int] = {}
    ends: dict[int, int] = {}
    covered = previous.next_offsets if previous else {}
    missing = sorted(set(covered) - set(partitions))
    if missing:
        raise CompactionError(f"changelog {topic} has no partition(s) {missing}, which snapshot "
                              f"{previous.snapshot_id} covers: was the topic recreated?")  # type: ignore[union-attr]
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


def compact_changelog(spark: SparkSession, *, client_config: Mapping[str, Any], location: str,
                      application_id: str, store: str, changelog_topic: str, keep: int) -> CompactionResult:
    """Compact ``changelog_topic`` into a new snapshot of ``store`` under ``location`` (module doc).

    ``spark`` must have the ``brook-kafka`` source registered (``assets.spark.session.spark_session``
    does it). ``client_config`` holds librdkafka settings (bootstrap servers and security).

    Raises:
        SnapshotError: the location is not writable or a write failed (names the path); the
            previous snapshot is left as it was.
        CompactionError: the changelog does not continue the previous snapshot, or has a record
            without a key (names topic, partition and offset).
    """
    started = time.monotonic()
    config = {key: str(value) for key, value in client_config.items()}
    snapshots.ensure_writable(location, application_id, store)
    previous = snapshots.latest_manifest(location, application_id, store)
    starts, ends = plan_tail(config, changelog_topic, previous)
    snapshot_id = snapshots.next_snapshot_id(location, application_id, store)
    data_uri = f"{snapshots.store_uri(location, application_id, store)}/{snapshots.DATA_DIR}/{snapshot_id}"

    tail = (spark.read.format(SOURCE_NAME).schema(_TAIL_SCHEMA).options(**client_options(config))
            .option("subscribe", changelog_topic)
            .option("startingOffsets", json.dumps({changelog_topic: {str(p): o for p, o in starts.items()}}))
            .option("endingOffsets", json.dumps({changelog_topic: {str(p): o for p, o in ends.items()}}))
            .load()
            .select("partition", "key", "value", "offset", F.unix_millis("timestamp").alias("timestamp"),
                    F.lit(1).alias("from_tail")))
    merged = tail
    previous_keys = previous.keys if previous else 0
    if previous is not None and previous.keys:
        old = spark.read.schema(_SNAPSHOT_SCHEMA).parquet(snapshots.data_uri(location, previous))
        merged = old.select("partition", "key", "value", "offset", "timestamp",
                            F.lit(0).alias("from_tail")).unionByName(tail)

    latest = (merged.groupBy("partition", "key")
              .agg(F.max(F.struct("offset", "value", "timestamp")).alias("latest"),
                   F.sum("from_tail").alias("tail_records"))
              .persist(StorageLevel.MEMORY_AND_DISK))
    try:
        stats = _partition_stats(latest, changelog_topic)
        kept = (latest.where(F.col("key").isNotNull() & F.col("latest.value").isNotNull())
                .select("partition", "key", F.col("latest.value").alias("value"), F.col("latest.offset").alias("offset"),
                        F.col("latest.timestamp").alias("timestamp")))
        _write(kept, data_uri)
    finally:
        latest.unpersist()
    snapshots.make_durable(location, application_id, store, snapshot_id)

    partitions = {
        p: PartitionSnapshot(next_offset=ends[p], keys=stats.get(p, (0, 0))[1], records_read=stats.get(p, (0, 0))[0])
        for p in sorted(ends)
    }
    manifest = SnapshotManifest(
        snapshot_id=snapshot_id, application_id=application_id, store=store, changelog_topic=changelog_topic,
        created_at=snapshots.utc_now_iso(), previous=previous.snapshot_id if previous else None,
        partitions=partitions, records_read=sum(s.records_read for s in partitions.values()),
        keys=sum(s.keys for s in partitions.values()), duration_s=time.monotonic() - started)
    snapshots.write_manifest(location, manifest)
    pruned = snapshots.prune(location, application_id, store, keep)
    return CompactionResult(manifest, starts, previous_keys, data_uri, pruned)


def _partition_stats(latest: DataFrame, topic: str) -> dict[int, tuple[int, int]]:
    """``(records read from the tail, keys kept)`` per partition; fails on records without a key."""
    rows = (latest.groupBy("partition")
            .agg(F.sum("tail_records").alias("records_read"),
                 F.count(F.when(F.col("key").isNotNull() & F.col("latest.value").isNotNull(), 1)).alias("keys"),
                 F.max(F.when(F.col("key").isNull(), F.col("latest.offset"))).alias("keyless_offset"))
            .collect())
    for row in rows:
        if row.keyless_offset is not None:
            raise CompactionError(f"changelog {topic}[{row.partition}] has a record without a key (the last at "
                                  f"offset {row.keyless_offset}): a changelog's records always have keys")
    return {row.partition: (int(row.records_read or 0), int(row.keys)) for row in rows}


def _write(kept: DataFrame, data_uri: str) -> None:
    try:
        (kept.repartition("partition").sortWithinPartitions("partition", "key")
         .write.mode("overwrite").partitionBy("partition").parquet(data_uri))
    except Exception as exc:  # Spark raises Py4J/Spark errors with Java stack traces
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SnapshotError(f"writing snapshot data to {data_uri} failed: {first_line}") from exc
