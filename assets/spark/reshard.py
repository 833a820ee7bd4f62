"""Re-sharding a store into a new generation with another partition count (partition scaling).

:func:`reshard_store` takes a store whose workers are all stopped (the scaling job drained them) from its
changelog of ``M`` partitions to a new changelog generation of ``N``:

1. The old changelog is compacted (:func:`assets.spark.compaction.compact_changelog`) into a snapshot that
   covers it to its end: the latest value of every key, tombstones dropped.
2. Spark maps each key to the partition it belongs to among ``N``: ``murmur2(partition_key(key)) % N``, where
   ``partition_key`` is the store type's function from a changelog key to the record key that decides the
   partition (the identity for a key-value store; a window store's key carries a suffix). Within a new
   partition the rows are ordered by key, so row ``i`` is the new changelog's offset ``i``.
3. The rows are produced to the new changelog (an empty topic of ``N`` partitions, compacted like the old one)
   and the new changelog's ends are checked against the rows written.
4. A snapshot of the new generation is written under the same store directory with the new changelog's
   identity (topic, its id, ``N`` partitions, reset epoch, generation) and ``next_offset`` = the new
   changelog's end per partition: a worker restores from it and replays nothing. The old generation's
   snapshots stay, but their identity no longer matches, so no worker or compaction uses them.
5. Verified before the caller switches the spec: the same number of keys and the same checksum of
   (key, value) over the store before (the old snapshot's manifest) and after (the new one's, from the rows
   written), and no key in two partitions.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

from assets.spark.compaction import compact_changelog, row_checksum_column
from assets.spark.generation_copy import PartitionKey, produce_to_partitions, with_target_partition
from assets.spark.offsets import partition_bounds, reader_consumer
from streaming.state import snapshots
from streaming.state.snapshots import PartitionSnapshot, SnapshotManifest
from streaming.state.store_identity import live_identity

__all__ = ["ReshardError", "ReshardResult", "reshard_store"]

_SNAPSHOT_SCHEMA = "key binary, value binary, offset long, timestamp long, partition int"


class ReshardError(RuntimeError):
    """A store cannot be, or was not correctly, re-sharded (names the store and what differs)."""


@dataclass(frozen=True)
class ReshardResult:
    """The old generation's snapshot, the new generation's, and what was written per new partition."""

    store: str
    before: SnapshotManifest
    after: SnapshotManifest
    duration_s: float

    @property
    def keys(self) -> int:
        return self.after.keys


def reshard_store(spark: SparkSession, *, client_config: Mapping[str, Any], location: str, application_id: str,
                  store: str, changelog: str, new_changelog: str, partitions: int,
                  partition_key: PartitionKey | None, reset_epoch: str, generation: str,
                  keep: int = 3) -> ReshardResult:
    """Re-shard ``store`` from ``changelog`` into the empty ``new_changelog`` of ``partitions`` partitions and
    write its snapshot (module doc); ``generation`` is the new generation's number (as text), ``reset_epoch``
    the application's current epoch.

    Raises:
        ReshardError: the new changelog is not empty or has another partition count, or the verification
            failed (names the store and the numbers that differ). Nothing is switched either way.
    """
    started = time.monotonic()
    config = {key: str(value) for key, value in client_config.items()}
    ends = _ends(config, new_changelog)
    if len(ends) != partitions or any(ends.values()):
        raise ReshardError(f"store {store!r}: the new changelog {new_changelog} must be empty with {partitions} "
                           f"partitions; it has {len(ends)} partitions, ends {ends}")
    before = compact_changelog(spark, client_config=config, location=location, application_id=application_id,
                               store=store, changelog_topic=changelog, keep=keep).manifest

    rows = spark.read.schema(_SNAPSHOT_SCHEMA).parquet(snapshots.data_uri(location, before)) if before.keys else \
        spark.createDataFrame([], _SNAPSHOT_SCHEMA)
    placed = (with_target_partition(rows, partitions, partition_key)
              .withColumn("new_offset", F.row_number().over(Window.partitionBy("target_partition").orderBy("key")) - 1))
    written = produce_to_partitions(
        placed.select("target_partition", "key", "value", F.timestamp_millis("timestamp").alias("timestamp"),
                      F.lit(None).cast("array<struct<key: string, value: binary>>").alias("headers")),
        config, new_changelog, partitions, order=["key"])
    after_ends = _ends(config, new_changelog)
    if after_ends != written:
        raise ReshardError(f"store {store!r}: the new changelog {new_changelog} ends at {after_ends}, but "
                           f"{written} records were written to it")

    snapshot_id = snapshots.claim_snapshot_id(location, application_id, store)
    data_uri = f"{snapshots.store_uri(location, application_id, store)}/{snapshots.DATA_DIR}/{snapshot_id}"
    new_rows = placed.select("key", "value", F.col("new_offset").alias("offset"), "timestamp",
                             F.col("target_partition").alias("partition"))
    (new_rows.repartition("partition").sortWithinPartitions("partition", "key")
     .write.mode("overwrite").partitionBy("partition").parquet(data_uri))
    snapshots.make_durable(location, application_id, store, snapshot_id)
    stats = {row.partition: row for row in new_rows.groupBy("partition").agg(
        F.count(F.lit(1)).alias("keys"),
        F.sum(row_checksum_column(F.col("key"), F.col("value"))).alias("checksum")).collect()}
    identity = live_identity(config, application_id, store, new_changelog, reset_epoch=reset_epoch,
                             generation=generation)
    after = SnapshotManifest(
        snapshot_id=snapshot_id, application_id=application_id, store=store, changelog_topic=new_changelog,
        created_at=snapshots.utc_now_iso(), previous=None,
        partitions={p: PartitionSnapshot(next_offset=written[p], keys=int(stats[p].keys) if p in stats else 0,
                                         records_read=written[p],
                                         checksum=int(stats[p].checksum or 0) if p in stats else 0)
                    for p in range(partitions)},
        records_read=sum(written.values()), keys=sum(written.values()), duration_s=time.monotonic() - started,
        identity=identity)
    _verify(store, before, after, distinct=new_rows.select("key").distinct().count())
    damaged = snapshots.damaged_partitions(location, after)
    if damaged:
        raise ReshardError(f"store {store!r}: snapshot {snapshot_id} of {new_changelog} is not published: "
                           + "; ".join(f"partition {p}: {why}" for p, why in sorted(damaged.items())))
    snapshots.write_manifest(location, after)
    return ReshardResult(store=store, before=before, after=after, duration_s=time.monotonic() - started)


def _ends(config: Mapping[str, str], topic: str) -> dict[int, int]:
    consumer = reader_consumer(config, f"re-sharding into {topic}")
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        partitions = sorted(metadata.partitions) if metadata is not None and metadata.error is None else []
        bounds = partition_bounds(consumer, [(topic, p) for p in partitions])
    finally:
        consumer.close()
    return {p: b.end for (_, p), b in bounds.items()}


def _verify(store: str, before: SnapshotManifest, after: SnapshotManifest, *, distinct: int) -> None:
    """Same keys and checksum before and after, and every key in one partition only."""
    checksum_before = sum(p.checksum or 0 for p in before.partitions.values())
    checksum_after = sum(p.checksum or 0 for p in after.partitions.values())
    problems = []
    if before.keys != after.keys:
        problems.append(f"{before.keys} keys before, {after.keys} after")
    if checksum_before != checksum_after:
        problems.append(f"checksum of (key, value) {checksum_before} before, {checksum_after} after")
    if distinct != after.keys:
        problems.append(f"{after.keys - distinct} keys are in more than one partition")
    if problems:
        raise ReshardError(f"store {store!r} re-sharded into {after.changelog_topic} does not match its changelog "
                           f"{before.changelog_topic}: {'; '.join(problems)}; the spec was not switched")
