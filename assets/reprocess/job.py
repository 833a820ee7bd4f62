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
2. **Each day's input**, on the driver: per input partition, which archived records the day replays, from where the
   previous day's run stopped to the day's frontier, chosen from their offsets and timestamps
   (:mod:`assets.reprocess.inputs`).
3. **The stages** (:attr:`streaming.batch.BatchPlan.stages`), once for all the days of the run, one Spark job
   each: every task of the sub-topology is one Spark partition, which reads the replayed records of its input
   partitions from the archive itself (no record goes through the driver) and what the upstream stages' tasks sent
   to its fed partitions, and runs :func:`streaming.batch.run_task` day after day: the first day from
   the state the previous run left — its stores from the batch's own snapshots, read on the executor — each next
   day from the state the day before handed on, in memory, as separate runs would read it back. Each day's store
   rows are written as that day's snapshot, on the executor. What a task sends (to a fed topic's reader, or out)
   it leaves in the run's directory under the reprocess root (``_state/runs/<run>/``, which executors share, as
   they share the snapshots; removed when the run ends) rather than in a Spark shuffle, which would pickle every
   record three more times. Scratch stores live on tmpfs when there is room (:func:`streaming.batch.scratch_dir`).
   The driver collects only the tasks' small summaries.
4. **Outputs**, one more Spark job: per topic partition, what the tasks wrote is merged per day
   (:func:`streaming.batch.merge_partition`), numbered on from the day before and written with pyarrow on the
   executor in the archive's layout; then each day is published to ``<reprocess root>/<app>/<topic>/date=<day>/`` —
   the outputs of the day's run (each record with its own timestamp: the run's last records may carry the next
   day's), decoded columns, ``_raw/`` and ``_undecodable/`` — atomically, as the archive publishes a day.
5. **State**, day by day: the stores' snapshot manifests, then the day's state file (:mod:`assets.reprocess.state`).
6. **Publish** (``reprocess.publish: true`` only): the day's outputs produced to Kafka
   (:mod:`assets.reprocess.publish`), once they and the state are on disk.

A task failing on a day (a failed record) stops its run there; the days before it are finished (steps 4 to 6) and
:class:`ReprocessRunError` names the day, so a backfill can go on from it.
"""

from __future__ import annotations

import gc
import logging
import pickle
import shutil
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, date, datetime, timedelta
from itertools import starmap
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from assets.app_topologies import app_settings, load_app_topology
from assets.archive.decode import (
    ERROR_COLUMN,
    HEADERS_TYPE,
    RAW_KEY_COLUMN,
    RAW_VALUE_COLUMN,
    RECORD_HEADERS_COLUMN,
    RECORD_KEY_COLUMN,
    RECORD_VALUE_COLUMN,
    decode_batch,
    decoded_schema,
)
from assets.archive.layout import RAW_DIR, UNDECODABLE_DIR
from assets.archive.writer import discard_staging, publish_day, recover_day, staging_dir
from assets.platform_spec import AppSpec, PlatformSpec, TopicSpec
from assets.reprocess.inputs import DayInput, ReprocessInputError, check_archived, day_input, replayed_records
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
    from pyspark.sql import SparkSession

__all__ = ["CheckedApp", "OutputContext", "PreparedDay", "ReprocessRunError", "ReprocessedDay", "StageContext", "check_app",
           "check_days", "day_range", "prepare_day", "prepare_following", "prepare_range", "reprocess_day",
           "reprocess_days", "run_day_on_spark", "run_days_on_spark", "run_stage_partition", "write_output_partition"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# What a stage's task leaves in the run's directory: records for a fed topic's reader, and records for the outputs'
# job (what it wrote, and the merged records of a fed topic the app also declares as an output).
FED, OUT = "fed", "out"
#: A dead-letter topic's records are kept as bytes (they are whatever could not be processed).
DEAD_LETTERS = TopicSpec(partitions=1, key="bytes", value="bytes")
#: The partition column of the run's days in the directory a topic's days are first written to (as the archive's).
DATE = "date"
#: Where the decoded records of every day of a run are written, partitioned by day, before each day is published.
RECORDS_DIR = "records"


@dataclass(frozen=True)
class StageContext:
    """What every Spark partition of one stage needs (shipped with the function): the state the run starts from
    (``previous_tasks``, ``fed_offsets``, ``previous_snapshots``), and per day of the run its snapshot id and which
    archived records it replays (``inputs``, read from the archive under ``archive_root``)."""

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
    inputs: tuple[DayInput, ...]
    archive_root: str
    chunk: int
    run_dir: str
    """Where the run's tasks leave what they send (see :func:`_run_stages`)."""


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
    """Wall seconds of the run, from reading the day's input to publishing it; for a range, the run's seconds
    shared among its days by their tasks' CPU seconds (they share their Spark jobs)."""
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
        check_targets(client_config, {t: counts[t] for t in plan.all_output_topics}, spec.reprocess.publish_suffix)
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
    assert spec.archive is not None and spec.reprocess is not None
    if [d.day for d in days] != day_range(first.day, days[-1].day):
        raise ValueError(f"the days of a run must follow each other: {[d.day.isoformat() for d in days]}")
    root = spec.reprocess.root()
    location = snapshots_location(root, app_name)
    ids = tuple(snapshot_id(d.day) for d in days)
    for day in days:
        forget_day_state(root, app_name, day.day)
        for store in first.stores:
            _clear_snapshot(location, plan.application_id, store, snapshot_id(day.day))

    run = uuid.uuid4().hex[:12]
    run_dir = root / app_name / "_state" / "runs" / run
    topics = {**{topic: spec.topics[topic] for topic in plan.all_output_topics},
              dead_letter_topic(plan.application_id): DEAD_LETTERS}
    together = {topic: root / app_name / topic / f".days-{run}" for topic in topics}
    context = StageContext(app_name, spec.apps[app_name], first.settings, plan.partition_counts, -1,
                           {task: state.to_json() for task, state in (previous.tasks if previous else {}).items()},
                           dict(previous.next_offsets) if previous else {}, first.previous_snapshots, location, ids,
                           tuple(d.replayed for d in days), str(spec.archive.root()), spec.reprocess.chunk,
                           str(run_dir))
    try:
        summaries = _run_stages(spark, plan, context)
        failed = min((s for s in summaries if "error" in s), key=lambda s: s["day"], default=None)
        finished = days if failed is None else days[:failed["day"]]
        written = _write_output_files(spark, run_dir, OutputContext(
            topics, dict(context.fed_offsets), tuple(d.day.isoformat() for d in finished),
            {topic: str(path) for topic, path in together.items()}, str(run_dir)))
        paths, counts = _publish_outputs(root / app_name, app_name, topics, together, finished, written)
    finally:
        for path in [run_dir, *together.values()]:
            shutil.rmtree(path, ignore_errors=True)

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
            published = publish_outputs(day.client_config, root / app_name, list(plan.all_output_topics), day.day,
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

def _run_stages(spark: SparkSession, plan: BatchPlan, context: StageContext) -> list[dict[str, Any]]:
    """Every stage once for all the days, in order, one Spark job each; returns the tasks' summaries (one per task and
    day). A stage's tasks read their replayed records from the archive and what the upstream stages' tasks sent to
    their fed partitions from the run's directory, where each task leaves what it sends (:func:`run_stage_partition`):
    no record goes through the driver, and the stages exchange records through files, not through Spark's shuffles,
    which would pickle each record three more times. A day that failed in a stage is not run by the later stages (nor
    are the days after it)."""
    sc = spark.sparkContext
    summaries: list[dict[str, Any]] = []
    days = len(context.snapshot_ids)
    for sub in plan.stages:
        tasks = len(plan.tasks[sub.id])
        stage = replace(context, subtopology=sub.id, snapshot_ids=context.snapshot_ids[:days],
                        inputs=context.inputs[:days])
        summaries.extend(sc.parallelize(range(tasks), tasks).mapPartitionsWithIndex(
            lambda partition, _, stage=stage: run_stage_partition(stage, partition)).collect())
        days = min([days, *(s["day"] for s in summaries if "error" in s)])
    return summaries


def _spill_path(run_dir: str, kind: str, tp: TopicPartition, task: str) -> Path:
    """Where task ``task`` of a run leaves what it sent to partition ``tp`` (``kind``: ``fed`` for a fed topic's
    reader, ``out`` for the outputs' job)."""
    return Path(run_dir) / kind / tp[0] / str(tp[1]) / f"{task}.pickle"


def _spill(run_dir: str, kind: str, task: str, rows: dict[TopicPartition, list[tuple[int, Any]]]) -> None:
    """Leave ``rows`` (per partition, ``(day index, record)``; one record class per partition) in the run's
    directory as their class, day indexes and field tuples: pickling the records themselves calls their
    ``__reduce__`` once each, and unpickling calls their class through pickle's machinery once each, which took
    three times as long as plain tuples both ways (0.6 s against 0.2 s per 105,000 records)."""
    for tp, sent in rows.items():
        if not sent:
            continue
        record_class = type(sent[0][1])
        values = attrgetter(*(f.name for f in fields(record_class)))
        path = _spill_path(run_dir, kind, tp, task)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as file:
            pickle.dump((record_class, [index for index, _ in sent], [values(record) for _, record in sent]), file,
                        protocol=pickle.HIGHEST_PROTOCOL)


def _spilled(run_dir: str, kind: str, tp: TopicPartition) -> Iterator[tuple[int, Any]]:
    """What every task of the run left for partition ``tp`` (``(day index, record)``)."""
    directory = _spill_path(run_dir, kind, tp, "-").parent
    for path in sorted(directory.glob("*.pickle")) if directory.is_dir() else []:
        with path.open("rb") as file:
            record_class, indexes, values = pickle.load(file)
        yield from zip(indexes, starmap(record_class, values), strict=True)


def run_stage_partition(context: StageContext, partition: int) -> Iterator[dict[str, Any]]:
    """One task of a stage, on an executor, for every day of the run in order: its replayed records read from the
    archive (:func:`assets.reprocess.inputs.replayed_records`), its fed partitions' records from the upstream tasks'
    files; what it sends is left in the run's directory (see :func:`_run_stages`), and it yields one summary per day.
    A day that fails ends the task with a summary naming the error (the driver finishes the days before it)."""
    with _task_collector():
        summaries = _run_stage_days(context, partition)
    yield from summaries


def _run_stage_days(context: StageContext, partition: int) -> list[dict[str, Any]]:
    """:func:`run_stage_partition`'s work; returns its summaries."""
    plan = _plan(context.app_name, context.app, context.partition_counts)
    spec = plan.tasks[context.subtopology][partition]
    days = len(context.snapshot_ids)
    replayed = replayed_records(Path(context.archive_root), list(context.inputs),
                                [tp for tp in spec.source_partitions if tp[0] not in plan.fed_topics])
    fed: list[dict[TopicPartition, list[BatchOutput]]] = [defaultdict(list) for _ in range(days)]
    for tp in spec.source_partitions:
        if tp[0] in plan.fed_topics:
            for index, output in _spilled(context.run_dir, FED, tp):
                if index < days:
                    fed[index][tp].append(output)
    next_offsets = dict(context.fed_offsets)
    raw_previous = context.previous_tasks.get(spec.id)
    previous = TaskState.from_json(raw_previous) if raw_previous else None
    own_stores = plan.subtopology(spec.subtopology).stores
    store_rows = {store: _snapshot_rows(context.location, manifest, partition)
                  for store, manifest in context.previous_snapshots.items() if store in own_stores}
    sent: dict[str, dict[TopicPartition, list[tuple[int, Any]]]] = {FED: defaultdict(list), OUT: defaultdict(list)}
    summaries = []
    for index, snapshot in enumerate(context.snapshot_ids):
        started = time.process_time()
        try:
            inputs = task_inputs(plan, spec, replayed[index], fed[index], next_offsets)
            with tempfile.TemporaryDirectory(prefix="brook-reprocess-", dir=scratch_dir()) as state_dir:
                result = run_task(plan, batch_config(context.settings, state_dir), spec, inputs, previous, store_rows,
                                  context.chunk)
            stats = {store: _write_snapshot_rows(context.location, plan.application_id, store, snapshot, partition,
                                                 rows) for store, rows in result.stores.items()}
        except Exception as exc:  # noqa: BLE001 -- the driver names it with its day, and finishes the days before
            summaries.append({"day": index, "task": spec.id, "error": f"{type(exc).__name__}: {exc}", "seconds": 0.0})
            break
        to_readers, written = route(plan, result.outputs)
        for kind, routed in ((FED, to_readers), (OUT, written)):
            for tp, outputs in routed.items():
                sent[kind][tp].extend((index, output) for output in outputs)
        for tp, records in inputs.items():
            if tp[0] in plan.fed_topics and tp[0] in plan.output_topics:  # written as its reader reads it
                sent[OUT][tp].extend((index, record) for record in records)
        summaries.append({"day": index, "task": spec.id, "state": result.state.to_json(), "stores": stats,
                          "fed_offsets": {tp: next_offsets[tp] for tp in spec.source_partitions
                                          if tp[0] in plan.fed_topics},
                          "dropped_records": result.dropped_records,
                          "late_records": result.late_records, "metrics": result.metrics,
                          "seconds": time.process_time() - started})
        previous = result.state
        store_rows = {store: [rows] for store, rows in result.stores.items()}
        gc.collect()  # the day's cycles (see _task_collector)
    for kind, rows_sent in sent.items():
        _spill(context.run_dir, kind, spec.id, rows_sent)
    return summaries


@contextmanager
def _task_collector() -> Iterator[None]:
    """The Python worker's cyclic garbage collector while a task runs.

    What the worker holds when the task starts (its imported modules, Dagster and pyarrow among them) is frozen out
    of the collector's passes: Spark's worker runs ``gc.collect()`` after every task, and the tasks' own allocations
    trigger full collections, each walking every object the imports made — measured at 40% of the workers' time in
    a 3-day run. What is frozen is still freed by reference counting.

    And no pass runs on its own during the task: a task's records, outputs and store rows live until its day ends,
    so the passes their allocations trigger walk them again and again for nothing — 14% of a stage-0 task's CPU (3.4 s against 2.9 s)
    (``bench/reprocess.py``). Garbage in cycles waits for the explicit passes instead (after each day of
    :func:`run_stage_partition`, and after the task), so it is bounded by what one day's task allocates. The
    collector is enabled again when the task ends (the worker may run other Spark jobs' tasks)."""
    gc.freeze()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


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

@dataclass(frozen=True)
class OutputContext:
    """What every Spark partition of the outputs' job needs: the topics' specs, the next batch offset of each
    partition before the run, the dates of the days to write, per topic the directory its days are first written
    to, and the run's directory (where the stages' tasks left what they wrote)."""

    topics: dict[str, TopicSpec]
    starts: dict[TopicPartition, int]
    dates: tuple[str, ...]
    together: dict[str, str]
    run_dir: str


def _write_output_files(spark: SparkSession, run_dir: Path, context: OutputContext) -> list[dict[str, Any]]:
    """The outputs' Spark job: per topic partition the stages' tasks wrote to, its records of every day merged,
    numbered and written with pyarrow on an executor (:func:`write_output_partition`) under ``context.together``.
    Returns what each partition wrote per day.

    One Spark partition per core, each given topic partitions of about the same total size (by the bytes the tasks
    left for them, the largest first to the least loaded): the partitions of a run's topics differ in size by orders
    of magnitude, so contiguous slices of them kept one core busy for seconds after the other had finished, and a
    Spark task per topic partition costs ~50 ms each on a core."""
    out = run_dir / OUT
    sizes = {(topic.name, int(partition.name)): sum(file.stat().st_size for file in partition.iterdir())
             for topic in (out.iterdir() if out.is_dir() else []) for partition in topic.iterdir()}
    if not sizes or not context.dates:
        return []
    sc = spark.sparkContext
    slices: list[list[TopicPartition]] = [[] for _ in range(min(len(sizes), max(1, sc.defaultParallelism)))]
    loads = [0] * len(slices)
    for tp in sorted(sizes, key=lambda tp: (-sizes[tp], tp)):
        least = loads.index(min(loads))
        slices[least].append(tp)
        loads[least] += sizes[tp]
    return sc.parallelize(slices, len(slices)).flatMap(
        lambda tps: [written for tp in tps for written in write_output_partition(context, tp)]).collect()


def _publish_outputs(root: Path, app_name: str, topics: dict[str, TopicSpec], together: dict[str, Path],
                     days: list[PreparedDay], written: list[dict[str, Any]]
                     ) -> tuple[list[dict[str, Path]], list[dict[str, dict[int, int]]]]:
    """Each of ``days``' outputs (``written`` under ``together`` by :func:`_write_output_files`) published under
    ``root`` atomically per topic and day, in the archive's layout; returns per day the paths and the records per
    topic and partition. A dead-letter topic's day is published only when the day has some."""
    counts: list[dict[str, dict[int, int]]] = [defaultdict(dict) for _ in days]
    undecodable: list[dict[str, int]] = [defaultdict(int) for _ in days]
    paths: list[dict[str, Path]] = [{} for _ in days]
    for summary in written:
        if summary["day"] < len(days):
            counts[summary["day"]][summary["topic"]][summary["partition"]] = summary["records"]
            undecodable[summary["day"]][summary["topic"]] += summary["undecodable"]
    for index, day in enumerate(days):
        for topic, topic_spec in sorted(topics.items()):
            if topic_spec is DEAD_LETTERS and not counts[index].get(topic):
                continue
            paths[index][topic] = _publish_output_day(root, together[topic], app_name, topic, topic_spec, day,
                                                      sum(counts[index].get(topic, {}).values()),
                                                      undecodable[index][topic])
    return paths, [{topic: dict(counts[index].get(topic, {})) for topic in paths[index]} for index in range(len(days))]


def write_output_partition(context: OutputContext, tp: TopicPartition) -> Iterator[dict[str, Any]]:
    """One topic partition's records of every day of the run, on an executor: each day's outputs merged
    (:func:`streaming.batch.merge_partition`) and numbered after the days before it (the records of a fed topic
    come merged and numbered already), written with pyarrow under the topic's directory, partitioned by day, in the
    columns the archive writes (:func:`assets.archive.materialize.write_records`); yields per day what it wrote."""
    with _task_collector():
        yield from _write_output_days(context, tp)


def _write_output_days(context: OutputContext, tp: TopicPartition) -> Iterator[dict[str, Any]]:
    """:func:`write_output_partition`'s work."""
    topic, partition = tp
    by_day: dict[int, list[Any]] = defaultdict(list)
    for index, item in _spilled(context.run_dir, OUT, tp):
        if index < len(context.dates):
            by_day[index].append(item)
    offset = context.starts.get((topic, partition), 0)
    for index in sorted(by_day):
        items = by_day[index]
        if isinstance(items[0], BatchOutput):
            records = merge_partition(items, offset)
            offset += len(records)
        else:
            records = sorted(items, key=lambda record: record.offset)
        directory = Path(context.together[topic])
        undecodable = _write_day_files(records, context.topics[topic], directory, f"{DATE}={context.dates[index]}",
                                       f"part-{partition:05d}.parquet")
        yield {"day": index, "topic": topic, "partition": partition, "records": len(records),
               "undecodable": undecodable}


#: The columns of a record as the archive's ``_raw/`` and the decoder take it (the ``brook-kafka`` source's).
_KAFKA_ROW = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                        ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")),
                        ("headers", HEADERS_TYPE)])


def _write_day_files(records: list[BatchRecord], topic: TopicSpec, directory: Path, day_part: str, name: str) -> int:
    """``records`` (one partition's, one day's) decoded and written as ``<directory>/records/<day_part>/<name>``,
    ``_undecodable/...`` (when some cannot be decoded) and ``_raw/...``; returns how many could not be decoded."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    batch = pa.RecordBatch.from_arrays([
        pa.array([r.key for r in records], pa.binary()), pa.array([r.value for r in records], pa.binary()),
        pa.array([r.topic for r in records], pa.string()), pa.array([r.partition for r in records], pa.int32()),
        pa.array([r.offset for r in records], pa.int64()),
        pa.array([r.timestamp * 1000 for r in records], pa.timestamp("us", tz="UTC")),
        pa.array([[{"key": k, "value": v} for k, v in r.headers] if r.headers else None for r in records],
                 HEADERS_TYPE)], schema=_KAFKA_ROW)
    decoded = pa.Table.from_batches([decode_batch(batch, topic, decoded_schema(topic))])
    failed = pc.is_valid(decoded.column(ERROR_COLUMN))
    files = {RECORDS_DIR: decoded.filter(pc.invert(failed)).select(list(topic.columns())),
             RAW_DIR: pa.table({"partition": decoded.column("partition"), "offset": decoded.column("offset"),
                                "timestamp": decoded.column("timestamp"), "key": decoded.column(RECORD_KEY_COLUMN),
                                "value": decoded.column(RECORD_VALUE_COLUMN),
                                "headers": decoded.column(RECORD_HEADERS_COLUMN)})}
    bad = decoded.filter(failed)
    if bad.num_rows:
        files[UNDECODABLE_DIR] = pa.table({
            "topic": bad.column("topic"), "partition": bad.column("partition"), "offset": bad.column("offset"),
            "timestamp": bad.column("timestamp"), "key": bad.column(RAW_KEY_COLUMN),
            "value": bad.column(RAW_VALUE_COLUMN), "error": bad.column(ERROR_COLUMN)})
    for kind, table in files.items():
        (directory / kind / day_part).mkdir(parents=True, exist_ok=True)
        pq.write_table(table, directory / kind / day_part / name, compression="zstd")
    return bad.num_rows


def _publish_output_day(root: Path, together: Path, app_name: str, topic: str, topic_spec: TopicSpec,
                        day: PreparedDay, total: int, undecodable: int) -> Path:
    """Move ``day``'s files of ``topic`` (``total`` records, ``undecodable`` of them not decoded) from ``together``
    into a staging directory and publish it as the day (a day with no decoded record gets an empty Parquet file of
    the topic's columns)."""
    import pyarrow.parquet as pq

    recover_day(root, topic, day.day)
    staging = staging_dir(root, topic, day.day)
    part = f"{DATE}={day.day.isoformat()}"
    try:
        if (together / RECORDS_DIR / part).is_dir():
            (together / RECORDS_DIR / part).rename(staging)
        else:
            staging.mkdir()
            schema = decoded_schema(topic_spec)
            pq.write_table(pa.schema([schema.field(name) for name in topic_spec.columns()]).empty_table(),
                           staging / "part-00000.parquet", compression="zstd")
        for kind in (RAW_DIR, UNDECODABLE_DIR):
            if (together / kind / part).is_dir():
                (together / kind / part).rename(staging / kind)
        return publish_day(staging, root, topic, day.day, {
            "topic": topic, "day": day.day.isoformat(), "app": app_name, "rows": total - undecodable,
            "undecodable": undecodable, "raw_records": total, "frontier": day.replayed.frontier,
            "written_at": datetime.now(UTC).isoformat(), "reprocessed": True})
    except BaseException:
        discard_staging(staging)
        raise
