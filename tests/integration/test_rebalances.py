"""Rebalances that keep tasks, on the embedded broker: a revoked task that comes back to its instance is resumed
without a restore (eager assignment), cooperative-sticky moves only the tasks that must move, and a static
member restarted within ``session.timeout.ms`` gets its tasks back without a rebalance.

Two in-process instances run the counting workload, each with its own state directory. Each instance's
processors are tagged, so the test sees on which instance a task's processor was closed (the task was
suspended or closed) or initialized; a restore listener per instance counts every changelog restore.
"""

from __future__ import annotations

import collections
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from streaming import KafkaStreams, Serdes, Stores, Topology
from streaming.admin import create_topics
from streaming.processor import ProcessorContext
from streaming.runtime.kafka_streams import State
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import committed_offsets, produce, read_topic, wait_for
from tests.integration.workloads import counting

pytestmark = pytest.mark.integration
PARTITIONS = 4
ALL_TASKS = {f"0_{p}" for p in range(PARTITIONS)}
KEYS = 40
SETTLE_S = 90  # a rebalance takes ~3 s on the embedded broker; generous for a machine shared with other tests


class Events:
    """What the tagged processors of every instance did: ``(instance, "init" | "close", task id)``, in order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.log: list[tuple[str, str, str]] = []

    def add(self, instance: str, what: str, task_id: str) -> None:
        with self._lock:
            self.log.append((instance, what, task_id))

    def mark(self) -> int:
        with self._lock:
            return len(self.log)

    def since(self, mark: int, instance: str, what: str) -> set[str]:
        with self._lock:
            return {task for who, did, task in self.log[mark:] if who == instance and did == what}


class RestoreCounter:
    """A StateRestoreListener counting restores and restored records per changelog partition."""

    def __init__(self) -> None:
        self.starts: collections.Counter[int] = collections.Counter()
        self.records: collections.Counter[int] = collections.Counter()

    def on_restore_start(self, topic_partition: tuple[str, int], store_name: str, start_offset: int,
                         end_offset: int) -> None:
        self.starts[topic_partition[1]] += 1

    def on_batch_restored(self, topic_partition: tuple[str, int], store_name: str, batch_end_offset: int,
                          num_restored: int) -> None:
        self.records[topic_partition[1]] += num_restored

    def on_restore_end(self, topic_partition: tuple[str, int], store_name: str, total_restored: int) -> None:
        pass

    def reset(self) -> None:
        self.starts.clear()
        self.records.clear()


def tagged_topology(source: str, sink: str, instance: str, events: Events) -> Topology:
    """The counting workload, its processor reporting ``init`` and ``close`` per task to ``events``."""

    class TaggedCount(counting.CountProcessor):
        def init(self, context: ProcessorContext) -> None:
            super().init(context)
            events.add(instance, "init", context.task_id)

        def close(self) -> None:
            events.add(instance, "close", self.context.task_id)

    return (
        Topology()
        .add_source("input", source, key_serde=Serdes.String(), value_serde=Serdes.String())
        .add_processor("count", TaggedCount, "input")
        .add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store(counting.STORE),
                                                        Serdes.String(), Serdes.Long()), "count")
        .add_sink("output", sink, "count", key_serde=Serdes.String(), value_serde=Serdes.Json())
    )


class Cluster:
    """The test's topics, its input so far, and its instances."""

    def __init__(self, bootstrap: str, app_id: str, tmp_path: Path, **extra: Any) -> None:
        self.bootstrap, self.app_id, self.tmp_path, self.extra = bootstrap, app_id, tmp_path, extra
        self.source, self.sink = f"{app_id}-in", f"{app_id}-out"
        create_topics(bootstrap, {self.source: PARTITIONS, self.sink: PARTITIONS})
        self.events = Events()
        self.produced = 0
        self.running: list[KafkaStreams] = []

    def create(self, instance: str, **extra: Any) -> tuple[KafkaStreams, RestoreCounter]:
        config = {"application.id": self.app_id, "bootstrap.servers": self.bootstrap,
                  "state.dir": str(self.tmp_path / instance), "commit.interval.ms": 200, **self.extra, **extra}
        streams = KafkaStreams(tagged_topology(self.source, self.sink, instance, self.events), config)
        restores = RestoreCounter()
        streams.set_global_state_restore_listener(restores)
        self.running.append(streams)
        return streams, restores

    def start(self, instance: str, **extra: Any) -> tuple[KafkaStreams, RestoreCounter]:
        streams, restores = self.create(instance, **extra)
        streams.start()
        return streams, restores

    def produce(self, count: int) -> None:
        records = [GeneratedRecord(f"key-{i % KEYS:03d}", f"v{i}", 1_700_000_000_000 + i)
                   for i in range(self.produced, self.produced + count)]
        produce(self.bootstrap, self.source, records, Serdes.String(), Serdes.String())
        self.produced += count

    def wait_committed(self) -> None:
        """Until the group has committed every record produced so far."""
        wait_for(lambda: sum(committed_offsets(self.bootstrap, self.app_id, self.source, PARTITIONS).values())
                 == self.produced, SETTLE_S, f"the group to commit all {self.produced} input records")

    def check_counts(self) -> None:
        """The oracle: every input record counted exactly once — each input offset appears once in the output,
        and each key's counts run 1..n, n being the records of that key."""
        output = read_topic(self.bootstrap, self.sink, Serdes.String(), Serdes.Json(), PARTITIONS)
        sources = [(r.value["partition"], r.value["offset"]) for r in output]
        assert len(sources) == len(set(sources)) == self.produced, "an input record was lost or counted twice"
        counts: dict[str, list[int]] = collections.defaultdict(list)
        for record in output:
            counts[record.key].append(record.value["count"])
        expected = collections.Counter(f"key-{i % KEYS:03d}" for i in range(self.produced))
        assert {key: sorted(values) for key, values in counts.items()} == \
            {key: list(range(1, n + 1)) for key, n in expected.items()}

    def close(self) -> None:
        for streams in self.running:
            streams.close(60)


def tasks_of(streams: KafkaStreams) -> set[str]:
    return set(streams.metrics()["tasks"])


def settled(*instances: KafkaStreams) -> bool:
    """Every instance runs, and together they run every task, each once."""
    owned = [tasks_of(streams) for streams in instances]
    return all(s.state is State.RUNNING for s in instances) and all(owned) \
        and sum(map(len, owned)) == PARTITIONS and set().union(*owned) == ALL_TASKS


def test_eager_rebalance_resumes_the_tasks_that_stay_without_restoring(
        bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    cluster = Cluster(bootstrap, unique_name, tmp_path)
    try:
        cluster.produce(2_000)
        a, a_restores = cluster.start("a")
        cluster.wait_committed()
        assert tasks_of(a) == ALL_TASKS
        a_restores.reset()
        mark = cluster.events.mark()

        b, b_restores = cluster.start("b")
        wait_for(lambda: settled(a, b), SETTLE_S, "B to join and the tasks to spread over A and B")
        stayed, moved = tasks_of(a), tasks_of(b)
        # Eager (range): every task of A was revoked — its processors closed — and those that stayed on A were
        # resumed: processors initialized again, and not one restore nor one changelog record read on A.
        assert cluster.events.since(mark, "a", "close") == ALL_TASKS
        assert stayed <= cluster.events.since(mark, "a", "init")  # == unless the join took two rebalances
        assert a_restores.starts == {} and a_restores.records == {}
        # B restored the tasks it took, from the changelog A wrote (the listener sees restores).
        assert set(b_restores.starts) == {int(task.split("_")[1]) for task in moved}
        assert sum(b_restores.records.values()) > 0

        cluster.produce(2_000)
        cluster.wait_committed()
        cluster.check_counts()
    finally:
        cluster.close()


def test_cooperative_sticky_moves_only_the_tasks_that_must_move(
        bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    cluster = Cluster(bootstrap, unique_name, tmp_path,
                      **{"consumer.partition.assignment.strategy": "cooperative-sticky"})
    try:
        cluster.produce(2_000)
        a, a_restores = cluster.start("a")
        cluster.wait_committed()
        assert tasks_of(a) == ALL_TASKS
        mark = cluster.events.mark()

        b, _ = cluster.start("b")
        wait_for(lambda: settled(a, b), SETTLE_S, "B to join and take its share of the tasks")
        moved = tasks_of(b)
        # Only the tasks that moved to B were revoked on A; the others were never suspended (processors never
        # closed or initialized again) and processed on.
        assert cluster.events.since(mark, "a", "close") == moved
        assert cluster.events.since(mark, "a", "init") == set()
        cluster.produce(2_000)
        cluster.wait_committed()

        mark = cluster.events.mark()
        a_restores.reset()
        b.close(60)
        # The returned tasks' processors initialize once their restore is done (the state may still read RUNNING
        # for a moment after the assignment added them).
        wait_for(lambda: tasks_of(a) == ALL_TASKS and a.state is State.RUNNING
                 and cluster.events.since(mark, "a", "init") >= moved, SETTLE_S,
                 "B's tasks to come back to A after B left")
        # B leaving revokes nothing on A: A only gains B's tasks, restoring them from the checkpoints it wrote
        # when they moved away (only the changelog tail B wrote).
        assert cluster.events.since(mark, "a", "close") == set()
        assert cluster.events.since(mark, "a", "init") == moved
        assert set(a_restores.starts) == {int(task.split("_")[1]) for task in moved}

        cluster.produce(2_000)
        cluster.wait_committed()
        cluster.check_counts()
    finally:
        cluster.close()


def test_a_restarted_static_member_gets_its_tasks_back_and_one_that_stays_away_keeps_them_unowned(
        bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    """Static membership on the embedded broker (measured; docs/broker-limits.md): a member restarted with the
    same ``instance.name`` gets the same tasks back. Only a restart that rejoins at once (well under a second)
    avoids a rebalance there; later, the old member's session expiry rebalances the group, which suspension
    makes cheap for the others (they resume their tasks, restoring nothing). A static member that stays away
    keeps its partitions unowned, however long: nothing processes them until it returns."""
    cluster = Cluster(bootstrap, unique_name, tmp_path)
    session_s = 6  # the runtime's default consumer session.timeout.ms
    try:
        cluster.produce(2_000)
        a, a_restores = cluster.start("a", **{"instance.name": "a", "static.membership": True})
        b, _ = cluster.start("b", **{"instance.name": "b", "static.membership": True})
        wait_for(lambda: settled(a, b), SETTLE_S, "A and B to share the tasks")
        cluster.wait_committed()
        a_tasks, b_tasks = tasks_of(a), tasks_of(b)
        a_rebalances = a.metrics()["rebalances"]
        a_restores.reset()
        mark = cluster.events.mark()

        b_again, b_restores = cluster.create("b", **{"instance.name": "b", "static.membership": True})  # same name, same state directory
        b.close(60)  # a static member does not leave the group when it closes
        restarted = time.monotonic()
        b_again.start()
        wait_for(lambda: b_again.state is State.RUNNING and bool(tasks_of(b_again)), SETTLE_S,
                 "the restarted static member to get tasks")
        rebalanced = a.metrics()["rebalances"] != a_rebalances
        print(f"restarted static member: its tasks back {time.monotonic() - restarted:.1f} s after its restart; "
              f"the other member {'went through a rebalance' if rebalanced else 'saw no rebalance'}")
        assert tasks_of(b_again) == b_tasks  # the same tasks, restored from its own checkpoints: nothing read
        assert sum(b_restores.records.values()) == 0
        assert tasks_of(a) == a_tasks and a_restores.records == {} and a_restores.starts == {}
        if rebalanced:  # A's tasks were suspended and resumed, never closed for good
            assert cluster.events.since(mark, "a", "init") == a_tasks
        cluster.produce(1_000)
        cluster.wait_committed()

        b_again.close(60)  # and now it stays away, beyond the session timeout
        cluster.produce(1_000)
        time.sleep(3 * session_s)
        assert tasks_of(a) == a_tasks, "the embedded broker reassigned a departed static member's partitions"
        committed = committed_offsets(bootstrap, unique_name, cluster.source, PARTITIONS)
        assert sum(committed.values()) < cluster.produced  # B's partitions: unowned, nothing processed
        print(f"static member away {3 * session_s} s: its tasks {sorted(b_tasks)} stayed unowned, "
              f"{cluster.produced - sum(committed.values())} records waiting")

        back, _ = cluster.start("b", **{"instance.name": "b", "static.membership": True})
        wait_for(lambda: tasks_of(back) == b_tasks and back.state is State.RUNNING, SETTLE_S,
                 "the returning static member to take its tasks again")
        cluster.wait_committed()
        cluster.check_counts()
    finally:
        cluster.close()
