"""Archive one day of one topic: find its offsets, read them with Spark, decode, verify, write, publish.

1. Each partition's offsets ``[earliest, end)`` come from fetch responses, and the offsets that hold
   the day from the records' timestamps (:mod:`assets.archive.day_offsets`).
2. Spark reads exactly those ranges through the ``brook-kafka`` source and decodes them
   (:mod:`assets.archive.decode`, in ``mapInArrow``); the decoded rows are cached for the passes below.
3. One aggregation verifies the disorder assumption on every record read (how far its timestamp is
   behind the largest one before it in its partition; more than ``max_disorder_minutes`` fails the
   run, naming the record) and counts, per partition, the day's rows and undecodable records.
4. The day's records (timestamp in ``[D, D + 1 day)``) are written to a staging directory, its
   undecodable records to ``_undecodable/`` in it, every one of its records as Kafka held it (key and
   value bytes, headers, partition, offset, timestamp) to ``_raw/``, and the staging directory is
   published with its manifest as ``date=D`` (:mod:`assets.archive.writer`).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assets.archive.day_offsets import DAY_MS, DayRange, day_offset_ranges
from assets.archive.decode import (
    ERROR_COLUMN,
    RAW_KEY_COLUMN,
    RAW_VALUE_COLUMN,
    RECORD_HEADERS_COLUMN,
    RECORD_KEY_COLUMN,
    RECORD_VALUE_COLUMN,
    decode_batches,
    decoded_schema,
)
from assets.archive.layout import RAW_DIR, UNDECODABLE_DIR
from assets.archive.writer import discard_staging, publish_day, recover_day, staging_dir
from assets.platform_spec import ArchiveSpec, TopicSpec
from assets.spark import SOURCE_NAME, client_options
from assets.spark.offsets import partition_bounds, reader_consumer, topic_partitions

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["READER_SETTINGS", "READ_SCHEMA", "ArchiveError", "ArchivedDay", "PartitionReport", "archive_day",
           "write_records"]

log = logging.getLogger(__name__)

#: Client settings of the archive's reads unless the cluster's settings say otherwise. The embedded
#: broker holds a fetch for the whole ``fetch.wait.max.ms`` (500 ms by default) whenever it does not
#: start at the partition's first offset, data or not: a day's offset search (~2 log2(n) single-record
#: fetches per partition) took 12 s instead of 0.25 s for 1,200 records. Apache Kafka answers as
#: soon as data is there, so a short wait costs nothing but a few empty fetches at a partition's end.
READER_SETTINGS = {"fetch.wait.max.ms": 10}

#: The source's columns the archive needs (the source builds only these).
READ_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
                "headers array<struct<key: string, value: binary>>")


class ArchiveError(RuntimeError):
    """The day cannot be archived as asked (the message names topic, partition and offset)."""


@dataclass(frozen=True)
class PartitionReport:
    """What the archive read from, and wrote for, one partition."""

    start: int
    end: int
    closed: bool
    read: int
    rows: int
    undecodable: int
    first_offset: int | None
    last_offset: int | None
    max_behind_ms: int
    probes: int


@dataclass(frozen=True)
class ArchivedDay:
    """The outcome of archiving one topic's day."""

    topic: str
    day: date
    path: Path
    rows: int
    undecodable: int
    bytes: int
    partitions: dict[int, PartitionReport]
    seconds: float

    @property
    def complete(self) -> bool:
        """Every partition has a record past the day's end plus the disorder bound: nothing more can come."""
        return all(report.closed for report in self.partitions.values())


def _day_start_ms(day: date) -> int:
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000)


def _find_ranges(client_config: dict[str, Any], topic: str, day_start_ms: int,
                 max_disorder_ms: int) -> dict[int, DayRange]:
    consumer = reader_consumer(client_config, "archive")
    try:
        partitions = topic_partitions(consumer, [topic])[topic]
        bounds = partition_bounds(consumer, [(topic, p) for p in partitions])
        return day_offset_ranges(consumer, topic, {p: (bounds[(topic, p)].earliest, bounds[(topic, p)].end)
                                                   for p in partitions}, day_start_ms, max_disorder_ms)
    finally:
        consumer.close()


def _read_decoded(spark: SparkSession, client_config: dict[str, Any], topic: str, spec: TopicSpec,
                  ranges: dict[int, DayRange]) -> DataFrame:
    from pyspark.sql.pandas.types import from_arrow_schema

    offsets = {"start": {topic: {str(p): r.start for p, r in ranges.items()}},
               "end": {topic: {str(p): r.end for p, r in ranges.items()}}}
    raw = (spark.read.format(SOURCE_NAME)
           .schema(READ_SCHEMA)
           .options(**client_options(client_config))
           .option("subscribe", topic)
           .option("startingOffsets", json.dumps(offsets["start"]))
           .option("endingOffsets", json.dumps(offsets["end"]))
           .load())
    return raw.mapInArrow(partial(decode_batches, topic=spec), from_arrow_schema(decoded_schema(spec)))


def _partition_stats(decoded: DataFrame, day_start_ms: int) -> dict[int, dict[str, Any]]:
    """Per partition: records read, the day's rows and undecodable records, their offsets, and the
    largest distance (ms) of a record's timestamp behind the largest one before it, with its offset."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ts_ms = F.unix_millis("timestamp")
    before = Window.partitionBy("partition").orderBy("offset").rowsBetween(Window.unboundedPreceding, -1)
    in_day = (ts_ms >= day_start_ms) & (ts_ms < day_start_ms + DAY_MS)
    ok = F.col(ERROR_COLUMN).isNull()
    rows = (decoded.select("partition", "offset", ts_ms.alias("ts"), in_day.alias("in_day"), ok.alias("ok"))
            .withColumn("behind", F.greatest(F.lit(0), F.max("ts").over(before) - F.col("ts")))
            .groupBy("partition")
            .agg(F.count(F.lit(1)).alias("read"),
                 F.sum((F.col("in_day") & F.col("ok")).cast("long")).alias("rows"),
                 F.sum((F.col("in_day") & ~F.col("ok")).cast("long")).alias("undecodable"),
                 F.min(F.when(F.col("in_day"), F.col("offset"))).alias("first_offset"),
                 F.max(F.when(F.col("in_day"), F.col("offset"))).alias("last_offset"),
                 F.max(F.coalesce("behind", F.lit(0))).alias("max_behind_ms"),
                 F.max_by("offset", F.coalesce("behind", F.lit(0))).alias("worst_offset"))
            .collect())
    return {row["partition"]: row.asDict() for row in rows}


def _bytes_under(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*.parquet"))


def _verify_disorder(topic: str, day: date, stats: dict[int, dict[str, Any]], bound_minutes: int) -> None:
    """Fail when a record read is further behind than the bound the day's offsets were found with."""
    for partition, stat in sorted(stats.items()):
        if stat["max_behind_ms"] > bound_minutes * 60_000:
            raise ArchiveError(
                f"topic {topic!r} partition {partition} offset {stat['worst_offset']}: its timestamp is "
                f"{stat['max_behind_ms'] / 60_000:.1f} min behind an earlier record's, more than the bound of "
                f"{bound_minutes} min (archive.max_disorder_minutes, or the topic's own max_disorder_minutes); "
                f"day {day} could miss records: raise the bound in platform.yaml and archive the day again")


def _column(name: str) -> Column:
    """The column called ``name`` exactly: quoted, so a field such as ``event.type`` is not read as a struct path."""
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def _in_day(day_start_ms: int) -> Column:
    """Whether a row's timestamp falls in the day starting at ``day_start_ms``."""
    from pyspark.sql import functions as F

    ts_ms = F.unix_millis("timestamp")
    return (ts_ms >= day_start_ms) & (ts_ms < day_start_ms + DAY_MS)


def write_records(decoded: DataFrame, spec: TopicSpec, selected: Column, staging: Path, undecodable: int) -> None:
    """The ``selected`` rows of ``decoded`` (rows of :func:`assets.archive.decode.decoded_schema`) in the archive's
    layout under ``staging``: the decoded records, the undecodable ones (raw bytes, reason) in ``_undecodable``
    (``undecodable``: how many there are), and all of them as Kafka held them in ``_raw``."""
    from pyspark.sql import functions as F

    (decoded.where(selected & F.col(ERROR_COLUMN).isNull()).select(*[_column(name) for name in spec.columns()])
     .write.mode("errorifexists").parquet(str(staging)))
    if undecodable:
        (decoded.where(selected & F.col(ERROR_COLUMN).isNotNull())
         .select("topic", "partition", "offset", "timestamp", F.col(RAW_KEY_COLUMN).alias("key"),
                 F.col(RAW_VALUE_COLUMN).alias("value"), F.col(ERROR_COLUMN).alias("error"))
         .write.parquet(str(staging / UNDECODABLE_DIR)))
    (decoded.where(selected)
     .select("partition", "offset", "timestamp", F.col(RECORD_KEY_COLUMN).alias("key"),
             F.col(RECORD_VALUE_COLUMN).alias("value"), F.col(RECORD_HEADERS_COLUMN).alias("headers"))
     .write.parquet(str(staging / RAW_DIR)))


def _reports(ranges: dict[int, DayRange], stats: dict[int, dict[str, Any]]) -> dict[int, PartitionReport]:
    reports = {}
    for partition, found in sorted(ranges.items()):
        stat = stats.get(partition, {})  # no row: nothing was read from the partition
        reports[partition] = PartitionReport(
            start=found.start, end=found.end, closed=found.closed, probes=found.probes,
            read=stat.get("read") or 0, rows=stat.get("rows") or 0, undecodable=stat.get("undecodable") or 0,
            first_offset=stat.get("first_offset"), last_offset=stat.get("last_offset"),
            max_behind_ms=stat.get("max_behind_ms") or 0)
    return reports


def archive_day(spark: SparkSession, client_config: dict[str, Any], topic: str, spec: TopicSpec,
                archive: ArchiveSpec, day: date, physical_topic: str | None = None) -> ArchivedDay:
    """Archive ``topic``'s records with a timestamp in ``day`` (UTC) to ``<archive>/<topic>/date=<day>``.

    ``physical_topic``: the topic generation that carries ``topic`` now (partition scaling; default ``topic``
    itself). The archive keeps the logical name; its ``topic``, ``partition`` and ``offset`` columns say where in
    Kafka each record was read, so they name the physical topic.

    Raises:
        ArchiveError: a record read is further out of order than the topic's disorder bound (its own
            ``max_disorder_minutes``, else the archive's; the day's offsets were found with it), naming
            the topic, partition and offset.
    """
    from pyspark import StorageLevel

    started = time.monotonic()
    client_config = {**READER_SETTINGS, **client_config}
    root = archive.root()
    day_start_ms = _day_start_ms(day)
    bound_minutes = spec.disorder_bound_minutes(archive)
    source = physical_topic or topic
    ranges = _find_ranges(client_config, source, day_start_ms, bound_minutes * 60_000)
    log.info("archive %s %s: offsets of %s %s", topic, day, source, {p: (r.start, r.end) for p, r in ranges.items()})

    decoded = _read_decoded(spark, client_config, source, spec, ranges).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        stats = _partition_stats(decoded, day_start_ms)
        _verify_disorder(topic, day, stats, bound_minutes)
        reports = _reports(ranges, stats)
        rows = sum(report.rows for report in reports.values())
        undecodable = sum(report.undecodable for report in reports.values())
        recover_day(root, topic, day)
        staging = staging_dir(root, topic, day)
        try:
            write_records(decoded, spec, _in_day(day_start_ms), staging, undecodable)
            size = _bytes_under(staging)
            manifest = {"topic": topic, "day": day.isoformat(), "rows": rows, "undecodable": undecodable,
                        "raw_records": rows + undecodable,
                        "max_disorder_minutes": bound_minutes,
                        "written_at": datetime.now(UTC).isoformat(),
                        "partitions": {str(p): asdict(report) for p, report in reports.items()}}
            path = publish_day(staging, root, topic, day, manifest)
        except BaseException:
            discard_staging(staging)
            raise
    finally:
        decoded.unpersist()
    return ArchivedDay(topic=topic, day=day, path=path, rows=rows, undecodable=undecodable, bytes=size,
                       partitions=reports, seconds=time.monotonic() - started)
