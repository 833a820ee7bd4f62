"""One day of a batch run, in one process: which input records it covers, and every stage over them.

**The day's records.** Per input partition, a day's run takes the records from where the previous day's run
stopped up to, not including, the first record whose timestamp is at or past the day's *frontier* — the day's end
plus the largest disorder bound of the app's inputs (:func:`select_day`). Every record of the day is before that
point (each is at most the bound behind the records before it), and the records after the day's last one that
come before it advance stream time as they did live, so a late record meets the stream time it met live and is
dropped or kept as live. Stopping every partition of a task at the same frontier keeps the order its
:class:`PartitionGroup` picks records in (lowest timestamp first) the same as in one uninterrupted run: a record
held back is at or past the frontier, and everything processed is before it.

**The stages** (:func:`run_day`): the sub-topologies in :attr:`BatchPlan.stages` order, each task through
:func:`streaming.batch.task_runner.run_task`. What tasks send to a fed topic (a repartition topic) becomes the
input of the partition's reader, merged as :mod:`streaming.batch.merge` says and numbered with the batch's own
offsets, which go on from day to day; so are the outputs. The Spark job (``assets/reprocess``) runs the same
functions, one Spark partition per task; this module runs them in one process (tests, small days).
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from streaming.batch.merge import merge_partition
from streaming.batch.plan import BatchPlan, TaskSpec
from streaming.batch.records import BatchOutput, BatchRecord
from streaming.batch.task_runner import StoreRow, TaskResult, TaskState, batch_config, run_task, scratch_dir

__all__ = ["DayResult", "DayState", "route", "run_day", "select_day", "task_inputs"]

TopicPartition = tuple[str, int]


class Placed(Protocol):
    """What :func:`select_day` reads of a record: its offset and timestamp (a :class:`BatchRecord` has them)."""

    @property
    def offset(self) -> int: ...

    @property
    def timestamp(self) -> int: ...


R = TypeVar("R", bound=Placed)


def select_day(records: Mapping[TopicPartition, Sequence[R]], frontier: int, starts: Mapping[TopicPartition, int]
               ) -> tuple[dict[TopicPartition, list[R]], dict[TopicPartition, int]]:
    """Per partition, its records (in offset order) from offset ``starts[tp]`` (all, where ``starts`` has none) up to,
    not including, the first at or past ``frontier``; and where each partition stopped: that record's offset, or the
    offset after the last record when none is at or past the frontier (the partition ran out)."""
    selected: dict[TopicPartition, list[R]] = {}
    stops: dict[TopicPartition, int] = {}
    for tp, partition_records in records.items():
        start = starts.get(tp)
        day: list[R] = []
        stop = start if start is not None else None
        for record in partition_records:
            if start is not None and record.offset < start:
                continue
            if record.timestamp >= frontier:
                stop = record.offset
                break
            day.append(record)
            stop = record.offset + 1
        selected[tp] = day
        stops[tp] = stop if stop is not None else 0
    return selected, stops


@dataclass
class DayState:
    """What one day's run hands to the next: each task's :class:`TaskState` and store rows, and the next batch
    offset of every partition the app writes."""

    tasks: dict[str, TaskState] = field(default_factory=dict)
    stores: dict[str, dict[str, list[StoreRow]]] = field(default_factory=dict)
    next_offsets: dict[TopicPartition, int] = field(default_factory=dict)


@dataclass
class DayResult:
    """A day's outputs per topic (every partition, merged and numbered), its state, and counts per task."""

    outputs: dict[str, list[BatchRecord]]
    state: DayState
    records_in: int
    tasks: dict[str, TaskResult]


def task_inputs(plan: BatchPlan, spec: TaskSpec, inputs: Mapping[TopicPartition, Sequence[BatchRecord]],
                fed: Mapping[TopicPartition, Sequence[BatchOutput]], next_offsets: dict[TopicPartition, int]
                ) -> dict[TopicPartition, Sequence[BatchRecord]]:
    """A task's records per input partition: replayed ones from ``inputs``; for a fed topic, what the upstream tasks
    sent to it (``fed``), merged and numbered from ``next_offsets`` (which it advances)."""
    chosen: dict[TopicPartition, Sequence[BatchRecord]] = {}
    for tp in spec.source_partitions:
        if tp[0] in plan.fed_topics:
            start = next_offsets.get(tp, 0)
            chosen[tp] = merge_partition(fed.get(tp, ()), start)
            next_offsets[tp] = start + len(chosen[tp])
        else:
            chosen[tp] = inputs.get(tp, ())
    return chosen


def route(plan: BatchPlan, outputs: Sequence[BatchOutput]) -> tuple[dict[TopicPartition, list[BatchOutput]],
                                                                   dict[TopicPartition, list[BatchOutput]]]:
    """A task's outputs split into ``(fed, written)``: records for a fed topic's reader, and records for every other
    topic (the app's outputs and its dead-letter topic). A fed topic the app also declares as an output (an
    intermediate user topic) is written as its reader reads it (:func:`task_inputs`)."""
    fed: dict[TopicPartition, list[BatchOutput]] = defaultdict(list)
    written: dict[TopicPartition, list[BatchOutput]] = defaultdict(list)
    for output in outputs:
        (fed if output.topic in plan.fed_topics else written)[(output.topic, output.partition)].append(output)
    return fed, written


def run_day(plan: BatchPlan, settings: Mapping[str, Any], inputs: Mapping[TopicPartition, Sequence[BatchRecord]],
            previous: DayState | None = None, chunk: int = 1000) -> DayResult:
    """Every task of ``plan`` over one day's ``inputs`` (per input partition, in offset order: :func:`select_day`),
    from the state the previous day's run left; ``settings``: the app's Streams config."""
    previous = previous or DayState()
    state = DayState(next_offsets=dict(previous.next_offsets))
    fed: dict[TopicPartition, list[BatchOutput]] = defaultdict(list)
    written: dict[TopicPartition, list[BatchOutput]] = defaultdict(list)
    outputs: dict[str, list[BatchRecord]] = defaultdict(list)
    results: dict[str, TaskResult] = {}
    with tempfile.TemporaryDirectory(prefix="brook-batch-", dir=scratch_dir()) as state_dir:
        config = batch_config(settings, state_dir)
        for sub in plan.stages:
            for spec in plan.tasks[sub.id]:
                records = task_inputs(plan, spec, inputs, fed, state.next_offsets)
                for (topic, _), merged in sorted(records.items()):
                    if topic in plan.fed_topics and topic in plan.output_topics:
                        outputs[topic].extend(merged)
                stores = {name: [rows] for name, rows in previous.stores.get(spec.id, {}).items()}
                result = results[spec.id] = run_task(plan, config, spec, records, previous.tasks.get(spec.id), stores,
                                                     chunk)
                state.tasks[spec.id], state.stores[spec.id] = result.state, result.stores
                task_fed, task_written = route(plan, result.outputs)
                for tp, sent in task_fed.items():
                    fed[tp].extend(sent)
                for tp, sent in task_written.items():
                    written[tp].extend(sent)
    for tp in sorted(written):
        start = state.next_offsets.get(tp, 0)
        merged = merge_partition(written[tp], start)
        state.next_offsets[tp] = start + len(merged)
        outputs[tp[0]].extend(merged)
    return DayResult(dict(outputs), state, sum(r.records_in for r in results.values()), results)
