"""A day's input for a batch run, taken back from the archive: every input partition's records from where the
previous day's run stopped to the day's frontier (:func:`streaming.batch.select_day`).

The driver decides which records a day replays (:func:`day_input`) from their offsets and timestamps alone; the
records themselves are read where they are replayed (:func:`replayed_records`: in a Spark run, by the task of their
partitions, on an executor), so no record goes through the driver.

The frontier is the day's end plus the largest disorder bound of the app's inputs (M). The records a day's run
needs have timestamps from the day's start (each partition's previous run stopped at its first record at or past
the previous frontier, and no record after that is more than M behind it) to the frontier, so with M under half
a day they are all in the archives of the day and the next (``_raw/``: every record as Kafka held it). The first
day of an app's reprocessing has no previous run: it starts at the offset the archive started reading the day
from (its manifest's offset range), and may need records of the day before from that day's archive.

Refused, each with one line naming the topic, the day and what to do, before anything is run: a day or the next
with no archive (or one archived before the archive kept raw records), an archive written before the frontier
(it may miss records of the day), and an archive whose records do not add up to what it read from Kafka (the
manifest's count of records read in the day's offset range, against the records of that range in the archives
of the day, the day before and the day after).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

from assets.archive.layout import day_dir, raw_dir, read_manifest
from streaming.batch import BatchRecord, select_day

__all__ = ["DAY_MS", "DayInput", "ReprocessInputError", "check_archived", "day_input", "day_start_ms", "frontier_of",
           "replayed_records"]

DAY_MS = 86_400_000
TopicPartition = tuple[str, int]


class ReprocessInputError(ValueError):
    """The archive cannot give a day's input as a batch run needs it (the message names topic, day and why)."""


@dataclass(frozen=True)
class DayInput:
    """What a day's run replays: per input partition the offsets of its records (from the first, up to, not
    including, where the partition stopped) and how many they are, the frontier, and per topic the archive days that
    hold them (:func:`replayed_records` reads them)."""

    ranges: dict[TopicPartition, tuple[int, int]]
    counts: dict[TopicPartition, int]
    frontier: int
    days_read: dict[str, list[str]]

    @property
    def stops(self) -> dict[TopicPartition, int]:
        """Where each partition stopped: the offset the next day's run starts it from."""
        return {tp: stop for tp, (_, stop) in self.ranges.items()}

    @property
    def count(self) -> int:
        return sum(self.counts.values())


class _Position(NamedTuple):
    """Where a record is in its partition and in time: all :func:`day_input` needs to choose a day's records."""

    offset: int
    timestamp: int


def day_start_ms(day: date) -> int:
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000)


def frontier_of(day: date, bound_minutes: int) -> int:
    """The end of ``day`` plus the disorder bound (epoch ms): where a day's run stops each partition."""
    return day_start_ms(day) + DAY_MS + bound_minutes * 60_000


def day_input(archive_root: Path, partitions: Mapping[str, int], day: date, bound_minutes: int,
              starts: Mapping[TopicPartition, int] | None, start_date: date | None = None) -> DayInput:
    """Which records ``day``'s run replays for the topics of ``partitions`` (topic -> partition count), chosen from
    the archived records' offsets and timestamps.

    ``starts``: where the previous day's run stopped each partition (None: the first day). ``bound_minutes``: the
    largest disorder bound of the topics. ``start_date``: the archive's first day (what a refusal suggests).

    Raises:
        ReprocessInputError: see the module doc.
    """
    frontier, shown = _frontier(day, bound_minutes)
    positions: dict[TopicPartition, list[_Position]] = {}
    chosen_starts: dict[TopicPartition, int] = dict(starts or {})
    days_read: dict[str, list[str]] = {}
    for topic, count in sorted(partitions.items()):
        manifests = _manifests(archive_root, topic, day, shown, frontier)
        days_read[topic] = [d.isoformat() for d in sorted(manifests)]
        by_partition = _positions(archive_root, topic, sorted(manifests))
        _check_counts(topic, day, manifests, by_partition, start_date)
        ranges = manifests[day]["partitions"]
        for partition in range(count):
            tp = (topic, partition)
            if starts is None:
                chosen_starts[tp] = ranges[str(partition)]["start"] if str(partition) in ranges else 0
            positions[tp] = by_partition.get(partition, [])
    selected, stops = select_day(positions, frontier, chosen_starts)
    # select_day takes a run of consecutive records: those from its first one's offset to the stop
    return DayInput({tp: (chosen[0].offset if chosen else stops[tp], stops[tp]) for tp, chosen in selected.items()},
                    {tp: len(chosen) for tp, chosen in selected.items()}, frontier, days_read)


def replayed_records(archive_root: Path, days: list[DayInput], partitions: Iterable[TopicPartition]
                     ) -> list[dict[TopicPartition, list[BatchRecord]]]:
    """The records ``days`` (consecutive days of a run) replay on ``partitions``, per day and partition, in offset
    order: each topic's archives read once for all the days."""
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, partition in sorted(set(partitions)):
        by_topic[topic].append(partition)
    replayed: list[dict[TopicPartition, list[BatchRecord]]] = [{} for _ in days]
    for topic, topic_partitions in by_topic.items():
        archived = sorted({d for day in days for d in day.days_read[topic]})
        by_partition = _raw_records(archive_root, topic, [date.fromisoformat(d) for d in archived], topic_partitions)
        for partition in topic_partitions:
            records = by_partition.get(partition, [])
            offsets = [r.offset for r in records]
            for index, day in enumerate(days):
                first, stop = day.ranges[(topic, partition)]
                replayed[index][(topic, partition)] = records[bisect_left(offsets, first):bisect_left(offsets, stop)]
    return replayed


def _frontier(day: date, bound_minutes: int) -> tuple[int, str]:
    """The day's frontier, in epoch ms and as shown in messages."""
    if 2 * bound_minutes >= 24 * 60:
        raise ReprocessInputError(f"the inputs' disorder bound is {bound_minutes} min: a day's run would need "
                                  f"records of more than the day after; batch reprocessing needs a bound under 12 h")
    frontier = frontier_of(day, bound_minutes)
    return frontier, datetime.fromtimestamp(frontier / 1000, tz=UTC).isoformat(timespec="minutes")


def check_archived(archive_root: Path, topics: Iterable[str], day: date, bound_minutes: int) -> None:
    """Refuse, as :func:`day_input` would, a day whose archives (of the day and the next) are missing, older than
    the raw records or written before the day's frontier; reads no records (a backfill checks every day of its
    range before the first one runs).

    Raises:
        ReprocessInputError: see the module doc.
    """
    frontier, shown = _frontier(day, bound_minutes)
    for topic in sorted(topics):
        _manifests(archive_root, topic, day, shown, frontier)


def _manifests(root: Path, topic: str, day: date, shown: str, frontier: int) -> dict[date, dict[str, Any]]:
    """The manifests of the day before (if archived), the day and the day after, checked."""
    found: dict[date, dict[str, Any]] = {}
    for offset in (-1, 0, 1):
        wanted = day + timedelta(days=offset)
        if not day_dir(root, topic, wanted).is_dir():
            if offset >= 0:
                raise ReprocessInputError(
                    f"day {day} cannot be reprocessed: topic {topic!r} has no archive for {wanted} (a day's run "
                    f"replays the records up to {shown}, so it needs the archive of the day and of the next): "
                    f"materialize archive/{topic} partition {wanted}")
            continue
        manifest = read_manifest(root, topic, wanted)
        if "raw_records" not in manifest:
            raise ReprocessInputError(
                f"day {day} cannot be reprocessed: the archive of topic {topic!r} for {wanted} was written before "
                f"the archive kept each record's bytes and headers: materialize archive/{topic} partition {wanted} "
                f"again")
        written = datetime.fromisoformat(manifest["written_at"])
        if offset >= 0 and written.timestamp() * 1000 < frontier:
            raise ReprocessInputError(
                f"day {day} cannot be reprocessed yet: the archive of topic {topic!r} for {wanted} was written at "
                f"{written.isoformat(timespec='seconds')}, before {shown} (the day's end plus the inputs' disorder "
                f"bound), so records of the day may be missing from it: materialize archive/{topic} partition "
                f"{wanted} again after {shown}")
        found[wanted] = manifest
    return found


def _archived(root: Path, topic: str, days: list[date], columns: list[str],
              partitions: list[int] | None = None) -> Iterator[Any]:
    """``columns`` of the records of ``days``' archives of ``topic`` (of ``partitions`` only, when given), one
    pyarrow table per data file. Each file is read by itself (the files Spark leaves beside them, ``_SUCCESS`` and
    ``.crc``, skipped as a dataset would): a Spark Python worker then needs no ``pyarrow.dataset``, which takes as
    long to import as its task takes to read the files."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    for archived in days:
        path = raw_dir(root, topic, archived)
        for file in sorted(path.iterdir()) if path.is_dir() else []:  # a day with no records has no directory
            if file.name.startswith(("_", ".")):
                continue
            table = pq.ParquetFile(file).read(columns=columns)
            if partitions is not None:
                column = table.column("partition")
                table = table.filter(pc.is_in(column, pa.array(partitions, column.type)))
            yield table


def _positions(root: Path, topic: str, days: list[date]) -> dict[int, list[_Position]]:
    """Where every record of ``days``' archives of ``topic`` is, per partition, in offset order."""
    by_partition: dict[int, list[_Position]] = defaultdict(list)
    for table in _archived(root, topic, days, ["partition", "offset", "timestamp"]):
        for partition, offset, micros in zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(),
                                             table.column("timestamp").cast("int64").to_pylist(), strict=True):
            by_partition[partition].append(_Position(offset, micros // 1000))
    for partition_positions in by_partition.values():
        partition_positions.sort()
    return by_partition


def _raw_records(root: Path, topic: str, days: list[date], partitions: list[int]) -> dict[int, list[BatchRecord]]:
    """Every record of ``partitions`` in ``days``' archives of ``topic``, per partition, in offset order."""
    by_partition: dict[int, list[BatchRecord]] = defaultdict(list)
    for table in _archived(root, topic, days, ["partition", "offset", "timestamp", "key", "value", "headers"],
                           partitions):
        micros = table.column("timestamp").cast("int64").to_pylist()
        for partition, offset, ts, key, value, headers in zip(
                table.column("partition").to_pylist(), table.column("offset").to_pylist(), micros,
                table.column("key").to_pylist(), table.column("value").to_pylist(),
                table.column("headers").to_pylist(), strict=True):
            by_partition[partition].append(BatchRecord(
                topic, partition, offset, ts // 1000, key, value,
                [(h["key"], h["value"]) for h in headers] if headers else None))
    for partition_records in by_partition.values():
        partition_records.sort(key=lambda r: r.offset)
    return by_partition


def _check_counts(topic: str, day: date, manifests: dict[date, dict[str, Any]],
                  by_partition: dict[int, list[_Position]], start_date: date | None) -> None:
    """Per partition, the records of the day's offset range found in the archives read must be as many as the
    archive of the day read from Kafka."""
    for key, report in sorted(manifests[day]["partitions"].items()):
        start, end, read = report["start"], report["end"], report["read"]
        found = sum(1 for r in by_partition.get(int(key), ()) if start <= r.offset < end)
        if found != read:
            before = day - timedelta(days=1)
            if before in manifests:
                hint = f"materialize archive/{topic} partitions {before} to {day + timedelta(days=1)} again"
            elif start_date is not None and before < start_date:
                hint = (f"the archive of {before} is missing and cannot be made (the archive starts on {start_date}): "
                        f"reprocess from {day + timedelta(days=1)} on, or move archive.start_date back")
            else:
                hint = f"the archive of {before} is missing (materialize archive/{topic} partition {before})"
            raise ReprocessInputError(
                f"day {day} cannot be reprocessed: topic {topic!r} partition {key}: the archive of {day} read "
                f"{read} records at offsets {start}-{end - 1}, the archives hold {found} of them: {hint}")
