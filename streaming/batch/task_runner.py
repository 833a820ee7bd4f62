"""One task of a batch run: the production :class:`StreamTask` over a finite, ordered list of records.

The task is the one workers and the test driver run — same deserialization, timestamp extraction, processors,
stores (RocksDB for persistent ones), record caches, error handlers and commit path
(:func:`streaming.runtime.checkpoint.commit`, with the test driver's in-memory collector) — so no operator exists
twice. What differs is only how records arrive and where state comes from:

- A single-partition task gets its records in offset order, ``chunk`` at a time; a task reading several
  partitions gets all of them buffered at once and picks among them with its :class:`PartitionGroup`, lowest
  timestamp first, never waiting for an empty partition (``max.task.idle.ms`` = -1: everything a day holds is
  already buffered; a partition whose records ran out has none left to wait for).
- It commits after every ``chunk`` records (so a processor's ``context.commit()`` is served at the end of its
  chunk), which is when record caches flush: a result that goes through a cache (a DSL aggregation with caching
  on) is emitted once per key per commit, as live, where commits follow ``commit.interval.ms`` of wall-clock time
  instead. ``chunk=1`` commits after every record, as the test driver does.
- Stream-time punctuators fire after each chunk (live: after each polled batch); wall-clock punctuators are
  refused when the processor schedules one (:class:`~streaming.errors.TopologyError` naming it): a replay has no
  wall clock to give them.
- State comes from the previous run of the same task (:class:`TaskState` and the rows of its stores) and is handed
  back at the end: every store (logged or not, persistent or in memory) with the task's stream time, partition
  times, node times and punctuation schedules, so consecutive runs behave as one uninterrupted run. The run's end
  is not a close: processors are closed to release what they hold, but what they forward while closing is dropped.
  Processors must keep what they need in stores (as they must to survive a restart live).
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from streaming.batch.plan import BatchPlan, TaskSpec
from streaming.batch.records import BatchOutput, BatchRecord, as_message
from streaming.config import StreamsConfig
from streaming.naming import dead_letter_topic, is_stream_time_topic, store_of_changelog
from streaming.runtime import checkpoint
from streaming.runtime.dead_letters import DeadLetterWriter
from streaming.runtime.error_handlers import configured_handlers
from streaming.runtime.memory_collector import MemoryRecordCollector
from streaming.runtime.task import StreamTask
from streaming.state.caching import cache_budget
from streaming.state.layered import TIMESTAMP

__all__ = ["BATCH_SETTINGS", "SCRATCH_ENV", "StoreRow", "TaskResult", "TaskState", "batch_config", "check_tasks",
           "run_task", "scratch_dir"]

#: A store's row as a snapshot holds it: key, value as its changelog holds it, and that record's timestamp.
StoreRow = tuple[bytes, bytes, int]
TopicPartition = tuple[str, int]

#: Settings a batch run overrides in the app's config (see the module doc; and ``external.sinks.enabled``, off unless
#: :func:`batch_config` is asked).
BATCH_SETTINGS: dict[str, Any] = {"max.task.idle.ms": -1}

#: The environment variable naming the directory of a batch task's scratch state (see :func:`scratch_dir`).
SCRATCH_ENV = "BROOK_BATCH_SCRATCH"
#: The free space ``/dev/shm`` needs to be chosen for scratch state by default.
TMPFS_MIN_FREE = 2 * 1024**3
TMPFS = "/dev/shm"

WALL_CLOCK_REFUSED = "batch reprocessing cannot fire (it replays archived input: there is no wall clock)"


def scratch_dir() -> str | None:
    """Where batch tasks keep their stores while they run: scratch, handed on as snapshot rows at the end of each
    run and never read by live workers, so it need not survive anything. ``$BROOK_BATCH_SCRATCH`` when set; else
    ``/dev/shm`` (tmpfs: the stores' RocksDB flushes and compactions write no disk there) when it
    exists with at least 2 GiB free; else None (the system's temporary directory)."""
    chosen = os.environ.get(SCRATCH_ENV)
    if chosen:
        return chosen
    if os.path.isdir(TMPFS) and os.access(TMPFS, os.W_OK) and shutil.disk_usage(TMPFS).free >= TMPFS_MIN_FREE:
        return TMPFS
    return None


def batch_config(settings: Mapping[str, Any], state_dir: str | None = None,
                 external_sinks: bool = False) -> StreamsConfig:
    """The app's Streams config as a batch run uses it: :data:`BATCH_SETTINGS`, no broker needed, and
    ``state.dir`` in ``state_dir`` (default: a new temporary directory under :func:`scratch_dir`). Nodes that write
    outside Kafka (a database sink) write nothing unless ``external_sinks``: reprocessing a day never touches the
    live database."""
    chosen = {**settings, **BATCH_SETTINGS, "external.sinks.enabled": external_sinks,
              "state.dir": state_dir or tempfile.mkdtemp(prefix="brook-batch-", dir=scratch_dir())}
    return StreamsConfig(chosen, require_bootstrap=False)


@dataclass
class TaskState:
    """What a task hands from one batch run to the next besides its stores' rows."""

    partition_times: dict[TopicPartition, int] = field(default_factory=dict)
    observed: dict[str, int] = field(default_factory=dict)
    punctuations: dict[str, list[int]] = field(default_factory=dict)
    next_offsets: dict[TopicPartition, int] = field(default_factory=dict)
    """Per input partition, the offset after the last record processed (where the next run's records start)."""

    def to_json(self) -> dict[str, Any]:
        return {"partition_times": [[t, p, v] for (t, p), v in sorted(self.partition_times.items())],
                "observed": dict(sorted(self.observed.items())),
                "punctuations": dict(sorted(self.punctuations.items())),
                "next_offsets": [[t, p, v] for (t, p), v in sorted(self.next_offsets.items())]}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> TaskState:
        return cls(partition_times={(t, int(p)): int(v) for t, p, v in raw["partition_times"]},
                   observed={k: int(v) for k, v in raw["observed"].items()},
                   punctuations={k: [int(t) for t in v] for k, v in raw["punctuations"].items()},
                   next_offsets={(t, int(p)): int(v) for t, p, v in raw["next_offsets"]})


@dataclass
class TaskResult:
    """What one task's run produced."""

    task: str
    outputs: list[BatchOutput]
    state: TaskState
    stores: dict[str, list[StoreRow]]
    records_in: int
    dropped_records: int
    late_records: int
    metrics: dict[str, Any]


def run_task(plan: BatchPlan, config: StreamsConfig, spec: TaskSpec, inputs: Mapping[TopicPartition, Sequence[BatchRecord]],
             previous: TaskState | None = None, stores: Mapping[str, Iterable[list[StoreRow]]] | None = None,
             chunk: int = 1000) -> TaskResult:
    """Run task ``spec`` over ``inputs`` (per input partition, its records in offset order) from the state a previous
    run left (``previous`` and the rows of each store, in batches), and return what it sent and the state it leaves.

    Raises:
        TopologyError: a processor schedules a wall-clock punctuator (naming it).
        StreamsError: a record failed and its error handler says ``fail`` (naming topic, partition and offset).
    """
    collector = MemoryRecordCollector(partition_counts=plan.partition_counts, discard=_state_topic(plan),
                                      existing_topics=plan.dynamic_output_topics)
    collector.keep_outputs = False
    errors = configured_handlers(config, DeadLetterWriter(
        plan.application_id, dead_letter_topic(plan.application_id), collector.send))
    task = StreamTask(plan.subtopology(spec.subtopology), spec.partition, plan.topology, config, collector,
                      lambda: 0, cache_budget=cache_budget(config["statestore.cache.max.bytes"]), errors=errors)
    task.wall_clock_refused = WALL_CLOCK_REFUSED
    collector.stream_time = lambda: task.stream_time
    outputs: list[BatchOutput] = []

    def commit() -> None:
        checkpoint.commit([task], collector)
        while collector.pending:
            topic, sent = collector.pending.popleft()
            outputs.append(BatchOutput(topic, sent.partition, sent.timestamp, sent.key, sent.value,
                                       sent.headers or None, task.id, len(outputs), sent.stream_time))

    try:
        task.open_stores()
        _load_stores(task, stores or {})
        if previous is not None:
            task.initialize_stream_time(previous.partition_times, {}, previous.observed)
        task.initialize_topology()
        if previous is not None:
            task.resume_stream_punctuations(previous.punctuations)
        records_in = _process(task, inputs, chunk, commit)
        commit()
        state = TaskState(partition_times=task.partition_times(), observed=task.observed_times(),
                          punctuations=task.stream_punctuation_times(),
                          next_offsets={**(previous.next_offsets if previous else {}), **task.consumed})
        rows = {name: _dump(store) for name, store in task.stores.items()}
        return TaskResult(task.id, outputs, state, rows, records_in, task.dropped_records, task.late_records,
                          errors.metrics())
    finally:
        task.close()  # what processors forward while closing is dropped with the collector: the run is not over


def _state_topic(plan: BatchPlan) -> Any:
    """Topics whose records a batch run drops: changelogs and stream-time topics (the stores and times themselves
    are handed to the next run). Asked for every record a task sends, about a handful of topics: each topic's answer
    is kept (the name parsing was ~4% of a stage-0 task's time under the profiler)."""
    app = plan.application_id

    @functools.cache
    def dropped(topic: str) -> bool:
        return store_of_changelog(app, topic) is not None or is_stream_time_topic(app, topic)

    return dropped


def _process(task: StreamTask, inputs: Mapping[TopicPartition, Sequence[BatchRecord]], chunk: int,
             commit: Any) -> int:
    """Hand the records to the task as the module doc says; returns how many."""
    total = 0
    if task.group is None:
        (tp,) = task.partitions
        records = inputs.get(tp, ())
        for start in range(0, len(records), chunk):
            task.process_messages([as_message(r) for r in records[start:start + chunk]])
            commit()
        return len(records)
    for tp in task.partitions:
        records = inputs.get(tp, ())
        if records:
            task.add_messages([as_message(r) for r in records])
            total += len(records)
    while task.process_buffered(chunk):
        commit()
    return total


def _load_stores(task: StreamTask, rows: Mapping[str, Iterable[list[StoreRow]]]) -> None:
    for name, batches in rows.items():
        store = task.stores[name]
        for batch in batches:
            store.restore_batch(batch if store.timestamped else [(key, value) for key, value, _ in batch])


def _dump(store: Any) -> list[StoreRow]:
    """A store's rows as its changelog would restore it (its layers flushed by the last commit)."""
    entries = store.inner.range(None, None)
    if store.timestamped:
        unpack = TIMESTAMP.unpack_from
        return [(key, value[8:], unpack(value)[0]) for key, value in entries]
    return [(key, value, 0) for key, value in entries]


def check_tasks(plan: BatchPlan, settings: Mapping[str, Any]) -> None:
    """Build and initialize one task of every sub-topology with no input, as a run starts each task, so a topology a
    batch run cannot run (a wall-clock punctuator) is refused before any input is read or any state written.

    Raises:
        TopologyError: naming the processor.
    """
    with tempfile.TemporaryDirectory(prefix="brook-batch-check-", dir=scratch_dir()) as state_dir:
        config = batch_config(settings, state_dir)
        for sub in plan.stages:
            run_task(plan, config, plan.tasks[sub.id][0], {})
