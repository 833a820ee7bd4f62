"""``brook-kafka``: a Spark batch data source for Kafka topics, built on confluent-kafka.

Spark's built-in ``kafka`` format needs the connector jar, which the pyspark distribution lacks;
this Python data source (``pyspark.sql.datasource``) reads the same columns with the same options::

    from assets.spark import register_kafka_source

    register_kafka_source(spark)
    df = (spark.read.format("brook-kafka")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "orders,users")
          .option("startingOffsets", '{"orders": {"0": 23}}')
          .load())

Columns, as Spark's Kafka source: ``key`` and ``value`` (binary), ``topic``, ``partition``,
``offset``, ``timestamp``, ``timestampType`` (0 create time, 1 log-append time), ``headers``
(``array<struct<key, value>>``, null when a record has none). Options: see
:mod:`assets.spark.options`.

Python data sources get no column pruning from Spark, so a read that needs only some columns can
say so with a schema of a subset of them (same names and types, any order), and the source builds
only those: ``.schema("key binary, value binary, partition int, offset long")``. Building every
column costs ~2x the key/value/partition/offset subset in Python (measured with bench/compaction.py).

How a read is planned and run:

- On the driver, once per query (each action plans anew, as with Spark's own Kafka source; pass
  explicit ``endingOffsets`` to pin a range): each subscribed partition's earliest and end offsets
  come from fetch responses (:mod:`assets.spark.offsets`; never ListOffsets "latest"), the asked
  start and end are resolved and checked against them, and each partition becomes one Spark input
  partition ``[start, end)``.
- On the executors: a consumer assigned at ``start`` reads until the first record at or past ``end``
  or partition EOF, so gaps in offsets (compaction, transaction markers) end a range correctly, and
  hands the records to Spark as Arrow record batches (measured ~2x faster than rows: bench/README.md).
- ``startingTimestamp`` / ``endingTimestamp`` follow Kafka's ``offsetsForTimes`` meaning -- a range
  starts at the first record whose timestamp is >= the start and ends before the first record whose
  timestamp is >= the end -- but are resolved by the records' own timestamps as they are read, not by
  asking the broker: the embedded broker's answer is coarse (append time, batch granularity, 0 past
  the end), and with out-of-order timestamps nothing short of reading the records is exact. The
  price is reading the partition from its start; a start with no matching record reads nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    KafkaError,
    Message,
    TopicPartition,
)
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from assets.spark.offsets import PartitionBounds, partition_bounds, reader_consumer, topic_partitions
from assets.spark.options import EARLIEST, LATEST, KafkaReadOptions, KafkaSourceError, parse_options

__all__ = [
    "KAFKA_SCHEMA",
    "SOURCE_NAME",
    "KafkaDataSource",
    "KafkaRange",
    "iter_range",
    "plan_ranges",
    "register_kafka_source",
    "to_record_batch",
]

SOURCE_NAME = "brook-kafka"

KAFKA_SCHEMA = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
    StructField("headers", ArrayType(StructType([
        StructField("key", StringType()),
        StructField("value", BinaryType()),
    ]))),
])

_HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
_ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("timestampType", pa.int32()),
    ("headers", _HEADER_TYPE),
])
# confluent-kafka's timestamp type -> Kafka's TimestampType id, as Spark reports it.
_TIMESTAMP_TYPE_IDS = {TIMESTAMP_CREATE_TIME: 0, TIMESTAMP_LOG_APPEND_TIME: 1}
_CONSUME_BATCH = 10_000


@dataclass(frozen=True)
class KafkaRange(InputPartition):
    """One Spark input partition: records of ``topic[partition]`` with ``start <= offset < end``.

    ``starting_timestamp`` / ``ending_timestamp`` narrow it by record timestamps (module doc).
    """

    topic: str
    partition: int
    start: int
    end: int
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None


def register_kafka_source(spark: SparkSession) -> None:
    """Make ``spark.read.format("brook-kafka")`` available in ``spark`` (idempotent)."""
    spark.dataSource.register(KafkaDataSource)


class KafkaDataSource(DataSource):
    """The ``brook-kafka`` batch source (see the module doc)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return KAFKA_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaReader(parse_options(self.options), _columns(schema))


def _columns(schema: StructType) -> tuple[str, ...]:
    """The names of ``schema``'s fields, checked to be columns of :data:`KAFKA_SCHEMA` with its types."""
    known = {f.name: f.dataType for f in KAFKA_SCHEMA.fields}
    for f in schema.fields:
        if f.name not in known:
            raise KafkaSourceError(f"schema column {f.name!r} is not a column of {SOURCE_NAME}: {list(known)}")
        if f.dataType != known[f.name]:
            raise KafkaSourceError(f"schema column {f.name!r} must be {known[f.name].simpleString()}, "
                                   f"not {f.dataType.simpleString()}")
    if len({f.name for f in schema.fields}) != len(schema.fields):
        raise KafkaSourceError("schema names a column twice")
    return tuple(f.name for f in schema.fields)


class KafkaReader(DataSourceReader):
    """Plans one :class:`KafkaRange` per partition on the driver; reads a range on an executor."""

    def __init__(self, options: KafkaReadOptions, columns: tuple[str, ...] = tuple(KAFKA_SCHEMA.names)) -> None:
        self.options = options
        self.columns = columns

    def partitions(self) -> list[InputPartition]:
        return list(plan_ranges(self.options))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, KafkaRange):  # Spark hands one empty partition when none was planned
            return
        for messages in iter_range(self.options, partition):
            yield to_record_batch(messages, partition.topic, partition.partition, self.columns)


def plan_ranges(options: KafkaReadOptions) -> list[KafkaRange]:
    """Resolve the asked start and end of every subscribed partition against the broker.

    Raises:
        KafkaSourceError: a topic or partition does not exist, or an asked offset is outside what
            the partition holds (the message names topic, partition and offsets).
    """
    consumer = reader_consumer(options.client_config, "plan")
    try:
        partitions = topic_partitions(consumer, options.topics)
        for option, spec in (("startingOffsets", options.starting), ("endingOffsets", options.ending)):
            for topic, offsets in spec.per_partition.items():
                unknown = sorted(set(offsets) - set(partitions[topic]))
                if unknown:
                    raise KafkaSourceError(f"option {option!r}: topic {topic!r} has no partition(s) {unknown} "
                                           f"(it has {len(partitions[topic])})")
        wanted = [(topic, p) for topic in options.topics for p in partitions[topic]]
        timeout = options.poll_timeout_ms / 1000
        bounds = partition_bounds(consumer, wanted, timeout=timeout)
    finally:
        consumer.close()

    ranges = []
    for topic, p in wanted:
        bound = bounds[(topic, p)]
        if options.starting_timestamp is not None:
            start = bound.earliest
        else:
            start = _resolve("startingOffsets", options.starting.offset_for(topic, p), topic, p, bound)
        end = _resolve("endingOffsets", options.ending.offset_for(topic, p), topic, p, bound)
        if start > end:
            raise KafkaSourceError(f"{topic}[{p}]: starting offset {start} is after ending offset {end}")
        ranges.append(KafkaRange(topic, p, start, end, options.starting_timestamp, options.ending_timestamp))
    return ranges


def _resolve(option: str, asked: int, topic: str, partition: int, bound: PartitionBounds) -> int:
    if asked == EARLIEST:
        return bound.earliest
    if asked == LATEST:
        return bound.end
    if asked < bound.earliest or asked > bound.end:
        raise KafkaSourceError(f"option {option!r}: offset {asked} of {topic}[{partition}] is outside the "
                               f"partition's offsets [{bound.earliest}, {bound.end}]")
    return asked


def iter_range(options: KafkaReadOptions, rng: KafkaRange) -> Iterator[list[Message]]:
    """The records of one range, in offset order, as lists of confluent-kafka messages.

    Stops at the first record at or past ``rng.end`` or at partition EOF, whichever comes first.

    Raises:
        KafkaSourceError: the broker no longer has an offset of the range (retention, truncation),
            EOF came before ``rng.end`` (the log lost records), a fetch failed, or nothing arrived
            within ``kafkaConsumer.pollTimeoutMs``.
    """
    if rng.start >= rng.end:
        return
    where = f"{rng.topic}[{rng.partition}]"
    started = rng.starting_timestamp is None
    by_offset_only = started and rng.ending_timestamp is None
    consumer = reader_consumer(options.client_config, "read")
    try:
        consumer.assign([TopicPartition(rng.topic, rng.partition, rng.start)])
        position = rng.start
        idle_since = time.monotonic()
        while True:
            # consume() waits until it has num_messages or the timeout passed: never ask for more
            # offsets than the range has left, so its last batch returns as soon as it arrived.
            messages = consumer.consume(max(1, min(_CONSUME_BATCH, rng.end - position)), 0.5)
            if not messages:
                if time.monotonic() - idle_since > options.poll_timeout_ms / 1000:
                    raise KafkaSourceError(f"{where}: no records from offset {position} within "
                                           f"{options.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs)")
                continue
            idle_since = time.monotonic()
            last = messages[-1]
            if (by_offset_only and last.error() is None and last.offset() < rng.end
                    and all(m.error() is None for m in messages)):
                position = last.offset() + 1  # the common case: a whole batch inside the range
                yield messages
                if position >= rng.end:
                    return
                continue
            batch: list[Message] = []
            done = False
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise KafkaSourceError(_read_error(where, position, error))
                    if message.offset() < rng.end:
                        raise KafkaSourceError(
                            f"{where}: the partition ends at offset {message.offset()}, before the planned end "
                            f"{rng.end} of this read (records were deleted or the log was truncated)")
                    done = True
                    break
                offset = message.offset()
                if offset >= rng.end:
                    done = True
                    break
                position = offset + 1
                if rng.ending_timestamp is not None and message.timestamp()[1] >= rng.ending_timestamp:
                    done = True
                    break
                if not started:
                    if message.timestamp()[1] < rng.starting_timestamp:  # type: ignore[operator]
                        continue
                    started = True
                batch.append(message)
            if batch:
                yield batch
            if done or position >= rng.end:
                return
    finally:
        consumer.close()


def _read_error(where: str, position: int, error: KafkaError) -> str:
    if error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
        return (f"{where}: offset {position} is no longer on the broker (deleted by retention or truncation "
                f"since the read was planned): {error.str()}")
    return f"{where}: fetch failed at offset {position}: {error.str()}"


def to_record_batch(messages: list[Message], topic: str, partition: int,
                    columns: tuple[str, ...] = tuple(KAFKA_SCHEMA.names)) -> pa.RecordBatch:
    """Arrow record batch of ``columns`` (default: all of the source's schema) from records of one partition."""
    n = len(messages)
    arrays: list[Any] = []
    stamps: list[tuple[int, int]] | None = None
    for name in columns:
        if name == "key":
            arrays.append(pa.array([m.key() for m in messages], pa.binary()))
        elif name == "value":
            arrays.append(pa.array([m.value() for m in messages], pa.binary()))
        elif name == "topic":
            arrays.append(pa.DictionaryArray.from_arrays(np.zeros(n, np.int32), pa.array([topic])).cast(pa.string()))
        elif name == "partition":
            arrays.append(pa.array(np.full(n, partition, np.int32)))
        elif name == "offset":
            arrays.append(pa.array([m.offset() for m in messages], pa.int64()))
        elif name in ("timestamp", "timestampType"):
            stamps = stamps if stamps is not None else [m.timestamp() for m in messages]
            if name == "timestamp":
                arrays.append(pa.array([ts * 1000 if kind in _TIMESTAMP_TYPE_IDS else None for kind, ts in stamps],
                                       pa.timestamp("us", tz="UTC")))
            else:
                arrays.append(pa.array([_TIMESTAMP_TYPE_IDS.get(kind, -1) for kind, _ in stamps], pa.int32()))
        else:
            arrays.append(pa.array([m.headers() for m in messages], _HEADER_TYPE))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema([_ARROW_SCHEMA.field(name) for name in columns]))
