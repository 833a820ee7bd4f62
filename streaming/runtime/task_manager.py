"""TaskManager: which tasks exist on this thread, and what assignment, revocation and loss do to them."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import KafkaException

from streaming.config import StreamsConfig
from streaming.metrics.histogram import Histogram
from streaming.runtime import checkpoint
from streaming.runtime.changelog_reader import StoreChangelogReader
from streaming.runtime.error_handlers import RecordErrorHandlers
from streaming.runtime.record_collector import RecordCollector
from streaming.runtime.state_directory import StateDirectory, remove_path
from streaming.runtime.stream_time import StreamTimeRecovery
from streaming.runtime.task import StreamTask, TopicPartition, task_id_of
from streaming.runtime.task_timeouts import is_transient
from streaming.state.caching import cache_budget
from streaming.topology.topology import Subtopology, Topology

log = logging.getLogger(__name__)


class TaskManager:
    """Creates a task per (sub-topology, partition) of the assignment, commits them, suspends them on revoke,
    and closes them on loss or when a rebalance gives them to someone else. Commits follow
    :mod:`streaming.runtime.checkpoint` (stores, producer, offsets, checkpoints).

    Revocation (Kafka Streams' ``handleRevocation``): the revoked tasks are committed and SUSPENDED — their
    processors closed, their stores open, their directories still held. The assignment that ends the
    rebalance (``handleAssignment``) resumes a suspended task it gives back, with no restore, and closes the
    others cleanly (checkpoint written). An eager rebalance (``range``, ``roundrobin``) revokes every task,
    so this is what keeps a task that stays on its instance from being closed and restored.
    """

    def __init__(self, topology: Topology, config: StreamsConfig, collector: RecordCollector,
                 clock: Callable[[], int], changelog_reader: StoreChangelogReader,
                 partition_counts: dict[str, int] | None = None, directory: StateDirectory | None = None,
                 hosts_standbys: bool = True, errors: RecordErrorHandlers | None = None,
                 stream_times: StreamTimeRecovery | None = None) -> None:
        self._topology = topology
        self._config = config
        self._collector = collector
        self._clock = clock
        self._reader = changelog_reader
        self._errors = errors
        self._stream_times = stream_times  # gives new tasks the stream time of their last commit
        self._directory = directory or StateDirectory()  # shared by the instance's stream threads
        self._cache_budget = cache_budget(config["statestore.cache.max.bytes"])
        self._subtopology_of: dict[str, Subtopology] = {
            topic: sub for sub in topology.subtopologies() for topic in sub.source_topics}
        self.tasks: dict[str, StreamTask] = {}
        self.task_of: dict[TopicPartition, StreamTask] = {}
        # Revoked, committed, processors closed, stores open, directory held: until the next assignment.
        self.suspended: dict[str, StreamTask] = {}
        self._suspended_ends: dict[str, dict[TopicPartition, int]] = {}  # their changelogs' ends when suspended
        self.standby: dict[str, StreamTask] = {}  # warm copies of other instances' tasks
        # Assigned, not opened yet: waiting for their stream time (read from the broker) or their directory (held by
        # a standby).
        self._waiting: dict[str, StreamTask] = {}
        # One thread of an instance keeps its standby copies, of the tasks no thread of it runs.
        self._standby_candidates = self._stateful_tasks(partition_counts or {}) \
            if config["num.standby.replicas"] > 0 and hosts_standbys else {}
        self._standby_version = -1  # the directory version standbys were last placed at
        self.commits = 0
        self.last_commit_ms = 0.0
        self.commit_latency = Histogram()

    def _stateful_tasks(self, counts: dict[str, int]) -> dict[str, tuple[Subtopology, int]]:
        """Every task with a persistent logged store: the candidates for standby replicas."""
        builders = self._topology.store_builders
        candidates = {}
        for sub in self._topology.subtopologies():
            stateful = [s for s in sub.stores if builders[s].logging_enabled and builders[s].persistent]
            sizes = [counts[t] for t in sub.source_topics if t in counts]
            if stateful and sizes:
                for partition in range(max(sizes)):
                    candidates[task_id_of(sub.id, partition)] = (sub, partition)
        return candidates

    # -- assignment ------------------------------------------------------------------------------------
    def assign(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Take the partitions an assignment adds: resume the suspended tasks it gives back with the same
        partitions (no restore), create tasks for the rest (a task gets every partition of its number), then
        close cleanly the suspended tasks it did not give back (the rebalance is over: they moved away).

        New tasks go on from the stream time of their last commit (:mod:`streaming.runtime.stream_time`).
        Returns the input partitions of the tasks that cannot process yet — restoring their stores, or
        waiting for their directory — so the caller pauses them until :meth:`restore` reports the task
        ready.
        """
        not_ready = self._assign(partitions)
        self.close_suspended()
        self._place_standbys()
        return not_ready

    def _assign(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        not_ready: list[TopicPartition] = []
        created: list[StreamTask] = []
        carried: dict[str, list[Any]] = {}  # per rebuilt task: the input its predecessor polled but did not process
        wanted: dict[tuple[int, int], list[TopicPartition]] = {}
        for topic, partition in partitions:
            if (topic, partition) in self.task_of:
                continue
            sub = self._subtopology_of[topic]
            wanted.setdefault((sub.id, partition), []).append((topic, partition))
        self._close_outdated_suspended({task_id_of(*key) for key in wanted})
        for (sub_id, partition), tps in sorted(wanted.items()):
            task_id = task_id_of(sub_id, partition)
            existing = self.tasks.get(task_id)
            if existing is not None:  # a task gains a partition (a cooperative assignment): rebuild it
                tps = sorted(set(tps) | set(existing.partitions))
                carried[task_id] = [*existing.pending, *existing.take_unprocessed()]  # polled, not processed
                self._close_clean([existing])  # committed and checkpointed: the rebuilt task restores no more
            suspended = self.suspended.get(task_id)
            if suspended is not None:
                if sorted(suspended.partitions) == sorted(tps):
                    self._resume(suspended)
                    continue
                self._close_suspended(suspended)  # back with other partitions: rebuilt from its checkpoint
            subtopology = self._subtopology_of[tps[0][0]]
            task = StreamTask(subtopology, partition, self._topology, self._config, self._collector, self._clock,
                              input_partitions=sorted(tps), cache_budget=self._cache_budget, errors=self._errors)
            self.tasks[task_id] = task
            for tp in tps:
                self.task_of[tp] = task
            created.append(task)
        if self._stream_times is not None:
            self._stream_times.start(created)
        for task in created:
            if not self._open(task):
                not_ready.extend(task.partitions)
                task.pending.extend(carried.pop(task.id, []))
            else:
                for run in carried.pop(task.id, []):
                    task.buffer(run)
        return not_ready

    def _close_outdated_suspended(self, task_ids: set[str]) -> None:
        """Close the suspended tasks among ``task_ids`` whose changelogs grew since they were suspended: another
        member owned them in between (the group went through generations this thread missed). Their checkpoint
        (the ends noted at suspension) lets the new task restore just what was written meanwhile."""
        noted = {task_id: self._suspended_ends[task_id] for task_id in task_ids & self.suspended.keys()}
        logged = [tp for ends in noted.values() for tp in ends]
        if not logged:
            return
        try:
            now = self._reader.end_offsets(logged)
        except KafkaException as exc:
            if not is_transient(exc):
                raise
            log.warning("cannot read the ends of the changelogs of suspended tasks %s (%s): closing them; each "
                        "restores what its changelogs gained since it was suspended", sorted(noted), exc)
            for task_id in noted:
                self._close_suspended(self.suspended[task_id])
            return
        for task_id, ends in noted.items():
            if any(now[tp] != end for tp, end in ends.items()):
                log.info("suspended task %s: its changelogs moved on since it was suspended (%s -> %s); it is "
                         "closed and restores what was written meanwhile", task_id, ends, now)
                self._close_suspended(self.suspended[task_id])

    def _resume(self, task: StreamTask) -> None:
        del self.suspended[task.id]
        del self._suspended_ends[task.id]
        task.resume()
        self.tasks[task.id] = task
        for tp in task.partitions:
            self.task_of[tp] = task
        log.info("resumed suspended task %s for partitions %s (nothing to restore)", task.id, task.partitions)

    def _open(self, task: StreamTask) -> bool:
        """Open the task's stores once its stream time is read and its directory is free, then start restoring
        them, or processing when there is nothing to restore. True if the task can process now."""
        if self._stream_times is not None and self._stream_times.waits_for(task):
            self._waiting[task.id] = task  # restore() looks again; under task.timeout.ms (StreamTimeRecovery.poll)
            return False
        self._close_standby(task.id)  # this thread's own copy: its checkpoint lets the task restore only the tail
        if not self._directory.lock_active(task.id, self):
            if task.id not in self._waiting:
                log.info("task %s waits for its state directory, held by a standby copy on another stream "
                         "thread of this instance", task.id)
            self._waiting[task.id] = task
            return False
        self._waiting.pop(task.id, None)
        task.open_stores()
        if task.state.changelogs:
            self._reader.register(task, task.state.restore_offsets(), task.state.changelogs)
            log.info("created task %s for partitions %s; restoring its stores", task.id, task.partitions)
            return False
        task.initialize_topology()
        log.info("created task %s for partitions %s", task.id, task.partitions)
        return True

    def _place_standbys(self) -> None:
        """Keep a standby copy of every stateful task no stream thread of this instance runs.

        librdkafka offers Python no custom assignor, so standby placement cannot be negotiated in the
        group: with ``num.standby.replicas`` >= 1 each instance tails the changelogs of all stateful
        tasks it does not run (N-1 copies with N instances; exact for two instances), on its first stream
        thread. A directory an active task holds or waits for never gets a standby.
        """
        self._standby_version = self._directory.version
        for task_id, (sub, partition) in self._standby_candidates.items():
            if task_id in self.tasks or task_id in self.standby or not self._directory.lock_standby(task_id, self):
                continue
            standby = StreamTask(sub, partition, self._topology, self._config, self._collector, self._clock,
                                 cache_budget=self._cache_budget)
            try:
                standby.open_stores()
            except BaseException:
                self._directory.unlock(task_id, self)
                raise
            self.standby[task_id] = standby
            self._reader.register(standby, standby.state.restore_offsets(), standby.state.changelogs, standby=True)
            log.info("created standby task %s", task_id)

    def maintain_standbys(self) -> None:
        """Close the standbys an active task of another stream thread waits for, and place standbys for
        directories released since the last look (called every loop; cheap when nothing changed)."""
        if not self._standby_candidates:
            return
        for task_id in self._directory.wanted() & self.standby.keys():
            self._close_standby(task_id)
        if self._directory.version != self._standby_version:
            self._place_standbys()

    def _close_standby(self, task_id: str) -> None:
        standby = self.standby.pop(task_id, None)
        if standby is None:
            return
        positions = self._reader.unregister(task_id)
        standby.close()  # flushes RocksDB's memtables before the checkpoint vouches for the files
        standby.state.write_checkpoint(positions)
        self._directory.unlock(task_id, self)
        log.info("closed standby task %s at changelog offsets %s", task_id, positions)

    def close_standbys(self) -> None:
        for task_id in list(self.standby):
            self._close_standby(task_id)

    def restore(self, max_records: int, timeout: float) -> list[StreamTask]:
        """Go on reading new tasks' stream times, open the tasks whose stream time is read and whose directory
        was released, continue restoring; return the tasks that can process now (initialized)."""
        if self._stream_times is not None:
            self._stream_times.poll(timeout)
        ready = [task for task in list(self._waiting.values()) if self._open(task)]
        for task in self._reader.restore(max_records, timeout):
            if self.tasks.get(task.id) is task:
                task.initialize_topology()
                ready.append(task)
        return ready

    @property
    def restoring(self) -> bool:
        """Whether an active task is still restoring (or waiting to open its stores)."""
        return self._reader.active or bool(self._waiting)

    def catch_up_standbys(self, max_records: int) -> None:
        """Apply what the standby tasks' changelogs gained (never blocks)."""
        if self._reader.has_standbys and not self._reader.active:
            self._reader.restore(max_records, 0)

    def commit(self, tasks: list[StreamTask]) -> bool:
        """Commit ``tasks`` (:func:`streaming.runtime.checkpoint.commit`); counts commits and their latency.
        Under exactly_once_v2 every task of the thread commits: they share one transaction."""
        if not tasks:
            return True
        if self._config.exactly_once:
            tasks = list(self.tasks.values())
        started = time.perf_counter()
        if not checkpoint.commit(tasks, self._collector):
            return False
        seconds = time.perf_counter() - started
        self.commits += 1
        self.last_commit_ms = seconds * 1000
        self.commit_latency.observe(seconds)
        return True

    def revoke(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Suspend every task that owns one of ``partitions`` (see the class docstring).

        Running tasks: caches flushed and processors closed (``task.suspend``), committed, unprocessed
        buffered input dropped (the consumer reads it again from the committed offsets if the task comes
        back), and the changelog ends noted while this thread still owns the task: the checkpoint written if
        it is closed later must not cover changelog records a new owner wrote meanwhile. A task still
        restoring is closed, its restore progress checkpointed. If the commit fails (the group moved on),
        the tasks are closed dirty, as on loss.

        A task that keeps some of its partitions (an incremental revocation of part of a multi-partition
        task) is rebuilt for the rest; their input partitions are returned for the caller to pause until
        the rebuilt task is ready, as :meth:`assign` does.
        """
        owners = self._owners(partitions)
        if not owners:
            return []
        revoked = set(partitions)
        kept = [tp for task in owners for tp in task.partitions if tp not in revoked]
        running = [task for task in owners if task.initialized]
        self._close_restoring([task for task in owners if not task.initialized])
        for task in running:
            task.suspend()
        if not self.commit(running):
            log.warning("the commit on revocation of tasks %s was refused (the group moved on): closing them "
                        "dirty; their next owner re-reads their input from the last commit",
                        [task.id for task in running])
            for task in running:
                self._close(task, clean=False)
                self._directory.unlock(task.id, self)
            return self._assign(kept) if kept else []
        logged = [tp for task in running for tp, store in task.state.changelogs.items() if store.persistent]
        ends = self._reader.end_offsets(logged) if logged else {}
        for task in running:
            self.tasks.pop(task.id, None)
            for tp in task.partitions:
                self.task_of.pop(tp, None)
            task.drop_buffered()
            self.suspended[task.id] = task
            self._suspended_ends[task.id] = {tp: ends[tp] for tp in task.state.changelogs if tp in ends}
            log.info("suspended task %s (partitions %s revoked; committed, stores kept open)", task.id,
                     task.partitions)
        return self._assign(kept) if kept else []

    def _close_restoring(self, tasks: list[StreamTask]) -> None:
        """Close tasks that are restoring (or waiting for their directory), checkpointing how far each store
        got, so that a restore of the same task on this instance continues from there."""
        for task in tasks:
            positions = self._reader.unregister(task.id)
            opened = task.id not in self._waiting
            self._close(task, clean=True)
            if opened:
                task.state.write_checkpoint(positions)
                self._directory.unlock(task.id, self)
                log.info("task %s closed while restoring; its checkpoint covers its changelogs up to %s", task.id,
                         positions)

    def close_suspended(self) -> None:
        """Close cleanly the suspended tasks (the rebalance ended without giving them back)."""
        for task in list(self.suspended.values()):
            self._close_suspended(task)

    def _close_suspended(self, task: StreamTask) -> None:
        """Close a suspended task's stores (RocksDB flushes its memtables), then checkpoint the changelog ends
        noted at suspension, then release its directory."""
        del self.suspended[task.id]
        ends = self._suspended_ends.pop(task.id)
        task.close()
        task.state.write_checkpoint(ends)
        self._directory.unlock(task.id, self)
        log.info("closed suspended task %s; its checkpoint covers its changelogs up to %s", task.id, ends)

    def shutdown(self) -> None:
        """Close every task cleanly (the worker is stopping): the running ones committed and checkpointed at
        their changelogs' ends, the ones still restoring checkpointed where their restore got to, so the next
        start on this machine restores only the rest (Kafka Streams' ``TaskManager.shutdown(clean)`` calls
        ``postCommit(true)`` on every active task, and a RESTORING task writes its checkpoint there).

        Under exactly-once too: a restoring task has processed nothing, so its stores hold changelog records
        only, read with ``read_committed`` (committed data; the open transaction holds none of its writes), and
        the offsets it restored to vouch for them whatever becomes of the thread's last transaction."""
        tasks = list(self.tasks.values())
        self._close_restoring([task for task in tasks if not task.initialized])
        self._close_clean([task for task in tasks if task.initialized])
        self.close_suspended()

    def _close_clean(self, tasks: list[StreamTask]) -> None:
        """As Kafka Streams: flush caches and close the processors (``task.suspend``: cached results
        reach every processor before any closes; what ``close()`` forwards is flushed too), commit, close
        the stores (RocksDB flushes its memtables), then checkpoint what the local state files cover.

        The changelogs' end offsets (a round trip to the broker, 20-30 ms on the embedded one) are read on another
        thread while the stores close (RocksDB flushes, 5-10 ms a task): the commit has flushed every write."""
        for task in tasks:
            task.suspend()
        self.commit(tasks)
        running = [task for task in tasks if task.initialized]
        logged = [tp for task in running for tp, store in task.state.changelogs.items() if store.persistent]
        with ThreadPoolExecutor(1, thread_name_prefix="changelog-end-offsets") as reading:  # no thread until a submit
            ends_read = reading.submit(self._reader.end_offsets, logged) if logged else None
            for task in tasks:
                self._close(task, clean=True)
        ends = ends_read.result() if ends_read is not None else {}
        checkpoint.write_checkpoints(running, ends)
        for task in tasks:  # only now may another task take the directory (and read the checkpoint)
            self._directory.unlock(task.id, self)

    def lose(self, partitions: list[TopicPartition]) -> None:
        """Partitions are gone without a chance to commit (another member may own them): close dirty."""
        for task in self._owners(partitions):
            self._close(task, clean=False)
            self._directory.unlock(task.id, self)

    def close_dirty_and_wipe(self) -> list[TopicPartition]:
        """Exactly-once, after a transaction was aborted or fenced: close every active task dirty (its caches and
        buffers are dropped), delete its local state (it holds writes that were never committed, and no
        checkpoint may vouch for them) and return the input partitions the tasks owned, so that they can be
        re-created from the last committed offsets and restored from their changelogs."""
        partitions = sorted(self.task_of)
        for task in list(self.tasks.values()):
            opened = task.id not in self._waiting  # one not opened yet wrote nothing, and another may hold its directory
            self._close(task, clean=False)
            if opened:
                remove_path(task.state.task_dir, inside=task.state.app_dir)
                self._directory.unlock(task.id, self)
                log.info("wiped the local state of task %s (%s)", task.id, task.state.task_dir)
        return partitions

    def _owners(self, partitions: list[TopicPartition]) -> list[StreamTask]:
        owners: dict[str, StreamTask] = {}
        for tp in partitions:
            task = self.task_of.get(tp)
            if task is not None:
                owners[task.id] = task
        return list(owners.values())

    def _close(self, task: StreamTask, clean: bool) -> None:
        """Close the task (not its directory lock: the caller releases it once the checkpoint is written)."""
        if not task.initialized:
            self._reader.unregister(task.id)
        if self._stream_times is not None:
            self._stream_times.cancel(task)
        self._waiting.pop(task.id, None)
        self.tasks.pop(task.id, None)
        for tp in task.partitions:
            self.task_of.pop(tp, None)
        task.close()
        log.info("closed task %s (%s)", task.id, "clean" if clean else "dirty: uncommitted work dropped")

    def close_all(self, clean: bool) -> None:
        for task in list(self.tasks.values()):
            self._close(task, clean)
            self._directory.unlock(task.id, self)
        if clean:
            self.close_suspended()
        for task in list(self.suspended.values()):  # not clean: no checkpoint (the next start restores)
            del self.suspended[task.id]
            del self._suspended_ends[task.id]
            task.close()
            self._directory.unlock(task.id, self)
        self.close_standbys()

    # -- processing helpers -------------------------------------------------------------------------------
    def process_buffered(self, max_records: int, caught_up: Callable[[tuple[str, int]], bool] | None = None) -> int:
        done = 0
        for task in self.tasks.values():
            if task.group is not None and task.initialized:
                done += task.process_buffered(max_records, caught_up)
        return done

    def punctuate_wall_clock(self, now: int) -> None:
        for task in self.tasks.values():
            if task.initialized:
                task.maybe_punctuate_wall_clock(now)

    def commit_requested(self) -> bool:
        return any(task.commit_requested for task in self.tasks.values())

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
