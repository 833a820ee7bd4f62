"""One day of an app reprocessed on Spark: its topology over the archived input, one Spark partition per task.

:func:`reprocess_day` is the whole job, for one app and one day: :func:`prepare_day` (steps 1 and 2, no Spark: a day
refused never starts a SparkSession) then :func:`run_day_on_spark`. :func:`reprocess_days` runs a range of days in
order in one Spark session, checking the whole range first (:func:`check_days`); the ``reprocessed/<app>`` asset
does the same for the days of its run (one, or a backfill's range). In order:

1. **Refusals first**, before anything is read or written, each one line: a topology batch cannot run
   (:class:`streaming.batch.BatchPlanError`, a wall-clock punctuator naming its processor), a day before this one
   reprocessed but not the day just before, or none before a day that is not the archive's first
   (:class:`~assets.reprocess.state.ReprocessStateError`), a day's input
   the archive cannot give (:class:`~assets.reprocess.inputs.ReprocessInputError`: no archive, archived too early),
   and with ``publish: true`` a missing target topic (:class:`~assets.reprocess.publish.PublishError`).
2. **The day's input**, on the driver: per input partition, the archived records from where the previous day's
   run stopped to the day's frontier (:mod:`assets.reprocess.inputs`).
3. **The stages** (:attr:`streaming.batch.BatchPlan.stages`), one Spark job each: every task of the sub-topology
   is one Spark partition (``partitionBy`` the task's partition number), which gets the replayed records of its
   input partitions and what the upstream stages' tasks sent to its fed partitions, and runs
   :func:`streaming.batch.run_task` from the state the previous day's run left — its stores from the batch's own
   snapshots, read on the executor — and writes its stores' new snapshot rows there.
4. **Outputs**: what the tasks wrote to each topic is merged per partition (:func:`streaming.batch.merge_partition`)
   and written in the archive's layout to ``<reprocess root>/<app>/<topic>/date=<day>/`` — the outputs of the
   day's run (each record with its own timestamp: the run's last records may carry the next day's), decoded
   columns, ``_raw/`` and ``_undecodable/`` — published atomically as the archive publishes a day.
5. **State**: the stores' snapshot manifests, then the day's state file (:mod:`assets.reprocess.state`).
6. **Publish** (``reprocess.publish: true`` only): the day's outputs produced to Kafka
   (:mod:`assets.reprocess.publish`), once they and the state are on disk.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assets.app_topologies import app_settings, load_app_topology
from assets.archive.decode import decode_batches, decoded_schema
from assets.archive.materialize import READ_SCHEMA, write_records
from assets.archive.writer import discard_staging, publish_day, recover_day, staging_dir
from assets.platform_spec import AppSpec, PlatformSpec, TopicSpec
from assets.reprocess.inputs import DayInput, check_archived, day_input
from assets.reprocess.publish import PublishError, check_targets, publish_outputs
from assets.reprocess.state import (
    BATCH_GENERATION,
    DayRecord,
    ReprocessStateError,
    day_states,
    forget_day_state,
    previous_state,
    snapshot_id,
    snapshots_location,
    write_day_state,
)
from streaming.batch import BatchOutput, BatchPlan, BatchRecord, TaskState, merge_partition, route, task_inputs
from streaming.batch.merge import task_order
from streaming.batch.task_runner import StoreRow, batch_config, check_tasks, run_task
from streaming.naming import changelog_topic, dead_letter_topic
from streaming.state import snapshots
from streaming.state.snapshots import PartitionSnapshot, SnapshotManifest
from streaming.state.store_identity import StoreIdentity

if TYPE_CHECKING:
    from pyspark import RDD
    from pyspark.sql import SparkSession

__all__ = ["CheckedApp", "PreparedDay", "ReprocessedDay", "StageContext", "check_app", "check_days", "day_range",
           "prepare_day", "reprocess_day", "reprocess_days", "run_day_on_spark", "run_stage_partition"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# What a stage's Spark partition yields, tagged: records for a fed topic's reader, records written out, the
# merged records of a fed topic the app also declares as an output, and the task's summary.
FED, WRITTEN, MERGED, SUMMARY = "fed", "written", "merged", "summary"
#: A dead-letter topic's records are kept as bytes (they are whatever could not be processed).
DEAD_LETTERS = TopicSpec(partitions=1, key="bytes", value="bytes")


@dataclass(frozen=True)
class StageContext:
    """What every Spark partition of one stage needs (shipped with the function)."""

    app_name: str
    app: AppSpec
    settings: dict[str, Any]
    partition_counts: dict[str, int]
    subtopology: int
    previous_tasks: dict[str, dict[str, Any]]
    fed_offsets: dict[TopicPartition, int]
    previous_snapshots: dict[str, SnapshotManifest]
    location: str
    snapshot_id: str
    chunk: int


@dataclass
class ReprocessedDay:
    """What a day's run did (the asset's metadata)."""

    app: str
    day: date
    records_in: int
    records_out: dict[str, int]
    frontier: int
    stops: dict[TopicPartition, int]
    started_from: str
    tasks: int
    store_keys: dict[str, int]
    dropped_records: int
    late_records: int
    stale_days: list[date]
    paths: dict[str, Path]
    seconds: float
    days_read: dict[str, list[str]] = field(default_factory=dict)
    published: dict[str, int] = field(default_factory=dict)
    """Records produced per target topic (``reprocess.publish: true``)."""


def _plan(app_name: str, app: AppSpec, partition_counts: dict[str, int]) -> BatchPlan:
    return BatchPlan(load_app_topology(app_name, app), app.application_id, partition_counts)


@dataclass
class PreparedDay:
    """A day ready to run: everything :func:`prepare_day` checked and read on the driver."""

    spec: PlatformSpec
    app_name: str
    day: date
    plan: BatchPlan
    settings: dict[str, Any]
    previous: DayRecord | None
    replayed: DayInput
    stores: list[str]
    previous_snapshots: dict[str, SnapshotManifest]
    started: float
    client_config: dict[str, Any] | None = None
    """librdkafka settings, to publish the outputs (``reprocess.publish: true``)."""


@dataclass(frozen=True)
class CheckedApp:
    """An app that can run in batch: its plan, Streams settings, and the largest disorder bound of its inputs."""

    plan: BatchPlan
    settings: dict[str, Any]
    bound_minutes: int


def check_app(spec: PlatformSpec, app_name: str, client_config: dict[str, Any] | None = None) -> CheckedApp:
    """Refuse an app batch cannot run (step 1 of the module doc, for every day alike): no archive or reprocess
    section, a topology batch refuses (a wall-clock punctuator, naming the processor), or, with ``publish: true``,
    no Kafka settings or missing target topics.

    Raises:
        ReprocessStateError, BatchPlanError, TopologyError, PublishError: see above.
    """
    if spec.archive is None or spec.reprocess is None:
        raise ReprocessStateError("the platform spec needs an archive and a reprocess section to reprocess")
    app = spec.apps[app_name]
    counts = {topic: spec.topics[topic].partitions for topic in {*app.inputs, *app.outputs}}
    settings = app_settings(app)
    plan = _plan(app_name, app, counts)
    check_tasks(plan, settings)
    if spec.reprocess.publish:
        if client_config is None:
            raise PublishError(f"reprocess.publish is true but no Kafka settings were given to publish the outputs of "
                               f"app {app_name!r}")
        check_targets(client_config, {t: counts[t] for t in plan.output_topics}, spec.reprocess.publish_suffix)
    bound = max(spec.topics[topic].disorder_bound_minutes(spec.archive) for topic in plan.input_topics)
    return CheckedApp(plan, settings, bound)


def prepare_day(spec: PlatformSpec, app_name: str, day: date, client_config: dict[str, Any] | None = None,
                checked: CheckedApp | None = None) -> PreparedDay:
    """Steps 1 and 2 of the module doc, with no Spark: the refusals (:func:`check_app`, unless ``checked`` says it
    was done), then the day's input.

    Raises:
        BatchPlanError, TopologyError, PublishError: the app cannot run in batch (:func:`check_app`).
        ReprocessStateError: the day before was not reprocessed, though an earlier day was, or its state is damaged.
        ReprocessInputError: the archive cannot give the day's input.
    """
    started = time.monotonic()
    checked = checked or check_app(spec, app_name, client_config)
    assert spec.archive is not None and spec.reprocess is not None
    plan = checked.plan
    previous = previous_state(spec.reprocess.root(), app_name, day)
    replayed = day_input(spec.archive.root(), {t: plan.partition_counts[t] for t in plan.input_topics}, day,
                         checked.bound_minutes, previous.stops if previous else None, spec.archive.start_date)
    if previous is None:
        _check_first_day(spec, app_name, day)
    stores = sorted({store for sub in plan.topology.subtopologies() for store in sub.stores})
    previous_snapshots = _previous_snapshots(snapshots_location(spec.reprocess.root(), app_name), plan, stores,
                                             previous)
    return PreparedDay(spec, app_name, day, plan, checked.settings, previous, replayed, stores, previous_snapshots,
                       started, client_config)


def _check_first_day(spec: PlatformSpec, app_name: str, day: date) -> None:
    """Refuse to start an app's reprocessing from empty state on any day but the archive's first: the state the
    records before ``day`` built (tables, windows, deduplication) would be missing, and the outputs would differ
    from the live app's.

    Raises:
        ReprocessStateError: naming the day to start from.
    """
    assert spec.archive is not None
    if day != spec.archive.start_date:
        raise ReprocessStateError(
            f"day {day} of app {app_name!r} cannot be reprocessed: no day before it was, and it cannot start from "
            f"empty state (its tables, windows and deduplication need every record before it): reprocess the days "
            f"from the archive's first day {spec.archive.start_date} to {day} in order (a backfill)")


def reprocess_day(spark: SparkSession, spec: PlatformSpec, app_name: str, day: date,
                  client_config: dict[str, Any] | None = None) -> ReprocessedDay:
    """Reprocess ``day`` of app ``app_name``: :func:`prepare_day`, then :func:`run_day_on_spark`. ``client_config``:
    librdkafka settings, needed only with ``reprocess.publish: true``."""
    return run_day_on_spark(spark, prepare_day(spec, app_name, day, client_config))


def check_days(spec: PlatformSpec, app_name: str, first_day: date, last_day: date,
               client_config: dict[str, Any] | None = None) -> CheckedApp:
    """Refuse, before any day of the range ``first_day`` to ``last_day`` (both included) runs and before Spark
    starts, what can be refused for the whole range, with the same one-line errors as a single day: the app
    (:func:`check_app`), a gap (a day before ``first_day`` was reprocessed but not the day just before it, or none
    was and ``first_day`` is not the archive's first), and every day's archives
    (:func:`assets.reprocess.inputs.check_archived`, for the day and the next).

    Raises:
        ValueError: ``last_day`` is before ``first_day``.
        BatchPlanError, TopologyError, PublishError, ReprocessStateError, ReprocessInputError: as :func:`prepare_day`.
    """
    if last_day < first_day:
        raise ValueError(f"the last day {last_day} is before the first day {first_day}")
    checked = check_app(spec, app_name, client_config)
    assert spec.archive is not None and spec.reprocess is not None
    for day in day_range(first_day, last_day):
        check_archived(spec.archive.root(), checked.plan.input_topics, day, checked.bound_minutes)
    if previous_state(spec.reprocess.root(), app_name, first_day) is None:
        _check_first_day(spec, app_name, first_day)
    return checked


def day_range(first_day: date, last_day: date) -> list[date]:
    """The days from ``first_day`` to ``last_day``, both included, in order."""
    return [first_day + timedelta(days=n) for n in range((last_day - first_day).days + 1)]


def reprocess_days(spec: PlatformSpec, app_name: str, first_day: date, last_day: date, spark: SparkSession,
                   client_config: dict[str, Any] | None = None) -> list[ReprocessedDay]:
    """Reprocess the days ``first_day`` to ``last_day`` (both included) of app ``app_name`` in order, in one Spark
    session (a backfill): day D runs after D - 1 and goes on from its state.

    :func:`check_days` refuses what it can for the whole range before the first day runs. A day failing later
    (records missing from an archive, a failed record) stops the range there: the days before it stay
    reprocessed, and the backfill can go on from the failed day.

    Raises:
        ValueError, BatchPlanError, TopologyError, PublishError, ReprocessStateError, ReprocessInputError: as
            :func:`check_days` and :func:`prepare_day`.
    """
    checked = check_days(spec, app_name, first_day, last_day, client_config)
    done = []
    for day in day_range(first_day, last_day):
        prepared = prepare_day(spec, app_name, day, client_config, checked)
        done.append(run_day_on_spark(spark, prepared))
        log.info("reprocessed %s %s: %d records in, %d out, %.1f s", app_name, day, done[-1].records_in,
                 sum(done[-1].records_out.values()), done[-1].seconds)
    return done


def run_day_on_spark(spark: SparkSession, prepared: PreparedDay) -> ReprocessedDay:
    """Steps 3 to 5 of the module doc."""
    spec, app_name, day, plan, previous, replayed = (prepared.spec, prepared.app_name, prepared.day, prepared.plan,
                                                      prepared.previous, prepared.replayed)
    assert spec.reprocess is not None
    root = spec.reprocess.root()
    location = snapshots_location(root, app_name)
    new_id = snapshot_id(day)
    forget_day_state(root, app_name, day)
    for store in prepared.stores:
        _clear_snapshot(location, plan.application_id, store, new_id)

    context = StageContext(app_name, spec.apps[app_name], prepared.settings, plan.partition_counts, -1,
                           {task: state.to_json() for task, state in (previous.tasks if previous else {}).items()},
                           dict(previous.next_offsets) if previous else {}, prepared.previous_snapshots, location, new_id,
                           spec.reprocess.chunk)
    summaries, written, merged = _run_stages(spark, plan, context, replayed)
    next_offsets = dict(context.fed_offsets)
    for summary in summaries:
        next_offsets.update(summary["fed_offsets"])
    outputs = _merge_outputs(written, next_offsets).union(merged)
    paths, records_out = _write_outputs(spark, spec, plan, app_name, day, outputs, replayed)
    store_keys = _publish_snapshots(location, plan, prepared.stores, new_id, summaries, previous)
    tasks = {summary["task"]: TaskState.from_json(summary["state"]) for summary in summaries}
    write_day_state(root, app_name, DayRecord(day, replayed.frontier, replayed.stops, next_offsets, tasks, new_id,
                                              prepared.stores))
    published = {}
    if spec.reprocess.publish:
        assert prepared.client_config is not None  # check_app refuses publish without it
        published = publish_outputs(prepared.client_config, root / app_name, list(plan.output_topics), day,
                                    spec.reprocess.publish_suffix)
    return ReprocessedDay(
        app=app_name, day=day, records_in=replayed.count, records_out=records_out, frontier=replayed.frontier,
        stops=replayed.stops, started_from=f"the state of {previous.day}" if previous else "empty state (first day)",
        tasks=len(summaries), store_keys=store_keys,
        dropped_records=sum(s["dropped_records"] for s in summaries),
        late_records=sum(s["late_records"] for s in summaries),
        stale_days=[d for d in day_states(root, app_name) if d > day], paths=paths,
        seconds=time.monotonic() - prepared.started, days_read=replayed.days_read, published=published)


# -- the stages -------------------------------------------------------------------------------------------------

def _run_stages(spark: SparkSession, plan: BatchPlan, context: StageContext, replayed: DayInput
                ) -> tuple[list[dict[str, Any]], RDD, RDD]:
    """Every stage, in order; returns the tasks' summaries, what they wrote (tagged rows) and the merged records of
    fed topics that are outputs."""
    sc = spark.sparkContext
    external = sc.parallelize([(tp[1], ("in", record)) for tp, records in sorted(replayed.records.items())
                                for record in records], max(1, min(sc.defaultParallelism, 64)))
    fed: RDD = sc.emptyRDD()
    written: RDD = sc.emptyRDD()
    merged: RDD = sc.emptyRDD()
    summaries: list[dict[str, Any]] = []
    for sub in plan.stages:
        sources = set(sub.source_topics)
        stage_input = external.filter(lambda row, sources=sources: row[1][1].topic in sources).union(
            fed.filter(lambda row, sources=sources: row[0] in sources)
               .map(lambda row: (row[1].partition, ("fed", row[1]))))
        stage_context = replace(context, subtopology=sub.id)
        results = (stage_input.partitionBy(len(plan.tasks[sub.id]), lambda partition: partition)
                   .mapPartitionsWithIndex(partial(run_stage_partition, stage_context), preservesPartitioning=False)
                   .persist())
        summaries.extend(row[1] for row in results.filter(lambda row: row[0] == SUMMARY).collect())
        fed = fed.union(results.filter(lambda row: row[0] == FED).map(lambda row: (row[1].topic, row[1])))
        written = written.union(results.filter(lambda row: row[0] == WRITTEN).map(lambda row: row[1]))
        merged = merged.union(results.filter(lambda row: row[0] == MERGED).map(lambda row: row[1]))
    return summaries, written, merged


def run_stage_partition(context: StageContext, partition: int, rows: Iterable[tuple[int, tuple[str, Any]]]
                        ) -> Iterator[tuple[str, Any]]:
    """One task of a stage, on an executor: its records in, what it sent and its summary out (tagged rows)."""
    plan = _plan(context.app_name, context.app, context.partition_counts)
    spec = plan.tasks[context.subtopology][partition]
    replayed: dict[TopicPartition, list[BatchRecord]] = defaultdict(list)
    fed: dict[TopicPartition, list[BatchOutput]] = defaultdict(list)
    for _, (kind, item) in rows:
        (replayed if kind == "in" else fed)[(item.topic, item.partition)].append(item)
    for records in replayed.values():
        records.sort(key=lambda record: record.offset)
    next_offsets = dict(context.fed_offsets)
    inputs = task_inputs(plan, spec, replayed, fed, next_offsets)
    previous = context.previous_tasks.get(spec.id)
    store_rows = {store: _snapshot_rows(context.location, manifest, partition)
                  for store, manifest in context.previous_snapshots.items()
                  if store in plan.subtopology(spec.subtopology).stores}
    with tempfile.TemporaryDirectory(prefix="brook-reprocess-") as state_dir:
        result = run_task(plan, batch_config(context.settings, state_dir), spec, inputs,
                          TaskState.from_json(previous) if previous else None, store_rows, context.chunk)
    stats = {store: _write_snapshot_rows(context.location, plan.application_id, store, context.snapshot_id,
                                         partition, rows) for store, rows in result.stores.items()}
    to_readers, written = route(plan, result.outputs)
    for outputs in to_readers.values():
        yield from ((FED, output) for output in outputs)
    for outputs in written.values():
        yield from ((WRITTEN, output) for output in outputs)
    for (topic, _), records in inputs.items():
        if topic in plan.fed_topics and topic in plan.output_topics:
            yield from ((MERGED, record) for record in records)
    yield SUMMARY, {"task": spec.id, "state": result.state.to_json(), "stores": stats,
                    "fed_offsets": {tp: next_offsets[tp] for tp in spec.source_partitions if tp[0] in plan.fed_topics},
                    "dropped_records": result.dropped_records, "late_records": result.late_records,
                    "metrics": result.metrics}


# -- the stores' snapshots ----------------------------------------------------------------------------------------

def _previous_snapshots(location: str, plan: BatchPlan, stores: list[str], previous: DayRecord | None
                        ) -> dict[str, SnapshotManifest]:
    if previous is None:
        return {}
    manifests = {}
    for store in stores:
        if store not in previous.stores:
            continue  # a store the topology did not have then starts empty
        try:
            manifest = snapshots.read_manifest(location, plan.application_id, store, previous.snapshot_id)
        except snapshots.SnapshotError as exc:
            raise ReprocessStateError(f"the state of {previous.day} cannot be read ({exc}): reprocess {previous.day} "
                                      f"again") from None
        if manifest.store_identity.generation != BATCH_GENERATION:
            raise ReprocessStateError(f"snapshot {previous.snapshot_id} of store {store!r} under {location} is not a "
                                      f"batch snapshot: reprocess {previous.day} again")
        damaged = snapshots.damaged_partitions(location, manifest)
        if damaged:
            raise ReprocessStateError(f"snapshot {previous.snapshot_id} of store {store!r} (the state of "
                                      f"{previous.day}) is damaged: {damaged}; reprocess {previous.day} again")
        manifests[store] = manifest
    return manifests


def _snapshot_rows(location: str, manifest: SnapshotManifest, partition: int) -> list[list[StoreRow]]:
    """A partition's rows of a batch snapshot, checked against its manifest's count and checksum."""
    batches = list(snapshots.read_partition(location, manifest, partition))
    expected = manifest.partitions.get(partition)
    rows = sum(len(batch) for batch in batches)
    checksum = sum(snapshots.row_checksum(key, value) for batch in batches for key, value, _ in batch)
    if expected is None and rows == 0:
        return batches
    if expected is None or rows != expected.keys or (expected.checksum is not None and checksum != expected.checksum):
        raise ReprocessStateError(f"snapshot {manifest.snapshot_id} of store {manifest.store!r} partition {partition}: "
                                  f"{rows} rows do not match its manifest; reprocess the day it was made for again")
    return batches


def _store_dir(location: str, application_id: str, store: str) -> Path:
    return Path(snapshots.store_uri(location, application_id, store))


def _clear_snapshot(location: str, application_id: str, store: str, snapshot: str) -> None:
    """Remove what an earlier run of the same day left of snapshot ``snapshot`` (its manifest first)."""
    import shutil

    directory = _store_dir(location, application_id, store)
    (directory / snapshots.MANIFEST_DIR / f"{snapshot}.json").unlink(missing_ok=True)
    shutil.rmtree(directory / snapshots.DATA_DIR / snapshot, ignore_errors=True)


def _write_snapshot_rows(location: str, application_id: str, store: str, snapshot: str, partition: int,
                         rows: list[StoreRow]) -> tuple[int, int]:
    """One task's rows of a store, as one Parquet file of the snapshot's partition; returns (rows, checksum)."""
    if not rows:
        return 0, 0
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory = _store_dir(location, application_id, store) / snapshots.DATA_DIR / snapshot / f"partition={partition}"
    directory.mkdir(parents=True, exist_ok=True)
    table = pa.table({"key": pa.array([k for k, _, _ in rows], pa.binary()),
                      "value": pa.array([v for _, v, _ in rows], pa.binary()),
                      "offset": pa.array([0] * len(rows), pa.int64()),
                      "timestamp": pa.array([t for _, _, t in rows], pa.int64())})
    pq.write_table(table, directory / "part-00000.parquet")
    return len(rows), sum(snapshots.row_checksum(k, v) for k, v, _ in rows)


def _publish_snapshots(location: str, plan: BatchPlan, stores: list[str], snapshot: str,
                       summaries: list[dict[str, Any]], previous: DayRecord | None) -> dict[str, int]:
    """Each store's manifest, after its rows are durable; returns the keys per store."""
    keys: dict[str, int] = {}
    for store in stores:
        partitions = {}
        for summary in summaries:
            rows, checksum = summary["stores"].get(store, (0, 0))
            if rows:  # covers no changelog offset: next_offset and records_read are 0
                partitions[task_order(summary["task"])[1]] = PartitionSnapshot(0, rows, 0, checksum)
        topic = changelog_topic(plan.application_id, store)
        count = max(len(plan.tasks[sub.id]) for sub in plan.topology.subtopologies() if store in sub.stores)
        manifest = SnapshotManifest(
            snapshot_id=snapshot, application_id=plan.application_id, store=store, changelog_topic=topic,
            created_at=snapshots.utc_now_iso(), partitions=partitions, records_read=0,
            keys=sum(p.keys for p in partitions.values()), duration_s=0.0,
            previous=previous.snapshot_id if previous else None,
            identity=StoreIdentity(plan.application_id, store, topic, count, generation=BATCH_GENERATION))
        (_store_dir(location, plan.application_id, store) / snapshots.DATA_DIR / snapshot).mkdir(parents=True,
                                                                                                exist_ok=True)
        snapshots.make_durable(location, plan.application_id, store, snapshot)
        snapshots.write_manifest(location, manifest)
        keys[store] = manifest.keys
    return keys


# -- the outputs --------------------------------------------------------------------------------------------------

def _merge_outputs(written: RDD, next_offsets: dict[TopicPartition, int]) -> RDD:
    """What the tasks wrote, merged per partition and numbered on from the previous day's run (``next_offsets``
    advances, on the driver, by the records of each partition)."""
    starts = dict(next_offsets)
    merged = (written.map(lambda output: ((output.topic, output.partition), output)).groupByKey()
              .flatMap(lambda group: merge_partition(group[1], starts.get(group[0], 0))).persist())
    for tp, count in merged.map(lambda record: (record.topic, record.partition)).countByValue().items():
        next_offsets[tp] = starts.get(tp, 0) + count
    return merged


def _as_row(record: BatchRecord) -> tuple[Any, ...]:
    """A record as a row of the archive's Kafka read schema."""
    return (record.key, record.value, record.topic, record.partition, record.offset,
            datetime.fromtimestamp(record.timestamp / 1000, tz=UTC),
            [(k, v) for k, v in record.headers] if record.headers else None)


def _write_outputs(spark: SparkSession, spec: PlatformSpec, plan: BatchPlan, app_name: str, day: date,
                   outputs: RDD, replayed: DayInput) -> tuple[dict[str, Path], dict[str, int]]:
    """Each output topic's records of the run, in the archive's layout, published atomically per topic."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    assert spec.reprocess is not None
    root = spec.reprocess.root() / app_name
    # The stages' results come in many small partitions (one per task of every stage): a write job per topic over
    # each of them costs more than the records do, so they are gathered into as many partitions as Spark has cores.
    parallelism = max(1, spark.sparkContext.defaultParallelism)
    rows = (spark.createDataFrame(outputs.coalesce(parallelism).map(_as_row), READ_SCHEMA)
            .persist(StorageLevel.MEMORY_AND_DISK))
    counts = dict(rows.groupBy("topic").count().collect())
    dead_letters = dead_letter_topic(plan.application_id)
    topics = {topic: spec.topics[topic] for topic in plan.output_topics}
    if counts.get(dead_letters):
        topics[dead_letters] = DEAD_LETTERS
    paths: dict[str, Path] = {}
    try:
        for topic, topic_spec in sorted(topics.items()):
            decoded = (rows.where(F.col("topic") == topic)
                       .mapInArrow(partial(decode_batches, topic=topic_spec), from_arrow_schema(decoded_schema(topic_spec)))
                       .persist(StorageLevel.MEMORY_AND_DISK))
            try:
                undecodable = decoded.where(F.col("_error").isNotNull()).count()
                recover_day(root, topic, day)
                staging = staging_dir(root, topic, day)
                try:
                    write_records(decoded, topic_spec, F.lit(True), staging, undecodable)
                    total = counts.get(topic, 0)
                    paths[topic] = publish_day(staging, root, topic, day, {
                        "topic": topic, "day": day.isoformat(), "app": app_name, "rows": total - undecodable,
                        "undecodable": undecodable, "raw_records": total, "frontier": replayed.frontier,
                        "written_at": datetime.now(UTC).isoformat(), "reprocessed": True})
                except BaseException:
                    discard_staging(staging)
                    raise
            finally:
                decoded.unpersist()
    finally:
        rows.unpersist()
    return paths, {topic: counts.get(topic, 0) for topic in topics}
