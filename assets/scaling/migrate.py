"""The Spark work of a ``migrate`` scaling plan (:mod:`streaming.scaling.plan`): the copy of the group's inputs,
intermediate and repartition topics, and the re-shard of its stores' changelogs, into the new generation's topics.

Each runs the pure steps of :mod:`streaming.scaling.reshard` inside Spark: the records are read through the
``brook-kafka`` source (the plan's ``[earliest, end)`` of every old partition), each is given the new partition its
key (a changelog's: its record key, :func:`~streaming.scaling.store_keys.partition_key_function`) hashes to, a whole
Arrow batch at a time (:func:`assets.scaling.hashing.partitions_of`), and Spark gathers each new partition's records
in one task, sorted by old partition and offset (scaling up by a multiple needs no gathering: each new partition is
fed by one old one, whose task writes it); the task orders them (:func:`~streaming.scaling.reshard.copy_order`,
or :func:`~streaming.scaling.reshard.compact` for a store) and produces them to that partition with an idempotent
producer, so each key's records keep their order. The new topics must exist with the plan's partition count and be
empty (the plan's "create" stage): a copy that finds records there refuses, and nothing is written.

A re-shard is verified by reading back what it wrote, in one pass with Spark SQL (not the code that wrote it): the
key count and the sum of :func:`~streaming.state.snapshots.row_checksum` of the old changelog's live keys equal
those of the new one, no key is in a partition its record key does not hash to, and none is in two. A foreign-key
subscription store whose left side moves has its values rewritten: only its key count is compared. The records read
back stay cached (:attr:`ReshardResult.changelog`) for the fresh snapshot of the new changelog, which then needs no
third read (:func:`assets.spark.compaction.compact_changelog`'s ``read``).

A store placed ``replicate`` (:func:`~streaming.scaling.reshard.replicas`) goes to every new partition its old
partition feeds, and is verified per new partition: the count and checksum of what it holds equal those Spark SQL
expects from the old changelog.

The stream-time and commit stages are in :mod:`assets.scaling.stages`, the others in :mod:`assets.scaling.execute`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, Producer
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StructField, StructType

from assets.scaling.hashing import partitions_of
from assets.spark.compaction import ReadChangelog, row_checksum_column
from assets.spark.kafka_source import SOURCE_NAME
from assets.spark.options import client_options
from streaming.admin import watermarks
from streaming.scaling.errors import ScalingError
from streaming.scaling.plan import StoreScaling, TopicScaling
from streaming.scaling.reshard import (
    Digest,
    Record,
    compact,
    copy_order,
    partition_targets,
    replicas,
    with_left_partition,
)
from streaming.scaling.store_keys import Placement, StoreKind, partition_key_function

__all__ = ["ReshardResult", "copy_topic", "reshard_changelog"]

_COLUMNS = ("target", "key", "value", "partition", "timestamp", "headers")
_SCHEMA = "key binary, value binary, partition int, offset long, timestamp timestamp, " \
          "headers array<struct<key:string,value:binary>>"


def _read(spark: SparkSession, config: Mapping[str, str], topic: str, starts: list[int], ends: list[int], *,
          headers: bool = True) -> DataFrame:
    """The records of ``topic`` from ``starts`` to ``ends``, their timestamps in epoch milliseconds; without their
    headers when they are not written anywhere (the source builds a Python object per record's headers)."""
    ranges = {"startingOffsets": {topic: {str(p): o for p, o in enumerate(starts)}},
              "endingOffsets": {topic: {str(p): o for p, o in enumerate(ends)}}}
    schema = _SCHEMA if headers else _SCHEMA.rsplit(", headers", 1)[0]
    rows = (spark.read.format(SOURCE_NAME).schema(schema).options(**client_options(config))
            .option("subscribe", topic).options(**{k: json.dumps(v) for k, v in ranges.items()}).load())
    return rows.select("key", "value", "partition", "offset", F.unix_millis("timestamp").alias("timestamp"),
                       *(["headers"] if headers else []))


def _check_empty(config: Mapping[str, str], topic: TopicScaling) -> None:
    """The new topic exists with the plan's count and holds nothing yet, or :class:`ScalingError`."""
    bounds = watermarks(config["bootstrap.servers"], [(topic.new_physical, p) for p in range(topic.new_partitions)],
                        client_config=config)
    written = {p: end for (_, p), (_, end) in bounds.items() if end}
    if written:
        raise ScalingError(f"topic {topic.new_physical} of the new generation already holds records (end offsets "
                           f"{written}): a copy writes only into empty topics; nothing was written")


def _with_targets(rows: DataFrame, partitions: int, kind: StoreKind | None) -> DataFrame:
    """``rows`` with a ``target`` column: the new partition of each record. ``kind`` None (a copy): of its key, a
    null key's old partition ``% partitions``; a store's ``kind``: of the record key of its changelog key (a null
    key: -1)."""
    schema = StructType([*rows.schema.fields, StructField("target", IntegerType(), False)])
    return rows.mapInArrow(partial(_add_targets, partitions, kind), schema)


def _add_targets(partitions: int, kind: StoreKind | None, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    record_key = None if kind in (None, StoreKind.KEY_VALUE) else partition_key_function(kind)
    for batch in batches:
        keys = batch.column("key")
        if record_key is not None:
            keys = pa.array([None if k is None else record_key(k) for k in keys.to_pylist()], pa.binary())
        targets = partitions_of(keys, partitions)
        if kind is None:
            keyless = targets < 0
            if keyless.any():
                old = batch.column("partition").to_numpy(zero_copy_only=False)
                targets[keyless] = old[keyless] % partitions
        yield batch.append_column("target", pa.array(targets, pa.int32()))


def _by_target(batches: Iterable[Any]) -> dict[int, dict[int, list[Record]]]:
    """Arrow record batches of ``_COLUMNS`` (each old partition's in offset order) as records per new and old
    partition. Arrow, not Spark rows: a row crosses into Python pickled and is rebuilt field by field, ~5x slower
    (bench/README.md, ``scaling.py``)."""
    placed: dict[int, dict[int, list[Record]]] = {}
    for batch in batches:
        columns = (batch.column(c).to_pylist() for c in _COLUMNS)  # by name: any order of columns
        for target, key, value, partition, timestamp, pairs in zip(*columns):
            record = Record(key, value, timestamp, tuple((h["key"], h["value"]) for h in pairs) if pairs else ())
            placed.setdefault(target, {}).setdefault(partition, []).append(record)
    return placed


def _written(rows: DataFrame, kind: StoreKind | None, old_partitions: int, partitions: int,
             write: Callable[[Iterable[Any]], list[tuple[int, int]]]) -> list[int]:
    """Place the records of ``rows`` (one Spark partition per old partition, in offset order) in ``partitions`` new
    ones (:func:`_with_targets`), and run ``write`` on the Arrow batches of ``_COLUMNS`` of each new partition,
    sorted by target, old partition and offset; the end offset of each new partition (what ``write`` reported
    producing). Where each new partition is fed by one old partition only (scaling up by a multiple:
    :func:`~streaming.scaling.reshard.partition_targets`), each old partition's task places and writes its records
    itself, in their order, without a shuffle; otherwise Spark gathers each new partition's records in one task."""
    if partitions % old_partitions == 0:
        return _run_writer(rows, partitions, lambda batches: write(_add_targets(partitions, kind, batches)))
    return _gathered(_with_targets(rows, partitions, kind), partitions, write)


def _gathered(placed: DataFrame, partitions: int, write: Callable[[Iterable[Any]], list[tuple[int, int]]]) -> list[int]:
    """Run ``write`` on each new partition's records of ``placed`` (with their ``target``), gathered in one task and
    sorted by target, old partition and offset."""
    rows = placed.repartition(partitions, "target").sortWithinPartitions("target", "partition", "offset")
    return _run_writer(rows.select(*_COLUMNS), partitions, write)


def _run_writer(rows: DataFrame, partitions: int, write: Callable[[Iterable[Any]], list[tuple[int, int]]]) -> list[int]:
    """Run ``write`` on the Arrow batches of each Spark partition of ``rows``; the end offset of each new partition
    (what the ``write`` calls reported producing)."""
    def task(batches: Iterable[Any]) -> Iterable[Any]:
        written = write(batches)
        yield pa.RecordBatch.from_pydict({"partition": [p for p, _ in written], "records": [n for _, n in written]},
                                         schema=pa.schema([("partition", pa.int32()), ("records", pa.int64())]))

    done = rows.mapInArrow(task, "partition int, records long").collect()
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
def _copy_partition(config: Mapping[str, str], topic: str, batches: Iterable[Any]) -> list[tuple[int, int]]:
    placed = _by_target(batches)
    return _produce(config, topic, {target: copy_order(by_old) for target, by_old in placed.items()})


def copy_topic(spark: SparkSession, client_config: Mapping[str, Any], topic: TopicScaling) -> list[int]:
    """Copy ``topic``'s records (the plan's ``[earliest, end)``) into ``topic.new_physical`` (module doc); the new
    end offset of each partition, where the group's offsets go.

    Raises:
        ScalingError: the new topic is not empty, or a write failed (names the topic).
    """
    config = {key: str(value) for key, value in client_config.items()}
    _check_empty(config, topic)
    n = topic.new_partitions
    rows = _read(spark, config, topic.physical, topic.earliest, topic.end)
    return _written(rows, None, len(topic.end), n, partial(_copy_partition, config, topic.new_physical))


# -- re-shard ------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReshardResult:
    """A re-sharded store: its state before (the old changelog's live keys; a replicated store: the entries its new
    partitions should hold, from the old changelog) and after (what the new changelog holds, read back), the new
    changelog's end offsets, and its records as read back (cached in Spark until :meth:`release`; None for a
    dropped store)."""

    store: str
    before: Digest
    after: Digest
    ends: list[int]
    changelog: ReadChangelog | None = None

    def release(self) -> None:
        """Free the cached read-back of the new changelog."""
        if self.changelog is not None:
            self.changelog.records.unpersist()


def _reshard_partition(config: Mapping[str, str], topic: str, left_partitions: int | None,
                       batches: Iterable[Any]) -> list[tuple[int, int]]:
    state = {target: compact(by_old) for target, by_old in _by_target(batches).items()}
    if left_partitions is not None:
        state = {target: [with_left_partition(r, left_partitions) for r in rows] for target, rows in state.items()}
    return _produce(config, topic, state)


@dataclass(frozen=True)
class _Summary:
    """A changelog as the verification sees it (:func:`_summary`)."""

    digest: Digest
    keyless: int
    split: int
    misplaced: int


def _summary(changelog: DataFrame) -> _Summary:
    """One pass of Spark SQL over a changelog's records: the :class:`Digest` of its live keys (the last record per
    key, tombstones dropped, as compaction), its records without a key, its keys in more than one partition, and,
    where it has a ``target`` column, its keys in a partition other than their target."""
    misplaced = F.max((F.col("partition") != F.col("target")).cast("int")) if "target" in changelog.columns \
        else F.lit(0)
    per_key = changelog.groupBy("key").agg(
        F.max_by("value", "offset").alias("value"), F.count("*").alias("records"),
        (F.min("partition") != F.max("partition")).cast("int").alias("split"), misplaced.alias("misplaced"))
    live = F.col("key").isNotNull() & F.col("value").isNotNull()
    row = per_key.agg(F.count(F.when(live, 1)).alias("keys"),
                      F.sum(F.when(live, row_checksum_column(F.col("key"), F.col("value")))).alias("checksum"),
                      F.sum(F.when(F.col("key").isNull(), F.col("records"))).alias("keyless"),
                      F.sum("split").alias("split"), F.sum("misplaced").alias("misplaced")).collect()[0]
    return _Summary(Digest(int(row.keys), int(row.checksum or 0)), int(row.keyless or 0), int(row.split or 0),
                    int(row.misplaced or 0))


def _read_back(spark: SparkSession, config: Mapping[str, str], topic: TopicScaling, ends: list[int],
               kind: StoreKind | None = None) -> ReadChangelog:
    """The new changelog as written (``[0, ends)`` of each new partition), without headers, cached in Spark for the
    verification and the fresh snapshot; with a store's ``kind``, each record's ``target`` (:func:`_with_targets`)."""
    written = _read(spark, config, topic.new_physical, [0] * len(ends), ends, headers=False)
    if kind is not None:
        written = _with_targets(written, len(ends), kind)
    return ReadChangelog(written.persist(StorageLevel.MEMORY_AND_DISK), dict.fromkeys(range(len(ends)), 0),
                         dict(enumerate(ends)))


# -- replicate -----------------------------------------------------------------------------------------------------------
def _replicate_partition(config: Mapping[str, str], topic: str, batches: Iterable[Any]) -> list[tuple[int, int]]:
    return _produce(config, topic, {target: replicas(by_old) for target, by_old in _by_target(batches).items()})


def _live_by_partition(changelog: DataFrame) -> DataFrame:
    """Each partition's live entries: the last record per (partition, key), tombstones dropped."""
    latest = changelog.groupBy("partition", "key").agg(F.max_by("value", "offset").alias("value"))
    return latest.where(F.col("value").isNotNull())


def _per_partition(rows: DataFrame, partition: str) -> dict[int, Digest]:
    """The :class:`Digest` of ``rows`` (key, value) per value of the column ``partition``."""
    return {row.p: Digest(int(row.keys), int(row.checksum or 0)) for row in rows.groupBy(F.col(partition).alias("p"))
            .agg(F.count("*").alias("keys"), F.sum(row_checksum_column(F.col("key"), F.col("value"))).alias("checksum"))
            .collect()}


def _replicate_changelog(spark: SparkSession, config: dict[str, str], store: StoreScaling,
                         topic: TopicScaling) -> ReshardResult:
    """:func:`reshard_changelog` of a store placed ``replicate`` (module doc)."""
    _check_empty(config, topic)
    n, sources = topic.new_partitions, partition_targets(len(topic.end), topic.new_partitions)
    targets = F.element_at(F.array(*(F.array(*map(F.lit, sources[p])) for p in range(len(topic.end)))),
                           F.col("partition") + 1)
    old = _read(spark, config, topic.physical, topic.earliest, topic.end).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        keyless = old.where(F.col("key").isNull()).count()
        if keyless:
            raise ScalingError(f"store {store.store}: changelog {topic.physical} has {keyless} record(s) without a key; "
                               f"nothing was written")
        ends = _gathered(old.withColumn("target", F.explode(targets)), n,
                         partial(_replicate_partition, config, topic.new_physical))
        live = _live_by_partition(old).withColumn("target", F.explode(targets))
        winner = F.max_by(F.struct("value"), "partition")  # a key live in several old partitions: the highest's value
        expected = _per_partition(live.groupBy("target", "key").agg(winner.alias("w")).select(
            "target", "key", F.col("w.value").alias("value")), "target")
    finally:
        old.unpersist()
    read = _read_back(spark, config, topic, ends)
    actual = _per_partition(_live_by_partition(read.records), "partition")
    if actual != expected:
        read.records.unpersist()
        wrong = sorted(p for p in set(actual) | set(expected) if actual.get(p) != expected.get(p))
        raise ScalingError(f"store {store.store}: the replication into {topic.new_physical} does not verify: "
                           f"partitions {wrong} hold other entries than the old changelog's (keys expected "
                           f"{[expected.get(p, Digest(0, 0)).keys for p in wrong]}, found "
                           f"{[actual.get(p, Digest(0, 0)).keys for p in wrong]})")
    return ReshardResult(store.store, _total(expected), _total(actual), ends, read)


def _total(digests: dict[int, Digest]) -> Digest:
    """The :class:`Digest` of a store from those of its partitions."""
    return Digest(sum(d.keys for d in digests.values()), sum(d.checksum for d in digests.values()))


def reshard_changelog(spark: SparkSession, client_config: Mapping[str, Any], store: StoreScaling,
                      topic: TopicScaling, *, left_partitions: int | None = None) -> ReshardResult:
    """Re-shard ``store``'s changelog ``topic`` into ``topic.new_physical`` (module doc) and verify it; the result
    holds the new changelog's records read back, cached until its :meth:`~ReshardResult.release`.
    ``left_partitions``: for a foreign-key subscription store whose left side the plan re-shards, the left side's
    new partition count (the plan's ``rewrites``).

    Raises:
        ScalingError: the new changelog is not empty; a changelog record has no key; a write failed; or the
            verification found a difference (each names the store).
    """
    config = {key: str(value) for key, value in client_config.items()}
    n = topic.new_partitions
    if store.placement == Placement.REPLICATE:
        return _replicate_changelog(spark, config, store, topic)
    if store.placement == Placement.DROP:
        return ReshardResult(store.store, Digest(0, 0), Digest(0, 0), [0] * n)
    _check_empty(config, topic)
    kind = StoreKind(store.kind)
    old = _read(spark, config, topic.physical, topic.earliest, topic.end).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        before = _summary(old)
        if before.keyless or before.split:
            raise ScalingError(f"store {store.store}: changelog {topic.physical} has {before.keyless} record(s) without "
                               f"a key and {before.split} key(s) in more than one partition (a store's key belongs to "
                               f"one task); nothing was written")
        ends = _written(old, kind, len(topic.end), n,
                        partial(_reshard_partition, config, topic.new_physical, left_partitions))
    finally:
        old.unpersist()
    read = _read_back(spark, config, topic, ends, kind)
    after = _summary(read.records)
    same = before.digest.keys == after.digest.keys if left_partitions is not None else before.digest == after.digest
    if not same or after.misplaced or after.split:
        read.records.unpersist()
        raise ScalingError(f"store {store.store}: the re-shard into {topic.new_physical} does not verify: before "
                           f"{before.digest.keys} keys (checksum {before.digest.checksum}), after {after.digest.keys} "
                           f"(checksum {after.digest.checksum}); {after.misplaced} key(s) in the wrong partition, "
                           f"{after.split} in two")
    return ReshardResult(store.store, before.digest, after.digest, ends, read)
