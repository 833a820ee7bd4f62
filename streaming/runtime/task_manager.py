"""TaskManager: which tasks exist on this thread, and what assignment, revocation and loss do to them."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from streaming.config import StreamsConfig
from streaming.runtime.changelog_reader import StoreChangelogReader
from streaming.runtime.record_collector import RecordCollector
from streaming.runtime.task import StreamTask, TopicPartition, task_id_of
from streaming.state.caching import CacheBudget
from streaming.topology.topology import Subtopology, Topology

log = logging.getLogger(__name__)


class TaskManager:
    """Creates a task per (sub-topology, partition) of the assignment and closes them on revoke/loss.

    Commit order (at-least-once): every task flushes its stores and reports its offsets, the producer
    is flushed (all outputs acknowledged, else :class:`ProductionError`), then the offsets are committed.
    """

    def __init__(self, topology: Topology, config: StreamsConfig, collector: RecordCollector,
                 clock: Callable[[], int], changelog_reader: StoreChangelogReader) -> None:
        self._topology = topology
        self._config = config
        self._collector = collector
        self._clock = clock
        self._reader = changelog_reader
        self._cache_budget = CacheBudget(config["statestore.cache.max.bytes"])
        self._subtopology_of: dict[str, Subtopology] = {
            topic: sub for sub in topology.subtopologies() for topic in sub.source_topics}
        self.tasks: dict[str, StreamTask] = {}
        self.task_of: dict[TopicPartition, StreamTask] = {}

    # -- assignment ------------------------------------------------------------------------------------
    def assign(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Create tasks for newly assigned partitions (a task gets every partition of its number).

        Tasks with logged stores start restoring; their input partitions are returned so the caller
        pauses them until :meth:`restore` reports the task ready.
        """
        restoring: list[TopicPartition] = []
        wanted: dict[tuple[int, int], list[TopicPartition]] = {}
        for topic, partition in partitions:
            if (topic, partition) in self.task_of:
                continue
            sub = self._subtopology_of[topic]
            wanted.setdefault((sub.id, partition), []).append((topic, partition))
        for (sub_id, partition), tps in sorted(wanted.items()):
            task_id = task_id_of(sub_id, partition)
            existing = self.tasks.pop(task_id, None)
            if existing is not None:  # a task gains a partition (cooperative assignment): rebuild it
                tps = sorted(set(tps) | set(existing.partitions))
                self._close(existing, clean=True)
            subtopology = self._subtopology_of[tps[0][0]]
            task = StreamTask(subtopology, partition, self._topology, self._config, self._collector, self._clock,
                              input_partitions=sorted(tps), cache_budget=self._cache_budget)
            self.tasks[task_id] = task
            for tp in tps:
                self.task_of[tp] = task
            if task.state.changelogs:
                self._reader.register(task, task.state.restore_offsets(), task.state.changelogs)
                restoring.extend(task.partitions)
                log.info("created task %s for partitions %s; restoring its stores", task_id, tps)
            else:
                task.initialize_topology()
                log.info("created task %s for partitions %s", task_id, tps)
        return restoring

    def restore(self, max_records: int, timeout: float) -> list[StreamTask]:
        """Continue restoring; initialize and return the tasks whose stores are complete."""
        ready = []
        for task in self._reader.restore(max_records, timeout):
            if self.tasks.get(task.id) is task:
                task.initialize_topology()
                ready.append(task)
        return ready

    @property
    def restoring(self) -> bool:
        return self._reader.active

    def revoke(self, partitions: list[TopicPartition], commit: Callable[[list[StreamTask]], None]) -> None:
        """Close cleanly every task that owns one of ``partitions``."""
        self._close_clean(self._owners(partitions), commit)

    def shutdown(self, commit: Callable[[list[StreamTask]], None]) -> None:
        """Close every task cleanly (the worker is stopping)."""
        self._close_clean(list(self.tasks.values()), commit)

    def _close_clean(self, tasks: list[StreamTask], commit: Callable[[list[StreamTask]], None]) -> None:
        """As Kafka Streams: suspend (close processors, which may still forward), commit, write the
        checkpoints of what local state covers, close stores."""
        for task in tasks:
            task.suspend()
        if tasks:
            commit(tasks)
        running = [task for task in tasks if task.initialized]
        logged = [tp for task in running for tp, store in task.state.changelogs.items() if store.persistent]
        if logged:
            ends = self._reader.end_offsets(logged)
            for task in running:
                task.state.write_checkpoint(ends)
        for task in tasks:
            self._close(task, clean=True)

    def lose(self, partitions: list[TopicPartition]) -> None:
        """Partitions are gone without a chance to commit (another member may own them): close dirty."""
        for task in self._owners(partitions):
            self._close(task, clean=False)

    def _owners(self, partitions: list[TopicPartition]) -> list[StreamTask]:
        owners: dict[str, StreamTask] = {}
        for tp in partitions:
            task = self.task_of.get(tp)
            if task is not None:
                owners[task.id] = task
        return list(owners.values())

    def _close(self, task: StreamTask, clean: bool) -> None:
        if not task.initialized:
            self._reader.unregister(task.id)
        self.tasks.pop(task.id, None)
        for tp in task.partitions:
            self.task_of.pop(tp, None)
        task.close()
        log.info("closed task %s (%s)", task.id, "clean" if clean else "dirty: uncommitted work dropped")

    def close_all(self, clean: bool) -> None:
        for task in list(self.tasks.values()):
            self._close(task, clean)

    # -- processing helpers -------------------------------------------------------------------------------
    def process_buffered(self, max_records: int) -> int:
        done = 0
        for task in self.tasks.values():
            if task.group is not None and task.initialized:
                done += task.process_buffered(max_records)
        return done

    def punctuate_wall_clock(self, now: int) -> None:
        for task in self.tasks.values():
            if task.initialized:
                task.maybe_punctuate_wall_clock(now)

    def commit_requested(self) -> bool:
        return any(task.commit_requested for task in self.tasks.values())

    def prepare_commit(self, tasks: list[StreamTask]) -> dict[str, dict[TopicPartition, int]]:
        return {task.id: task.prepare_commit() for task in tasks}

    def source_topics(self) -> list[str]:
        return list(self._subtopology_of)

    def offset_resets(self) -> dict[str, str]:
        """Source topics whose node asks for its own offset reset policy."""
        resets: dict[str, str] = {}
        for sub in self._topology.subtopologies():
            for node in sub.nodes:
                reset = getattr(node, "offset_reset", None)
                if reset:
                    resets.update({topic: reset for topic in node.topics})  # type: ignore[attr-defined]
        return resets


def as_pairs(partitions: list[Any]) -> list[TopicPartition]:
    """confluent-kafka TopicPartitions as ``(topic, partition)`` pairs."""
    return [(tp.topic, tp.partition) for tp in partitions]
