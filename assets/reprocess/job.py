"""Days of an app reprocessed on Spark: its topology over the archived input, one Spark partition per task.

:func:`reprocess_day` is the whole job, for one app and one day: :func:`prepare_day` (steps 1 and 2, no Spark: a day
refused never starts a SparkSession) then :func:`run_day_on_spark`. :func:`reprocess_days` runs a range of days in
order in one Spark session, checking the whole range first (:func:`check_days`), then reading each day's input
(:func:`prepare_range`) and running all the days in one set of Spark stages (:func:`run_days_on_spark`); the
``reprocessed/<app>`` asset does the same for the days of its run (one, or a backfill's range). In order:

1. **Refusals first**, before anything is read or written, each one line: a topology batch cannot run
   (:class:`streaming.batch.BatchPlanError`, a wall-clock punctuator naming its processor), a day before this one
   reprocessed but not the day just before, or none before a day that is not the archive's first
   (:class:`~assets.reprocess.state.ReprocessStateError`), a day's input
   the archive cannot give (:class:`~assets.reprocess.inputs.ReprocessInputError`: no archive, archived too early),
   and with ``publish: true`` a missing target topic (:class:`~assets.reprocess.publish.PublishError`).
2. **Each day's input**, on the driver: per input partition, the archived records from where the previous day's
   run stopped to the day's frontier (:mod:`assets.reprocess.inputs`).
3. **The stages** (:attr:`streaming.batch.BatchPlan.stages`), once for all the days of the run: every task of the
   sub-topology is one Spark partition (``partitionBy`` the task's partition number), which gets the replayed
   records of its input partitions and what the upstream stages' tasks sent to its fed partitions, each tagged
   with its day, and runs :func:`streaming.batch.run_task` day after day: the first day from the state the previous
   run left — its stores from the batch's own snapshots, read on the executor — each next day from the state the
   day before handed on, in memory, as separate runs would read it back. Each day's store rows are written as that
   day's snapshot, on the executor. Their scratch stores live on tmpfs when there is room
   (:func:`streaming.batch.scratch_dir`). The driver collects only the tasks' small summaries, once.
4. **Outputs**: what the tasks wrote to each topic is merged per partition and day
   (:func:`streaming.batch.merge_partition`) and written in the archive's layout to
   ``<reprocess root>/<app>/<topic>/date=<day>/`` — the outputs of each day's run (each record with its own
   timestamp: the run's last records may carry the next day's), decoded columns, ``_raw/`` and ``_undecodable/`` —
   each topic's days written together, then published atomically day by day as the archive publishes a day.
5. **State**, day by day: the stores' snapshot manifests, then the day's state file (:mod:`assets.reprocess.state`).
6. **Publish** (``reprocess.publish: true`` only): the day's outputs produced to Kafka
   (:mod:`assets.reprocess.publish`), once they and the state are on disk.

A task failing on a day (a failed record) stops its run there; the days before it are finished (steps 4 to 6) and
:class:`ReprocessRunError` names the day, so a backfill can go on from it.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from assets.app_topologies import app_settings, load_app_topology
from assets.archive.decode import (
    ERROR_COLUMN,
    RAW_KEY_COLUMN,
    RAW_VALUE_COLUMN,
    RECORD_HEADERS_COLUMN,
    RECORD_KEY_COLUMN,
    RECORD_VALUE_COLUMN,
    decode_batch,
    decoded_schema,
)
from assets.archive.layout import RAW_DIR, UNDECODABLE_DIR
from assets.archive.materialize import READ_SCHEMA
from assets.archive.schema import arrow_schema
from assets.archive.writer import discard_staging, publish_day, recover_day, staging_dir
from assets.platform_spec import AppSpec, PlatformSpec, TopicSpec
from assets.reprocess.inputs import DayInput, ReprocessInputError, check_archived, day_input
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
from streaming.batch.task_runner import StoreRow, batch_config, check_tasks, run_task, scratch_dir
from streaming.naming import changelog_topic, dead_letter_topic
from streaming.state import snapshots
from streaming.state.snapshots import PartitionSnapshot, SnapshotManifest
from streaming.state.store_identity import StoreIdentity

if TYPE_CHECKING:
    from pyspark import RDD
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["CheckedApp", "PreparedDay", "ReprocessRunError", "ReprocessedDay", "StageContext", "check_app",
           "check_days", "day_range", "prepare_day", "prepare_following", "prepare_range", "reprocess_day",
           "reprocess_days", "run_day_on_spark", "run_days_on_spark", "run_stage_partition"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# What a stage's Spark partition yields, tagged: records for a fed topic's reader, records written out, the
# merged records of a fed topic the app also declares as an output, and the task's summary.
FED, WRITTEN, MERGED, SUMMARY = "fed", "written", "merged", "summary"
#: A dead-letter topic's records are kept as bytes (they are whatever could not be processed).
DEAD_LETTERS = TopicSpec(partitions=1, key="bytes", value="bytes")
#: The column of an output row naming the day whose run wrote it (the partition column of the days' writes).
DATE = "date"
#: Where the decoded records of every day of a run are written, partitioned by day, before each day is published.
RECORDS_DIR = "records"


@dataclass(frozen=True)
class StageContext:
    """What every Spark partition of one stage needs (shipped with the function): the state the run starts from
    (``previous_tasks``, ``fed_offsets``, ``previous_snapshots``), and one snapshot id per day of the run."""

    app_name: str
    app: AppSpec
    settings: dict[str, Any]
    partition_counts: dict[str, int]
    subtopology: int
    previous_tasks: dict[str, dict[str, Any]]
    fed_offsets: dict[TopicPartition, int]
    previous_snapshots: dict[str, SnapshotManifest]
    location: str
    snapshot_ids: tuple[str, ...]
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
    task_seconds: float = 0.0
    """The CPU seconds the day's tasks took to run it (summed over tasks; Spark's own cost is not in it)."""


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


def prepare_following(prepared: PreparedDay, day: date, checked: CheckedApp) -> PreparedDay:
    """The day after ``prepared`` (``day``) in a range run with it: its input goes on from where ``prepared``'s stops,
    and its state comes from ``prepared``'s run in the same Spark stages (so ``previous`` is None, and nothing is read
    from disk but the archive).

    Raises:
        ValueError: ``day`` is not the day after ``prepared``'s.
        ReprocessInputError: the archive cannot give the day's input.
    """
    if day != prepared.day + timedelta(days=1):
        raise ValueError(f"day {day} does not follow {prepared.day}")
    spec, plan = prepared.spec, prepared.plan
    assert spec.archive is not None
    replayed = day_input(spec.archive.root(), {t: plan.partition_counts[t] for t in plan.input_topics}, day,
                         checked.bound_minutes, prepared.replayed.stops, spec.archive.start_date)
    return replace(prepared, day=day, previous=None, replayed=replayed, previous_snapshots={},
                   started=time.monotonic())


def prepare_range(spec: PlatformSpec, app_name: str, days: list[date], checked: CheckedApp,
                  client_config: dict[str, Any] | None = None) -> tuple[list[PreparedDay], ReprocessInputError | None]:
    """:func:`prepare_day` for the first of ``days`` (consecutive), :func:`prepare_following` for the others; a day
    whose input the archive cannot give stops there: returns the days prepared before it, and its refusal.

    Raises:
        ReprocessStateError, ReprocessInputError: the first day cannot start (:func:`prepare_day`).
    """
    prepared = [prepare_day(spec, app_name, days[0], client_config, checked)]
    for day in days[1:]:
        try:
            prepared.append(prepare_following(prepared[-1], day, checked))
        except ReprocessInputError as exc:
            return prepared, exc
    return prepared, None


def reprocess_days(spec: PlatformSpec, app_name: str, first_day: date, last_day: date, spark: SparkSession,
                   client_config: dict[str, Any] | None = None) -> list[ReprocessedDay]:
    """Reprocess the days ``first_day`` to ``last_day`` (both included) of app ``app_name`` in order, in one Spark
    session (a backfill): day D goes on from the state of D - 1; all days run in one set of Spark stages
    (:func:`run_days_on_spark`).

    :func:`check_days` refuses what it can for the whole range before the first day runs. A day failing later
    (records missing from an archive, a failed record) stops the range there: the days before it stay
    reprocessed, and the backfill can go on from the failed day.

    Raises:
        ValueError, BatchPlanError, TopologyError, PublishError, ReprocessStateError, ReprocessInputError: as
            :func:`check_days` and :func:`prepare_day`.
        ReprocessRunError: a task failed on a day (its days before are reprocessed).
    """
    checked = check_days(spec, app_name, first_day, last_day, client_config)
    prepared, refused = prepare_range(spec, app_name, day_range(first_day, last_day), checked, client_config)
    done = run_days_on_spark(spark, prepared)
    for day in done:
        log.info("reprocessed %s %s: %d records in, %d out, %.1f s", app_name, day.day, day.records_in,
                 sum(day.records_out.values()), day.seconds)
    if refused is not None:
        raise refused
    return done


class ReprocessRunError(RuntimeError):
    """A task of a day's run failed (the message names the day, the task and the error); the days before it in the
    same run are reprocessed."""


def run_day_on_spark(spark: SparkSession, prepared: PreparedDay) -> ReprocessedDay:
    """Steps 3 to 6 of the module doc for one day (:func:`run_days_on_spark` with one day)."""
    return run_days_on_spark(spark, [prepared])[0]


def run_days_on_spark(spark: SparkSession, days: list[PreparedDay]) -> list[ReprocessedDay]:
    """Steps 3 to 6 of the module doc for consecutive days (the first from :func:`prepare_day`, each other from
    :func:`prepare_following`), in one set of Spark stages: each task runs every day in order, handing its state from
    day to day in memory and writing each day's store snapshot; then each day's outputs, snapshot manifests, state
    and publishing, day after day, exactly as separate runs would leave them.

    A day's ``seconds`` is the run's wall time shared among its days by their tasks' processing time.

    Raises:
        ReprocessRunError: a task failed on a day: the days before it are finished first.
    """
    first = days[0]
    spec, app_name, plan, previous = first.spec, first.app_name, first.plan, first.previous
    assert spec.reprocess is not None
    if [d.day for d in days] != day_range(first.day, days[-1].day):
        raise ValueError(f"the days of a run must follow each other: {[d.day.isoformat() for d in days]}")
    root = spec.reprocess.root()
    location = snapshots_location(root, app_name)
    ids = tuple(snapshot_id(d.day) for d in days)
    for day in days:
        forget_day_state(root, app_name, day.day)
        for store in first.stores:
            _clear_snapshot(location, plan.application_id, store, snapshot_id(day.day))

    context = StageContext(app_name, spec.apps[app_name], first.settings, plan.partition_counts, -1,
                           {task: state.to_json() for task, state in (previous.tasks if previous else {}).items()},
                           dict(previous.next_offsets) if previous else {}, first.previous_snapshots, location, ids,
                           spec.reprocess.chunk)
    summaries, written, merged = _run_stages(spark, plan, context, [d.replayed for d in days])
    failed = min((s for s in summaries if "error" in s), key=lambda s: s["day"], default=None)
    finished = days if failed is None else days[:failed["day"]]
    outputs = _merge_outputs(written, context.fed_offsets).union(merged)
    paths, counts = _write_outputs(spark, spec, plan, app_name, finished, outputs)

    next_offsets = dict(context.fed_offsets)
    task_seconds = [sum(s["seconds"] for s in summaries if s["day"] == index) for index in range(len(days))]
    elapsed = time.monotonic() - first.started
    done = []
    for index, day in enumerate(finished):
        today = [s for s in summaries if s["day"] == index]
        for summary in today:
            next_offsets.update(summary["fed_offsets"])
        records_out = {}
        for topic, partitions in counts[index].items():
            records_out[topic] = sum(partitions.values())
            if topic not in plan.fed_topics:
                for partition, count in partitions.items():
                    next_offsets[(topic, partition)] = next_offsets.get((topic, partition), 0) + count
        before = previous.snapshot_id if index == 0 and previous else (ids[index - 1] if index else None)
        store_keys = _publish_snapshots(location, plan, first.stores, ids[index], today, before)
        tasks = {summary["task"]: TaskState.from_json(summary["state"]) for summary in today}
        write_day_state(root, app_name, DayRecord(day.day, day.replayed.frontier, day.replayed.stops,
                                                  dict(next_offsets), tasks, ids[index], first.stores))
        published = {}
        if spec.reprocess.publish:
            assert day.client_config is not None  # check_app refuses publish without it
            published = publish_outputs(day.client_config, root / app_name, list(plan.output_topics), day.day,
                                        spec.reprocess.publish_suffix)
        started_from = (f"the state of {day.day - timedelta(days=1)}" if index or previous
                        else "empty state (first day)")
        done.append(ReprocessedDay(
            app=app_name, day=day.day, records_in=day.replayed.count, records_out=records_out,
            frontier=day.replayed.frontier, stops=day.replayed.stops, started_from=started_from, tasks=len(today),
            store_keys=store_keys, dropped_records=sum(s["dropped_records"] for s in today),
            late_records=sum(s["late_records"] for s in today),
            stale_days=[d for d in day_states(root, app_name) if d > days[-1].day], paths=paths[index],
            seconds=elapsed * task_seconds[index] / max(sum(task_seconds), 1e-9), days_read=day.replayed.days_read,
            published=published, task_seconds=task_seconds[index]))
    if failed is not None:
        day = days[failed["day"]].day
        kept = f" ({len(finished)} day(s) before it are reprocessed: go on from {day})" if finished else ""
        raise ReprocessRunError(f"day {day} of app {app_name!r} failed in task {failed['task']}: {failed['error']}"
                                f"{kept}")
    return done


# -- the stages -------------------------------------------------------------------------------------------------

def _run_stages(spark: SparkSession, plan: BatchPlan, context: StageContext, replayed: list[DayInput]
                ) -> tuple[list[dict[str, Any]], RDD, RDD]:
    """Every stage once for all the days, in order; returns the tasks' summaries (one per task and day, tagged with
    the day's index) and what they wrote and the merged records of fed topics that are outputs (both as
    ``(day index, record)``). Nothing is collected but the summaries, at the end."""
    sc = spark.sparkContext
    external = sc.parallelize([(tp[1], (index, "in", record)) for index, day in enumerate(replayed)
                               for tp, records in sorted(day.records.items()) for record in records],
                              max(1, min(sc.defaultParallelism, 64)))
    fed: RDD = sc.emptyRDD()
    stages = []
    for sub in plan.stages:
        sources = set(sub.source_topics)
        stage_input = external.filter(lambda row, sources=sources: row[1][2].topic in sources).union(
            fed.filter(lambda row, sources=sources: row[0] in sources)
               .map(lambda row: (row[1][1].partition, (row[1][0], "fed", row[1][1]))))
        results = (stage_input.partitionBy(len(plan.tasks[sub.id]), lambda partition: partition)
                   .mapPartitionsWithIndex(partial(run_stage_partition, replace(context, subtopology=sub.id)),
                                           preservesPartitioning=False)
                   .persist())
        stages.append(results)
        fed = fed.union(results.filter(lambda row: row[0] == FED).map(lambda row: (row[1][1].topic, row[1])))
    everything = sc.union(stages)
    summaries = everything.filter(lambda row: row[0] == SUMMARY).map(lambda row: row[1]).collect()
    written = everything.filter(lambda row: row[0] == WRITTEN).map(lambda row: row[1])
    merged = everything.filter(lambda row: row[0] == MERGED).map(lambda row: row[1])
    return summaries, written, merged


def run_stage_partition(context: StageContext, partition: int, rows: Iterable[tuple[int, tuple[int, str, Any]]]
                        ) -> Iterator[tuple[str, Any]]:
    """One task of a stage, on an executor, for every day of the run in order: its records in (tagged with their
    day's index), and per day what it sent and its summary out (tagged rows). A day that fails ends the task with a
    summary naming the error (the driver finishes the days before it)."""
    plan = _plan(context.app_name, context.app, context.partition_counts)
    spec = plan.tasks[context.subtopology][partition]
    days = len(context.snapshot_ids)
    replayed: list[dict[TopicPartition, list[BatchRecord]]] = [defaultdict(list) for _ in range(days)]
    fed: list[dict[TopicPartition, list[BatchOutput]]] = [defaultdict(list) for _ in range(days)]
    for _, (index, kind, item) in rows:
        (replayed if kind == "in" else fed)[index][(item.topic, item.partition)].append(item)
    next_offsets = dict(context.fed_offsets)
    raw_previous = context.previous_tasks.get(spec.id)
    previous = TaskState.from_json(raw_previous) if raw_previous else None
    own_stores = plan.subtopology(spec.subtopology).stores
    store_rows = {store: _snapshot_rows(context.location, manifest, partition)
                  for store, manifest in context.previous_snapshots.items() if store in own_stores}
    for index, snapshot in enumerate(context.snapshot_ids):
        started = time.process_time()
        try:
            for records in replayed[index].values():
                records.sort(key=lambda record: record.offset)
            inputs = task_inputs(plan, spec, replayed[index], fed[index], next_offsets)
            with tempfile.TemporaryDirectory(prefix="brook-reprocess-", dir=scratch_dir()) as state_dir:
                result = run_task(plan, batch_config(context.settings, state_dir), spec, inputs, previous, store_rows,
                                  context.chunk)
            stats = {store: _write_snapshot_rows(context.location, plan.application_id, store, snapshot, partition,
                                                 rows) for store, rows in result.stores.items()}
        except Exception as exc:  # noqa: BLE001 -- the driver names it with its day, and finishes the days before
            yield SUMMARY, {"day": index, "task": spec.id, "error": f"{type(exc).__name__}: {exc}", "seconds": 0.0}
            return
        to_readers, written = route(plan, result.outputs)
        for outputs in to_readers.values():
            yield from ((FED, (index, output)) for output in outputs)
        for outputs in written.values():
            yield from ((WRITTEN, (index, output)) for output in outputs)
        for (topic, _), records in inputs.items():
            if topic in plan.fed_topics and topic in plan.output_topics:
                yield from ((MERGED, (index, record)) for record in records)
        yield SUMMARY, {"day": index, "task": spec.id, "state": result.state.to_json(), "stores": stats,
                        "fed_offsets": {tp: next_offsets[tp] for tp in spec.source_partitions
                                        if tp[0] in plan.fed_topics},
                        "dropped_records": result.dropped_records, "late_records": result.late_records,
                        "metrics": result.metrics, "seconds": time.process_time() - started}
        previous = result.state
        store_rows = {store: [rows] for store, rows in result.stores.items()}


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
                       summaries: list[dict[str, Any]], previous: str | None) -> dict[str, int]:
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
            previous=previous,
            identity=StoreIdentity(plan.application_id, store, topic, count, generation=BATCH_GENERATION))
        (_store_dir(location, plan.application_id, store) / snapshots.DATA_DIR / snapshot).mkdir(parents=True,
                                                                                                exist_ok=True)
        snapshots.make_durable(location, plan.application_id, store, snapshot)
        snapshots.write_manifest(location, manifest)
        keys[store] = manifest.keys
    return keys


# -- the outputs --------------------------------------------------------------------------------------------------

def _merge_outputs(written: RDD, next_offsets: dict[TopicPartition, int]) -> RDD:
    """What the tasks wrote (``(day index, output)``), merged per partition day by day and numbered on from the
    previous run's ``next_offsets``: ``(day index, record)``."""
    starts = dict(next_offsets)
    return (written.map(lambda row: ((row[1].topic, row[1].partition), row)).groupByKey()
            .flatMap(partial(_merge_days, starts)))


def _merge_days(starts: dict[TopicPartition, int], group: tuple[TopicPartition, Iterable[tuple[int, BatchOutput]]]
                ) -> Iterator[tuple[int, BatchRecord]]:
    """One partition's outputs of every day, each day merged (:func:`streaming.batch.merge_partition`) and numbered
    after the days before it."""
    tp, rows = group
    by_day: dict[int, list[BatchOutput]] = defaultdict(list)
    for index, output in rows:
        by_day[index].append(output)
    offset = starts.get(tp, 0)
    for index in sorted(by_day):
        merged = merge_partition(by_day[index], offset)
        offset += len(merged)
        yield from ((index, record) for record in merged)


def _as_row(dates: tuple[str, ...], row: tuple[int, BatchRecord]) -> tuple[Any, ...]:
    """A record as a row of the archive's Kafka read schema, with the date of the day whose run wrote it."""
    index, record = row
    return (record.key, record.value, record.topic, record.partition, record.offset,
            datetime.fromtimestamp(record.timestamp / 1000, tz=UTC),
            [(k, v) for k, v in record.headers] if record.headers else None, dates[index])


def _decode_with_date(batches: Iterable[pa.RecordBatch], topic: TopicSpec) -> Iterator[pa.RecordBatch]:
    """:func:`assets.archive.decode.decode_batches` keeping each row's ``date`` (the day whose run wrote it)."""
    schema = decoded_schema(topic)
    for batch in batches:
        yield decode_batch(batch, topic, schema).append_column(DATE, batch.column(DATE))


def _write_outputs(spark: SparkSession, spec: PlatformSpec, plan: BatchPlan, app_name: str, days: list[PreparedDay],
                   outputs: RDD) -> tuple[list[dict[str, Path]], list[dict[str, dict[int, int]]]]:
    """Each output topic's records of each of ``days`` (of ``outputs``: ``(day index, record)``; those of later days
    are left out), in the archive's layout, published atomically per topic and day; returns per day the paths and
    the records per topic and partition. One Spark job counts the records, then each topic is written in three
    (:func:`_write_topic`), however many days."""
    from pyspark import StorageLevel

    assert spec.reprocess is not None
    root = spec.reprocess.root() / app_name
    dates = tuple(d.day.isoformat() for d in days)
    # The stages' results come in many small partitions (one per task of every stage): a write job per topic over
    # each of them costs more than the records do, so they are gathered into as many partitions as Spark has cores.
    parallelism = max(1, spark.sparkContext.defaultParallelism)
    count = len(days)
    rows = (spark.createDataFrame(outputs.filter(lambda row: row[0] < count).coalesce(parallelism)
                                  .map(partial(_as_row, dates)), f"{READ_SCHEMA}, {DATE} string")
            .persist(StorageLevel.MEMORY_AND_DISK))
    counts: list[dict[str, dict[int, int]]] = [defaultdict(dict) for _ in days]
    paths: list[dict[str, Path]] = [{} for _ in days]
    try:
        for topic, day, partition, records in rows.groupBy("topic", DATE, "partition").count().collect():
            counts[dates.index(day)][topic][partition] = records
        dead_letters = dead_letter_topic(plan.application_id)
        topics = {topic: spec.topics[topic] for topic in plan.output_topics}
        topics[dead_letters] = DEAD_LETTERS
        for topic, topic_spec in sorted(topics.items()):
            # a dead-letter topic's day is written only when the day has some
            written = [index for index in range(count) if topic != dead_letters or counts[index].get(topic)]
            for index, path in _write_topic(rows, root, app_name, topic, topic_spec, days, written, counts).items():
                paths[index][topic] = path
    finally:
        rows.unpersist()
    return paths, [{topic: dict(counts[index].get(topic, {})) for topic in paths[index]} for index in range(count)]


def _write_topic(rows: DataFrame, root: Path, app_name: str, topic: str, topic_spec: TopicSpec,
                 days: list[PreparedDay], written: list[int], counts: list[dict[str, dict[int, int]]]
                 ) -> dict[int, Path]:
    """One topic's records of the days ``written`` (indexes into ``days``), each day published under ``root`` as the
    archive lays out a day (:func:`assets.archive.materialize.write_records`): the decoded records, ``_undecodable/``
    and ``_raw/``, each written once for all the days (partitioned by day), then moved into each day's staging
    directory and published."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    if not written:
        return {}
    schema = decoded_schema(topic_spec)
    decoded = (rows.where(F.col("topic") == topic)
               .mapInArrow(partial(_decode_with_date, topic=topic_spec),
                           from_arrow_schema(schema.append(pa.field(DATE, pa.string()))))
               .persist(StorageLevel.MEMORY_AND_DISK))
    together = root / topic / f".days-{uuid.uuid4().hex[:12]}"
    paths = {}
    try:
        _write_days(decoded, topic_spec, together)
        for index in written:
            day = days[index]
            recover_day(root, topic, day.day)
            staging = staging_dir(root, topic, day.day)
            try:
                undecodable = _gather_day(together, staging, day.day, topic_spec)
                total = sum(counts[index].get(topic, {}).values())
                paths[index] = publish_day(staging, root, topic, day.day, {
                    "topic": topic, "day": day.day.isoformat(), "app": app_name, "rows": total - undecodable,
                    "undecodable": undecodable, "raw_records": total, "frontier": day.replayed.frontier,
                    "written_at": datetime.now(UTC).isoformat(), "reprocessed": True})
            except BaseException:
                discard_staging(staging)
                raise
    finally:
        decoded.unpersist()
        shutil.rmtree(together, ignore_errors=True)
    return paths


def _write_days(decoded: DataFrame, spec: TopicSpec, together: Path) -> None:
    """The rows of ``decoded`` under ``together``, partitioned by ``date``: the decoded records in ``records/``, the
    undecodable ones in ``_undecodable/`` and all as Kafka held them in ``_raw/`` (the columns of
    :func:`assets.archive.materialize.write_records`)."""
    from pyspark.sql import functions as F

    def column(name: str) -> Any:
        return F.col("`" + name.replace("`", "``") + "`")

    (decoded.where(F.col(ERROR_COLUMN).isNull()).select(*[column(name) for name in spec.columns()], DATE)
     .write.partitionBy(DATE).parquet(str(together / RECORDS_DIR)))
    (decoded.where(F.col(ERROR_COLUMN).isNotNull())
     .select("topic", "partition", "offset", "timestamp", F.col(RAW_KEY_COLUMN).alias("key"),
             F.col(RAW_VALUE_COLUMN).alias("value"), F.col(ERROR_COLUMN).alias("error"), DATE)
     .write.partitionBy(DATE).parquet(str(together / UNDECODABLE_DIR)))
    (decoded.select("partition", "offset", "timestamp", F.col(RECORD_KEY_COLUMN).alias("key"),
                    F.col(RECORD_VALUE_COLUMN).alias("value"), F.col(RECORD_HEADERS_COLUMN).alias("headers"), DATE)
     .write.partitionBy(DATE).parquet(str(together / RAW_DIR)))


def _gather_day(together: Path, staging: Path, day: date, spec: TopicSpec) -> int:
    """Move ``day``'s part of what :func:`_write_days` wrote under ``together`` into ``staging``; returns its
    undecodable records. A day with no decoded record gets an empty Parquet file of the topic's columns."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    part = f"{DATE}={day.isoformat()}"
    records = together / RECORDS_DIR / part
    if records.is_dir():
        records.rename(staging)
    else:
        staging.mkdir()
        pq.write_table(arrow_schema(spec).empty_table(), staging / "part-00000.parquet")
    if (together / RAW_DIR / part).is_dir():
        (together / RAW_DIR / part).rename(staging / RAW_DIR)
    if not (together / UNDECODABLE_DIR / part).is_dir():
        return 0
    (together / UNDECODABLE_DIR / part).rename(staging / UNDECODABLE_DIR)
    return ds.dataset(staging / UNDECODABLE_DIR, format="parquet").count_rows()
