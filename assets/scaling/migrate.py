"""The Spark work of a ``migrate`` scaling plan (:mod:`streaming.scaling.plan`): the copy of the group's inputs,
intermediate and repartition topics, and the re-shard of its stores' changelogs, into the new generation's topics.

Each runs the pure steps of :mod:`streaming.scaling.reshard` inside Spark: the records are read through the
``brook-kafka`` source (the plan's ``[earliest, end)`` of every old partition), each is given the new partition its
key (a changelog's: its record key, :func:`~streaming.scaling.store_keys.partition_key_function`) hashes to, and
Spark gathers each new partition's records in one task, sorted by old partition and offset; the task runs
:func:`~streaming.scaling.reshard.repartition` (or :func:`~streaming.scaling.reshard.reshard_store`) on them and
produces the result to that partition with an idempotent producer, so each key's records keep their order. The new
topics must exist with the plan's partition count and be empty (the plan's "create" stage): a copy that finds
records there refuses, and nothing is written.

A re-shard is verified by reading back what it wrote, with Spark SQL only (not the code that wrote it): the key
count and the sum of :func:`~streaming.state.snapshots.row_checksum` of the old changelog's live keys equal those
of the new one, no key is in a partition its record key does not hash to, and none is in two. A foreign-key
subscription store whose left side moves has its values rewritten: only its key count is compared.

The stream-time and commit stages are in :mod:`assets.scaling.stages`. Not here yet: the ``replicate`` placement
(refused, naming the store), the new snapshots (the platform's compaction of the new changelogs makes them, once the
reset epoch retired the old ones), the other stages (drain, create, switch, epoch) and the Dagster job.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from confluent_kafka import KafkaError, Producer
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType

from assets.spark.compaction import row_checksum_column
from assets.spark.kafka_source import SOURCE_NAME
from assets.spark.options import client_options
from streaming.admin import watermarks
from streaming.runtime.partitioning import partition_for_key
from streaming.scaling.errors import ScalingError
from streaming.scaling.plan import StoreScaling, TopicScaling
from streaming.scaling.reshard import Digest, Record, repartition, reshard_store
from streaming.scaling.store_keys import Placement, partition_key_function

__all__ = ["ReshardResult", "copy_topic", "reshard_changelog"]

_COLUMNS = ("key", "value", "partition", "timestamp", "headers")
_SCHEMA = "key binary, value binary, partition int, offset long, timestamp timestamp, " \
          "headers array<struct<key:string,value:binary>>"


def _read(spark: SparkSession, config: Mapping[str, str], topic: str, starts: list[int], ends: list[int]) -> DataFrame:
    ranges = {"startingOffsets": {topic: {str(p): o for p, o in enumerate(starts)}},
              "endingOffsets": {topic: {str(p): o for p, o in enumerate(ends)}}}
    return (spark.read.format(SOURCE_NAME).schema(_SCHEMA).options(**client_options(config))
            .option("subscribe", topic).options(**{k: json.dumps(v) for k, v in ranges.items()}).load()
            .select("key", "value", "partition", "offset", F.unix_millis("timestamp").alias("timestamp"), "headers"))


def _check_empty(config: Mapping[str, str], topic: TopicScaling) -> None:
    """The new topic exists with the plan's count and holds nothing yet, or :class:`ScalingError`."""
    bounds = watermarks(config["bootstrap.servers"], [(topic.new_physical, p) for p in range(topic.new_partitions)],
                        client_config=config)
    written = {p: end for (_, p), (_, end) in bounds.items() if end}
    if written:
        raise ScalingError(f"topic {topic.new_physical} of the new generation already holds records (end offsets "
                           f"{written}): a copy writes only into empty topics; nothing was written")


def _records(batches: Iterable[Any]) -> dict[int, list[Record]]:
    """Arrow record batches of ``_COLUMNS`` (sorted by old partition and offset) as records per old partition.
    Arrow, not Spark rows: a row crosses into Python pickled and is rebuilt field by field, ~5x slower (bench/
    README.md, ``scaling.py``)."""
    by_old: dict[int, list[Record]] = {}
    for batch in batches:
        keys, values, partitions, timestamps, headers = (batch.column(c).to_pylist() for c in _COLUMNS)
        for key, value, partition, timestamp, pairs in zip(keys, values, partitions, timestamps, headers):
            record = Record(key, value, timestamp, tuple((h["key"], h["value"]) for h in pairs) if pairs else ())
            by_old.setdefault(partition, []).append(record)
    return by_old


def _written(rows: DataFrame, write: Callable[[Iterable[Any]], list[tuple[int, int]]],
             partitions: int) -> list[int]:
    """Run ``write`` on the Arrow batches of each Spark partition of ``rows``; the end offset of each new
    partition (what ``write`` reported producing)."""
    def task(batches: Iterable[Any]) -> Iterable[Any]:
        import pyarrow as pa

        written = write(batches)
        yield pa.RecordBatch.from_pydict({"partition": [p for p, _ in written], "records": [n for _, n in written]},
                                         schema=pa.schema([("partition", pa.int32()), ("records", pa.int64())]))

    done = rows.select(*_COLUMNS).mapInArrow(task, "partition int, records long").collect()
    return _ends(((row.partition, row.records) for row in done), partitions)


def _produce(config: Mapping[str, str], topic: str, records: Mapping[int, list[Record]]) -> list[tuple[int, int]]:
    """Produce each partition's records to it, in order (idempotent: retries keep the order); ``(partition,
    records)`` of each non-empty one."""
    failures: list[str] = []

    def delivered(error: KafkaError | None, _: Any) -> None:
        if error is not None:
            failures.append(error.str())

    producer = Producer({**config, "enable.idempotence": True, "linger.ms": 20})
    for partition, rows in records.items():
        for record in rows:
            while True:
                try:
                    producer.produce(topic, record.value, record.key, partition=partition,
                                     timestamp=record.timestamp, headers=list(record.headers) or None,
                                     on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.1)
    left = producer.flush(120)
    if left or failures:
        raise ScalingError(f"writing {topic} failed: {left} record(s) unacknowledged, {len(failures)} failed "
                           f"({failures[0] if failures else 'timeout'})")
    return [(partition, len(rows)) for partition, rows in records.items() if rows]


def _ends(written: Iterable[tuple[int, int]], partitions: int) -> list[int]:
    ends = [0] * partitions
    for partition, count in written:
        ends[partition] += count
    return ends


# -- copy ----------------------------------------------------------------------------------------------------------------
def _copy_target(partitions: int, key: bytes | None, old: int) -> int:
    return old % partitions if key is None else partition_for_key(key, partitions)


def _copy_partition(config: Mapping[str, str], topic: str, partitions: int,
                    batches: Iterable[Any]) -> list[tuple[int, int]]:
    by_old = _records(batches)
    if not by_old:
        return []
    copied = repartition([by_old.get(p, []) for p in range(max(by_old) + 1)], partitions)
    return _produce(config, topic, dict(enumerate(copied)))


def copy_topic(spark: SparkSession, client_config: Mapping[str, Any], topic: TopicScaling) -> list[int]:
    """Copy ``topic``'s records (the plan's ``[earliest, end)``) into ``topic.new_physical`` (module doc); the new
    end offset of each partition, where the group's offsets go.

    Raises:
        ScalingError: the new topic is not empty, or a write failed (names the topic).
    """
    config = {key: str(value) for key, value in client_config.items()}
    _check_empty(config, topic)
    n = topic.new_partitions
    target = F.udf(partial(_copy_target, n), IntegerType(), useArrow=True)
    rows = (_read(spark, config, topic.physical, topic.earliest, topic.end)
            .withColumn("target", target("key", "partition"))
            .repartition(n, "target").sortWithinPartitions("target", "partition", "offset"))
    return _written(rows, partial(_copy_partition, config, topic.new_physical, n), n)


# -- re-shard ------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReshardResult:
    """A re-sharded store: its state before (the old changelog's live keys) and after (what the new changelog holds,
    read back), and the new changelog's end offsets."""

    store: str
    before: Digest
    after: Digest
    ends: list[int]


def _store_target(kind: str, partitions: int, key: bytes | None) -> int:
    return -1 if key is None else partition_for_key(partition_key_function(kind)(key), partitions)


def _reshard_partition(config: Mapping[str, str], topic: str, kind: str, partitions: int,
                       left_partitions: int | None, batches: Iterable[Any]) -> list[tuple[int, int]]:
    by_old = _records(batches)
    if not by_old:
        return []
    state = reshard_store(by_old, kind, partitions, left_partitions=left_partitions)
    return _produce(config, topic, state)


def _state(changelog: DataFrame) -> DataFrame:
    """The live keys of a changelog: the last record per key, tombstones dropped (as compaction)."""
    latest = changelog.groupBy("key").agg(F.max(F.struct("offset", "value", "partition")).alias("latest"))
    return latest.where(F.col("latest.value").isNotNull()).select(
        "key", F.col("latest.value").alias("value"), F.col("latest.partition").alias("partition"))


def _digest(state: DataFrame) -> Digest:
    row = state.agg(F.count("*").alias("keys"), F.sum(row_checksum_column(F.col("key"), F.col("value"))).alias("sum")) \
        .collect()[0]
    return Digest(int(row.keys), int(row.sum or 0))


def reshard_changelog(spark: SparkSession, client_config: Mapping[str, Any], store: StoreScaling,
                      topic: TopicScaling, *, left_partitions: int | None = None) -> ReshardResult:
    """Re-shard ``store``'s changelog ``topic`` into ``topic.new_physical`` (module doc) and verify it.
    ``left_partitions``: for a foreign-key subscription store whose left side the plan re-shards, the left side's
    new partition count (the plan's ``rewrites``).

    Raises:
        ScalingError: the placement is ``replicate``; the new changelog is not empty; a changelog record has no
            key; a write failed; or the verification found a difference (each names the store).
    """
    config = {key: str(value) for key, value in client_config.items()}
    n = topic.new_partitions
    if store.placement == Placement.REPLICATE:
        raise ScalingError(f"store {store.store}: the placement 'replicate' is not in the Spark job yet; choose "
                           f"'by-key' or 'drop'")
    if store.placement == Placement.DROP:
        return ReshardResult(store.store, Digest(0, 0), Digest(0, 0), [0] * n)
    _check_empty(config, topic)
    old = _read(spark, config, topic.physical, topic.earliest, topic.end).cache()
    try:
        keyless = old.where(F.col("key").isNull()).count()
        if keyless:
            raise ScalingError(f"store {store.store}: changelog {topic.physical} has {keyless} record(s) without a key")
        target = F.udf(partial(_store_target, store.kind, n), IntegerType(), useArrow=True)
        rows = old.withColumn("target", target("key")).repartition(n, "target") \
            .sortWithinPartitions("target", "partition", "offset")
        ends = _written(rows, partial(_reshard_partition, config, topic.new_physical, store.kind, n,
                                              left_partitions), n)
        before = _digest(_state(old))
    finally:
        old.unpersist()
    written = _read(spark, config, topic.new_physical, [0] * n, ends)
    after = _digest(_state(written))
    misplaced = written.where(F.col("partition") != target("key")).count()
    doubled = written.groupBy("key").agg(F.countDistinct("partition").alias("n")).where(F.col("n") > 1).count()
    same = before.keys == after.keys if left_partitions is not None else before == after
    if not same or misplaced or doubled:
        raise ScalingError(f"store {store.store}: the re-shard into {topic.new_physical} does not verify: before "
                           f"{before.keys} keys (checksum {before.checksum}), after {after.keys} (checksum "
                           f"{after.checksum}); {misplaced} key(s) in the wrong partition, {doubled} in two")
    return ReshardResult(store.store, before, after, ends)
