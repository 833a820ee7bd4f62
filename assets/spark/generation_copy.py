"""Copying a topic into a new generation with another partition count (partition scaling's ``migrate`` mode).

:func:`copy_to_generation` reads ``source`` up to pinned end offsets through the ``brook-kafka`` source and
produces every record to ``target`` (a new, empty topic of ``partitions`` partitions) on the partition Kafka's
default partitioner gives its key there: ``toPositive(murmur2(partition_key(key))) % partitions``
(:func:`streaming.runtime.partitioning.partition_for_key`). ``partition_key`` maps a record's key to the key
bytes that decide its partition: the identity for an input topic, a store type's function for a changelog
(a window store's key carries a suffix that must not move the record). A record without a key has no
partition of its own: it stays on ``old partition % partitions``.

Order: a key's records all come from one source partition (the source was partitioned by the same key), so
each target partition is produced by one Spark task, sorted by (source partition, offset), through an
idempotent producer: each key's records keep their order, timestamps and headers. The producer sets each
record's partition itself (librdkafka's partitioner is not Kafka's).

:func:`verify_copy` reads the target back and compares, per key, the number of records and a checksum of
their (key, value) with the source's, and checks that every keyed record sits on the partition its key
gives: nothing lost, nothing added, nothing misplaced. A copy that fails midway leaves a partial target:
:func:`copy_to_generation` refuses a target that is not empty, so a retry starts from a re-created topic.

Nothing here imports Dagster: the scaling job and the benchmark call it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from assets.spark.kafka_source import SOURCE_NAME
from assets.spark.offsets import partition_bounds, reader_consumer, topic_partitions
from assets.spark.options import client_options
from streaming.runtime.partitioning import partition_for_key

__all__ = ["CopyError", "CopyResult", "PartitionKey", "copy_to_generation", "produce_to_partitions", "verify_copy",
           "with_target_partition"]

#: A record's key bytes -> the key bytes whose murmur2 hash decides its partition.
PartitionKey = Callable[[bytes], bytes]

_READ_SCHEMA = "key binary, value binary, partition int, offset long, timestamp timestamp, " \
               "headers array<struct<key: string, value: binary>>"
_COUNTS_SCHEMA = "target_partition int, records long"
_COUNTS_ARROW = pa.schema([("target_partition", pa.int32()), ("records", pa.int64())])


class CopyError(RuntimeError):
    """A generation copy cannot start, failed, or does not match its source (the message names the topics)."""


@dataclass(frozen=True)
class CopyResult:
    """What :func:`copy_to_generation` wrote: records per target partition (the fresh target's end offsets,
    where the group's committed offsets go) and the source offsets it covered."""

    source: str
    target: str
    partitions: int
    written: dict[int, int]
    source_ends: dict[int, int]
    duration_s: float

    @property
    def records(self) -> int:
        return sum(self.written.values())


def _ends(client_config: Mapping[str, str], topic: str) -> dict[int, tuple[int, int]]:
    consumer = reader_consumer(client_config, f"generation copy of {topic}")
    try:
        partitions = topic_partitions(consumer, [topic])[topic]
        bounds = partition_bounds(consumer, [(topic, p) for p in partitions])
    finally:
        consumer.close()
    return {p: (b.earliest, b.end) for (_, p), b in bounds.items()}


def _read(spark: SparkSession, client_config: Mapping[str, str], topic: str, ends: Mapping[int, int]) -> DataFrame:
    return (spark.read.format(SOURCE_NAME).schema(_READ_SCHEMA).options(**client_options(client_config))
            .option("subscribe", topic).option("startingOffsets", "earliest")
            .option("endingOffsets", json.dumps({topic: {str(p): o for p, o in ends.items()}}))
            .load())


def with_target_partition(df: DataFrame, partitions: int, partition_key: PartitionKey | None) -> DataFrame:
    """``df`` (with ``key`` and ``partition``) plus ``target_partition``: where its key goes among ``partitions``
    (a record without a key: its old partition modulo ``partitions``)."""
    key_of = partition_key or (lambda key: key)

    @F.udf("int")
    def target(key: bytes | None, partition: int) -> int:
        return partition % partitions if key is None else partition_for_key(key_of(bytes(key)), partitions)

    return df.withColumn("target_partition", target("key", "partition"))


def copy_to_generation(spark: SparkSession, *, client_config: Mapping[str, Any], source: str, target: str,
                       partitions: int, source_ends: Mapping[int, int] | None = None,
                       partition_key: PartitionKey | None = None) -> CopyResult:
    """Copy ``source`` (up to ``source_ends``, by default its ends now) into the empty topic ``target`` of
    ``partitions`` partitions, re-partitioned by ``partition_key`` (module doc).

    Raises:
        CopyError: ``target`` does not have ``partitions`` partitions or is not empty, or a record was not
            acknowledged (names the topic, partition and the broker's error).
    """
    started = time.monotonic()
    config = {key: str(value) for key, value in client_config.items()}
    target_bounds = _ends(config, target)
    if len(target_bounds) != partitions:
        raise CopyError(f"topic {target} has {len(target_bounds)} partitions, not {partitions}: create it with "
                        f"{partitions} before copying {source} into it")
    written_before = {p: end for p, (_, end) in target_bounds.items() if end > 0}
    if written_before:
        raise CopyError(f"topic {target} is not empty ({written_before}): a copy into it already started; delete "
                        f"and re-create it (with {partitions} partitions) before copying {source} again")
    ends = dict(source_ends) if source_ends is not None else {p: end for p, (_, end) in _ends(config, source).items()}
    records = with_target_partition(_read(spark, config, source, ends), partitions, partition_key)
    written = produce_to_partitions(records, config, target, partitions, order=["partition", "offset"])
    return CopyResult(source=source, target=target, partitions=partitions, written=written, source_ends=ends,
                      duration_s=time.monotonic() - started)


def produce_to_partitions(rows: DataFrame, client_config: Mapping[str, Any], target: str, partitions: int,
                          order: list[str]) -> dict[int, int]:
    """Produce ``rows`` (columns ``target_partition``, ``key``, ``value``, ``timestamp``, ``headers`` and those of
    ``order``) to ``target``: each target partition by one Spark task, in ``order``, through an idempotent
    producer that sets the partition. Returns the records written per target partition (all ``partitions``).

    Raises:
        CopyError: a record was not acknowledged (names the topic, partition and the broker's error).
    """
    config = {key: str(value) for key, value in client_config.items()}
    counts = (rows.repartition(partitions, "target_partition")
              .sortWithinPartitions("target_partition", *order)
              .select("target_partition", "key", "value", "timestamp", "headers")
              .mapInArrow(_producer_of(config, target), _COUNTS_SCHEMA)
              .groupBy("target_partition").agg(F.sum("records").alias("records"))
              .collect())
    written = {p: 0 for p in range(partitions)}
    written.update({int(row.target_partition): int(row.records) for row in counts})
    return written


def _producer_of(config: Mapping[str, str], target: str) -> Callable[[Iterator[pa.RecordBatch]],
                                                                      Iterator[pa.RecordBatch]]:
    """The executor side of the copy: produce each batch's rows in order to their target partition."""

    def produce(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from confluent_kafka import Producer

        failures: list[str] = []

        def delivered(error: Any, message: Any) -> None:
            if error is not None and len(failures) < 5:
                failures.append(f"{message.topic()}[{message.partition()}]: {error}")

        producer = Producer({**config, "enable.idempotence": True, "linger.ms": 20, "on_delivery": delivered})
        counts: dict[int, int] = {}
        for batch in batches:
            micros = batch.column("timestamp").cast(pa.int64()).to_pylist()
            rows = batch.select(["target_partition", "key", "value", "headers"]).to_pylist()
            for row, ts in zip(rows, micros, strict=True):
                headers = [(h["key"], h["value"]) for h in row["headers"]] if row["headers"] else None
                partition = row["target_partition"]
                while True:
                    try:
                        producer.produce(target, row["value"], row["key"], partition=partition,
                                         timestamp=ts // 1000 if ts is not None else 0, headers=headers)
                        break
                    except BufferError:  # the queue is full: let it drain
                        producer.poll(0.1)
                counts[partition] = counts.get(partition, 0) + 1
            producer.poll(0)
        if producer.flush(120) or failures:
            raise CopyError(f"copying into {target}: records were not acknowledged: "
                            f"{failures[0] if failures else 'still queued after 120 s'}")
        yield pa.RecordBatch.from_pydict({"target_partition": list(counts), "records": list(counts.values())},
                                         schema=_COUNTS_ARROW)

    return produce


def verify_copy(spark: SparkSession, *, client_config: Mapping[str, Any], result: CopyResult,
                partition_key: PartitionKey | None = None) -> None:
    """Check ``result``'s target against its source (module doc).

    Raises:
        CopyError: naming how many keys differ (and the first), or how many records sit on a wrong partition.
    """
    config = {key: str(value) for key, value in client_config.items()}

    def per_key(df: DataFrame) -> DataFrame:
        return df.groupBy("key").agg(F.count(F.lit(1)).alias("records"),
                                     F.sum(F.crc32(F.concat(F.coalesce("key", F.lit(b"")),
                                                            F.coalesce("value", F.lit(b""))))).alias("checksum"))

    source = per_key(_read(spark, config, result.source, result.source_ends))
    target_df = _read(spark, config, result.target, result.written)
    target = per_key(target_df)
    differ = (source.alias("s").join(target.alias("t"), F.col("s.key").eqNullSafe(F.col("t.key")), "full_outer")
              .where(~F.col("s.records").eqNullSafe(F.col("t.records"))
                     | ~F.col("s.checksum").eqNullSafe(F.col("t.checksum")))
              .select(F.coalesce("s.key", "t.key").alias("key")))
    mismatched = differ.count()
    if mismatched:
        first = differ.first()
        key = bytes(first.key) if first is not None and first.key is not None else None
        raise CopyError(f"copy of {result.source} into {result.target} does not match its source: {mismatched} keys "
                        f"differ in records or content (the first: {key!r})")
    placed = with_target_partition(target_df.where(F.col("key").isNotNull()), result.partitions, partition_key)
    misplaced = placed.where(F.col("partition") != F.col("target_partition")).count()
    if misplaced:
        raise CopyError(f"{misplaced} records of {result.target} are not on the partition their key gives for "
                        f"{result.partitions} partitions")
