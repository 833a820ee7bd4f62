"""The Prometheus collector of one KafkaStreams instance.

At scrape time it asks the instance for an :class:`InstanceSample` (plain numbers the stream threads already
keep: counters, histograms filled once per batch or commit, lag computed once a second) and turns it into
``brook_*`` metric families. Nothing here runs per record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from streaming.metrics.histogram import HistogramSnapshot

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class RestoreSample:
    """One changelog partition being restored (or tailed by a standby)."""

    task: str
    store: str
    topic: str
    partition: int
    remaining: int  # changelog records between the restore position and the last known end
    standby: bool


@dataclass(frozen=True)
class TaskSample:
    """Counters of one running task (they start at 0 when the task is created on this thread)."""

    task: str
    dropped: int  # records DSL operators skipped on purpose (null keys or values, late records)
    late: int  # of those, records for windows already closed


@dataclass(frozen=True)
class BackpressureSample:
    """What one stream thread's throttling and backpressure did (docs/configuration.md, "Throttling and backpressure")."""

    buffered: int = 0  # input records buffered, not processed yet
    paused: int = 0  # input partitions paused now because their buffer is full
    pauses: int = 0  # partitions paused so far
    resumes: int = 0
    time_cap_hits: int = 0  # loop iterations that stopped processing at max.poll.processing.ms
    throttled_seconds: float = 0.0  # time the rate limit held the thread back
    queue_full: int = 0  # sends that waited for room in the producer's queue
    queue_full_seconds: float = 0.0
    sink_paused: int = 0  # input partitions paused now because their task's external sink cannot write
    sink_pauses: int = 0  # times tasks' input was paused so


@dataclass(frozen=True)
class IdleSample:
    """A source topic the idle watchdog watches (``processing.idle.timeout.ms``)."""

    topic: str
    idle: bool
    idle_seconds: float  # since the topic's last activity (a record arrived or was processed)


@dataclass(frozen=True)
class ThreadSample:
    """What one stream thread reports."""

    name: str
    processed: int
    rebalances: int
    commits: int
    commit_latency: HistogramSnapshot
    process_latency: HistogramSnapshot
    e2e_latency: HistogramSnapshot
    tasks: dict[str, int]  # active, restoring, standby
    lag: dict[TopicPartition, int]
    task_samples: list[TaskSample] = field(default_factory=list)
    record_errors: dict[tuple[str, str], int] = field(default_factory=dict)  # (stage, action) -> records
    restored: dict[tuple[str, str, int], int] = field(default_factory=dict)  # (store, topic, partition) -> records
    restores: list[RestoreSample] = field(default_factory=list)
    backpressure: BackpressureSample = field(default_factory=BackpressureSample)
    shed: dict[TopicPartition, int] = field(default_factory=dict)  # records shed beyond the rate limit
    idle: list[IdleSample] = field(default_factory=list)


@dataclass(frozen=True)
class InstanceSample:
    """What one KafkaStreams instance reports: its state (one of ``states``) and its stream threads."""

    application_id: str
    state: str
    states: tuple[str, ...]
    threads: list[ThreadSample]


class StreamsCollector(Collector):
    """Turns ``sample()`` into the ``brook_*`` families (docs/operations.md lists them)."""

    def __init__(self, sample: Callable[[], InstanceSample]) -> None:
        self._sample = sample

    def collect(self) -> Iterator[Metric]:
        sample = self._sample()
        app = sample.application_id
        yield from _instance_families(sample)
        yield from _thread_families(app, sample.threads)
        yield from _task_families(app, sample.threads)
        yield from _restore_families(app, sample.threads)
        yield from _backpressure_families(app, sample.threads)
        yield from _overflow_families(app, sample.threads)


def _instance_families(sample: InstanceSample) -> Iterator[Metric]:
    state = GaugeMetricFamily("brook_state", "1 for the instance's current state, 0 for the others",
                              labels=["application_id", "state"])
    for name in sample.states:
        state.add_metric([sample.application_id, name], 1 if name == sample.state else 0)
    yield state


def _thread_families(app: str, threads: list[ThreadSample]) -> Iterator[Metric]:
    labels = ["application_id", "thread"]
    processed = CounterMetricFamily("brook_records_processed", "Input records the stream thread processed", labels=labels)
    commits = CounterMetricFamily("brook_commits", "Commits (stores, producer, offsets, checkpoints)", labels=labels)
    rebalances = CounterMetricFamily("brook_rebalances", "Partition assignments, revocations and losses",
                                     labels=labels)
    histograms = {
        "commit_latency": HistogramMetricFamily("brook_commit_latency_seconds", "Duration of a commit",
                                                labels=labels),
        "process_latency": HistogramMetricFamily(
            "brook_process_batch_seconds", "Time to process one polled batch of records", labels=labels),
        "e2e_latency": HistogramMetricFamily(
            "brook_e2e_latency_seconds", "From a record's timestamp to the end of its processing (its outputs "
            "sent), sampled on the last record of each batch", labels=labels),
    }
    tasks = GaugeMetricFamily("brook_tasks", "Tasks on the stream thread, by kind (active, restoring, standby)",
                              labels=[*labels, "kind"])
    lag = GaugeMetricFamily("brook_consumer_lag", "Records of an input partition not processed yet (fetched high "
                            "watermark minus the next offset to process)", labels=[*labels, "topic", "partition"])
    errors = CounterMetricFamily("brook_record_errors", "Records the error handlers skipped or dead-lettered, by "
                                 "stage and action", labels=[*labels, "stage", "action"])
    for thread in threads:
        values = [app, thread.name]
        processed.add_metric(values, thread.processed)
        commits.add_metric(values, thread.commits)
        rebalances.add_metric(values, thread.rebalances)
        for attribute, family in histograms.items():
            snapshot: HistogramSnapshot = getattr(thread, attribute)
            family.add_metric(values, [(_bound(b), c) for b, c in snapshot.buckets], snapshot.total)
        for kind, count in thread.tasks.items():
            tasks.add_metric([*values, kind], count)
        for (topic, partition), records in sorted(thread.lag.items()):
            lag.add_metric([*values, topic, str(partition)], records)
        for (stage, action), records in sorted(thread.record_errors.items()):
            errors.add_metric([*values, stage, action], records)
    yield from (processed, commits, rebalances, *histograms.values(), tasks, lag, errors)


def _task_families(app: str, threads: list[ThreadSample]) -> Iterator[Metric]:
    labels = ["application_id", "thread", "task"]
    dropped = CounterMetricFamily("brook_dropped_records", "Records DSL operators skipped on purpose (null keys or "
                                  "values, late records), per running task", labels=labels)
    late = CounterMetricFamily("brook_late_records_dropped", "Records dropped for windows already closed (stream "
                               "time past the window end plus grace), per running task", labels=labels)
    for thread in threads:
        for task in thread.task_samples:
            dropped.add_metric([app, thread.name, task.task], task.dropped)
            late.add_metric([app, thread.name, task.task], task.late)
    yield from (dropped, late)


def _restore_families(app: str, threads: list[ThreadSample]) -> Iterator[Metric]:
    restored = CounterMetricFamily("brook_restored_records", "Changelog records applied to local stores (restores "
                                   "and standbys)", labels=["application_id", "thread", "store", "topic", "partition"])
    remaining = GaugeMetricFamily("brook_restore_remaining_records", "Changelog records still to restore, per store "
                                  "partition being restored or tailed",
                                  labels=["application_id", "thread", "task", "store", "topic", "partition", "standby"])
    for thread in threads:
        for (store, topic, partition), records in sorted(thread.restored.items()):
            restored.add_metric([app, thread.name, store, topic, str(partition)], records)
        for r in thread.restores:
            remaining.add_metric([app, thread.name, r.task, r.store, r.topic, str(r.partition),
                                  str(r.standby).lower()], r.remaining)
    yield from (restored, remaining)


def _backpressure_families(app: str, threads: list[ThreadSample]) -> Iterator[Metric]:
    labels = ["application_id", "thread"]
    families = {
        "buffered": GaugeMetricFamily("brook_buffered_records", "Input records polled and buffered, not processed "
                                      "yet", labels=labels),
        "paused": GaugeMetricFamily("brook_paused_partitions", "Input partitions paused because their buffer holds "
                                    "buffered.records.per.partition records", labels=labels),
        "pauses": CounterMetricFamily("brook_backpressure_pauses", "Input partitions paused because their buffer "
                                      "was full", labels=labels),
        "resumes": CounterMetricFamily("brook_backpressure_resumes", "Paused input partitions resumed once their "
                                       "buffer was half drained", labels=labels),
        "time_cap_hits": CounterMetricFamily("brook_processing_time_cap_hits", "Loop iterations that stopped "
                                             "processing at max.poll.processing.ms", labels=labels),
        "throttled_seconds": CounterMetricFamily("brook_throttled_seconds", "Time the rate limit "
                                                 "(processing.rate.limit.*) held the thread back", labels=labels),
        "queue_full": CounterMetricFamily("brook_producer_queue_full", "Sends that waited for room in the "
                                          "producer's queue (queue.buffering.max.*)", labels=labels),
        "queue_full_seconds": CounterMetricFamily("brook_producer_queue_full_seconds", "Time sends waited for room "
                                                  "in the producer's queue", labels=labels),
        "sink_paused": GaugeMetricFamily("brook_sink_paused_partitions", "Input partitions paused because their "
                                         "task's external sink (a database) cannot write", labels=labels),
        "sink_pauses": CounterMetricFamily("brook_sink_pauses", "Times an external sink that could not write "
                                           "paused input partitions", labels=labels),
    }
    for thread in threads:
        for attribute, family in families.items():
            family.add_metric([app, thread.name], getattr(thread.backpressure, attribute))
    yield from families.values()


def _overflow_families(app: str, threads: list[ThreadSample]) -> Iterator[Metric]:
    """Load shedding and the idle watchdog (docs/load-shedding.md)."""
    labels = ["application_id", "thread"]
    shed = CounterMetricFamily("brook_shed_records", "Input records shed beyond the rate limit "
                               "(processing.overflow.policy=shed)", labels=[*labels, "topic", "partition"])
    idle = GaugeMetricFamily("brook_source_idle", "1 while a source topic got no record for "
                             "processing.idle.timeout.ms, else 0", labels=[*labels, "topic"])
    idle_seconds = GaugeMetricFamily("brook_source_idle_seconds", "Time since a watched source topic last got or "
                                     "processed a record", labels=[*labels, "topic"])
    for thread in threads:
        for (topic, partition), records in sorted(thread.shed.items()):
            shed.add_metric([app, thread.name, topic, str(partition)], records)
        for sample in thread.idle:
            idle.add_metric([app, thread.name, sample.topic], 1 if sample.idle else 0)
            idle_seconds.add_metric([app, thread.name, sample.topic], sample.idle_seconds)
    yield from (shed, idle, idle_seconds)


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)
