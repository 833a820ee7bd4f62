"""Exactly-once (``exactly_once_v2``) with several stream threads, and across a rebalance whose revocation
commits an open transaction.

Each stream thread has its own transactional producer (``<application.id>-<instance.name>-<thread index>``), so
tasks moving between threads or instances move between transactional ids; an aborted transaction must rebuild
only the tasks of its own thread. A revocation commits the revoked tasks' open transaction; when that producer
was fenced meanwhile, the commit fails and nothing of it may be committed. The checks are those of
``test_exactly_once.py`` (the embedded broker shows aborted records to read_committed readers: every visible
duplicate must lie in an aborted transaction, after the offsets committed before it).
"""

from __future__ import annotations

import collections
import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from streaming import KafkaStreams, Serdes, Stores, StreamsBuilder, Topology
from streaming.admin import create_topics
from streaming.errors import TaskCorruptedError
from streaming.runtime.kafka_streams import State
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import committed_offsets, produce, wait_for
from tests.integration.test_exactly_once import (
    EOS,
    AbortOnce,
    Feeder,
    Oracle,
    RestoreStarts,
    account_for_an_abort,
    check_exactly_once,
    emissions,
    hides_aborted_records,
    keyed,
    read_committed,
)
from tests.integration.workloads import counting

pytestmark = pytest.mark.integration
PARTITIONS = 4  # two tasks per thread of one two-thread instance, one per thread of two
RECOVERED = re.compile(r"(\S+-StreamThread-\d+): injected: .*? Its tasks (\[[^\]]*\]) were closed dirty")


class ThreadRestores(RestoreStarts):
    """Restore starts with the stream thread that restores, and what ``on_start(thread name)`` returns then."""

    def __init__(self, on_start: Any) -> None:
        super().__init__()
        self.by_thread: list[tuple[str, tuple[str, int], int, Any]] = []
        self._noted = on_start

    def on_restore_start(self, tp: tuple[str, int], store: str, start: int, end: int) -> None:
        super().on_restore_start(tp, store, start, end)
        name = threading.current_thread().name
        self.by_thread.append((name, tp, start, self._noted(name)))


def threads_of(app: KafkaStreams) -> list[Any]:
    return list(app._threads)


def owners(*apps: KafkaStreams) -> dict[str, str]:
    """Task id -> the transactional id of the stream thread running it (active tasks, every instance; thread
    names repeat across instances, transactional ids do not)."""
    return {task_id: thread.collector.producer.transactional_id
            for app in apps for thread in threads_of(app) for task_id in thread.tasks.tasks}


def healthy(*apps: KafkaStreams) -> bool:
    """True, or an AssertionError naming the first failure of a stream thread (a wait_for then fails at once)."""
    for app in apps:
        if app.exception is not None:
            raise AssertionError(f"a stream thread failed: {app.exception!r}")
    return True


def merged(*ends: dict[int, int]) -> dict[int, int]:
    total: dict[int, int] = {}
    for each in ends:
        for partition, end in each.items():
            total[partition] = max(total.get(partition, 0), end)
    return total


def committed(bootstrap: str, group: str, source: str, partitions: int = PARTITIONS) -> dict[int, int]:
    return committed_offsets(bootstrap, group, source, partitions)


@pytest.mark.slow
def test_two_threads_per_instance_abort_one_thread_and_move_tasks_to_a_second_instance(
        bootstrap: str, unique_name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Instance A runs two stream threads (two transactional ids). A transaction of one thread fails mid-batch:
    only that thread's tasks are closed dirty, wiped and restored from changelog offset 0, the group's offsets
    of its partitions stay where its last committed transaction put them, and the other thread's tasks stay
    (same objects) and its commits go on. Then instance B (two more threads) joins while input flows:
    tasks move between the four transactional ids. Every input is output with its running count, duplicates
    only from the aborted transaction, and the changelog holds the oracle's counts."""
    started = time.monotonic()
    caplog.set_level(logging.INFO, logger="streaming")
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS})
    injector = AbortOnce(bootstrap, unique_name, source, PARTITIONS)
    config = {"application.id": unique_name, "bootstrap.servers": bootstrap, "num.stream.threads": 2,
              "commit.interval.ms": 200, **EOS}
    a = KafkaStreams(injector.topology(sink), {**config, "state.dir": str(tmp_path / "a"), "instance.name": "a"})
    commits_at_restore = ThreadRestores(lambda name: ({t.name: t.commits for t in threads_of(a)},
                                                      committed(bootstrap, unique_name, source)))
    a.set_global_state_restore_listener(commits_at_restore)
    b: KafkaStreams | None = None
    a.start()
    try:
        first = produce(bootstrap, source, keyed(800), Serdes.String(), Serdes.String())
        wait_for(lambda: committed(bootstrap, unique_name, source) == first, 90, "the first batch committed")
        assert sorted(t.collector.producer.transactional_id for t in threads_of(a)) == \
            [f"{unique_name}-a-1", f"{unique_name}-a-2"]
        before_abort = owners(a)
        assert sorted(collections.Counter(before_abort.values()).values()) == [2, 2], before_abort
        task_objects = {task_id: task for t in threads_of(a) for task_id, task in t.tasks.tasks.items()}
        startup_restores = len(commits_at_restore.by_thread)

        batch = keyed(800, start=800)
        batch[400] = GeneratedRecord(batch[400].key, "abort-here", batch[400].timestamp)
        second = produce(bootstrap, source, batch, Serdes.String(), Serdes.String())
        wait_for(lambda: committed(bootstrap, unique_name, source) == second, 90,
                 "every input offset committed after the abort")
        assert a.state is State.RUNNING
        [(aborted_thread, wiped)] = RECOVERED.findall(caplog.text)
        [aborted_id] = [t.collector.producer.transactional_id for t in threads_of(a) if t.name == aborted_thread]
        aborted_tasks = sorted(task for task, owner in before_abort.items() if owner == aborted_id)
        assert wiped == str(aborted_tasks)
        assert sorted(re.findall(r"wiped the local state of task (\S+)", caplog.text)) == aborted_tasks
        after_abort = owners(a)
        assert after_abort == before_abort  # the rebuilt tasks stay on their thread (no rebalance)
        kept = {task_id: task for t in threads_of(a) for task_id, task in t.tasks.tasks.items()}
        assert all(kept[i] is task_objects[i] for i, owner in before_abort.items() if owner != aborted_id)
        assert all(kept[i] is not task_objects[i] for i in aborted_tasks)
        restores = commits_at_restore.by_thread[startup_restores:]
        aborted_partitions = sorted(tp[1] for _, tp, _, _ in restores)
        assert {name for name, *_ in restores} == {aborted_thread}, restores
        assert [f"0_{p}" for p in aborted_partitions] == aborted_tasks
        assert all(start == 0 for _, _, start, _ in restores), restores
        assert injector.at is not None and injector.at[0] in aborted_partitions
        # Offsets move only with a committed transaction: at the restore the aborted partitions' offsets are still
        # those of the aborted thread's last commit (as at the abort), while the other thread may have committed.
        for _, _, _, (_, offsets) in restores:
            assert all(offsets[p] == injector.committed_at_abort[p] for p in aborted_partitions), \
                (offsets, injector.committed_at_abort)
        [other] = [t for t in threads_of(a) if t.name != aborted_thread]
        other_commits_at_restore = restores[0][3][0][other.name]
        wait_for(lambda: other.commits > other_commits_at_restore, 30, "the other thread to go on committing")

        commits_before_join = {t: t.commits for t in threads_of(a)}
        feeder = Feeder(bootstrap, source, rate=200, start=1600)
        feeder.start()
        try:
            b = KafkaStreams(counting.topology(source, sink),
                             {**config, "state.dir": str(tmp_path / "b"), "instance.name": "b"})
            b.start()
            wait_for(lambda: healthy(a, b) and b.state is State.RUNNING and a.state is State.RUNNING
                     and sorted(collections.Counter(owners(a, b).values()).values()) == [1, 1, 1, 1], 90,
                     "both instances running, one task per thread")
        finally:
            feeder.stopping.set()
            feeder.join(60)
        ends = merged(second, feeder.ends)
        wait_for(lambda: committed(bootstrap, unique_name, source) == ends, 90, "every input offset committed")
        after_join = owners(a, b)
        producers = sorted(t.collector.producer.transactional_id for t in threads_of(a) + threads_of(b))
        assert producers == sorted(f"{unique_name}-{i}-{n}" for i in "ab" for n in (1, 2))
        assert sorted(after_join.values()) == producers  # every thread of both instances runs one task
        commits_after_join = {t.collector.producer.transactional_id: t.commits - commits_before_join.get(t, 0)
                              for t in threads_of(a) + threads_of(b)}
        assert all(commits_after_join.values()), commits_after_join
    finally:
        if b is not None:
            assert b.close(30)
        assert a.close(30)
    assert a.exception is None and b is not None and b.exception is None
    moved = {task: f"{before_abort[task]} -> {after_join[task]}" for task in after_join
             if before_abort[task] != after_join[task]}
    assert len(moved) >= 2, moved  # two of the four tasks went to B at least

    oracle = Oracle(bootstrap, source, skipped=injector.at, partitions=PARTITIONS)
    output = read_committed(bootstrap, sink, Serdes.Json(), PARTITIONS)
    emitted = emissions(output)
    assert set(emitted) == set(oracle.key_of)
    duplicated = {po for po, counts in emitted.items() if len(counts) > 1}
    if hides_aborted_records(bootstrap):
        assert not duplicated
    else:  # only the aborted transaction's outputs, re-processed from the committed offsets with the same count
        assert all(po[0] in aborted_partitions and po[1] >= injector.committed_at_abort[po[0]]
                   and len(set(emitted[po])) == 1 for po in duplicated), duplicated
    assert all(counts[-1] == oracle.rank[po] for po, counts in emitted.items())
    oracle.check_state(bootstrap, unique_name, output)
    print(f"2 threads x 2 instances: {len(oracle.key_of)} inputs, {len(output)} outputs read_committed, "
          f"{len(duplicated)} aborted outputs visible; commits after the abort by the other thread "
          f"{other.commits - other_commits_at_restore}; commits after B joined {commits_after_join}; "
          f"tasks moved {moved}; {time.monotonic() - started:.1f} s")


# -- a rebalance while a transaction is open -----------------------------------------------------------------------
# A commit interval the tests never reach: the only commits are those of a revocation and of a clean close.
NEVER = {"commit.interval.ms": 600_000}


def processed(app: KafkaStreams) -> int:
    return sum(t.processed for t in threads_of(app))


def commit_a_baseline(topology: Any, config: dict[str, Any], source: str) -> dict[int, int]:
    """Run the app once over 400 records until their offsets are committed, then close it; the committed ends."""
    app = KafkaStreams(topology, config)
    app.start()
    try:
        baseline = produce(config["bootstrap.servers"], source, keyed(400), Serdes.String(), Serdes.String())
        wait_for(lambda: committed(config["bootstrap.servers"], config["application.id"], source, 2) == baseline, 90,
                 "the baseline committed")
    finally:
        assert app.close(30)
    return baseline


def consumed_to(ends: dict[int, int], *apps: KafkaStreams) -> bool:
    """Whether the tasks of ``apps`` that own an input partition have taken it up to its end in ``ends``."""
    positions = {tp[1]: task.consumed.get(tp, 0) for app in apps for t in threads_of(app)
                 for tp, task in t.tasks.task_of.items()}
    return bool(positions) and all(ends.get(p, 0) == offset for p, offset in positions.items())


@pytest.mark.slow
def test_a_revocation_commits_the_open_transaction_once(bootstrap: str, unique_name: str, tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    """Member A has processed a batch in a transaction that is still open (nothing committed) when B joins: A's
    revocation commits it (outputs, changelog writes and offsets together) and B goes on from those offsets.
    Every input is output exactly once with its running count, and the changelog holds the oracle's counts.

    A and B run in this one process without instance.name: their transactional ids hold each instance's own
    random id (once one per process, so B's producer fenced A's, and A's new producer B's, in turn)."""
    started = time.monotonic()
    caplog.set_level(logging.INFO, logger="streaming")
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: 2, sink: 2})
    config = {"application.id": unique_name, "bootstrap.servers": bootstrap, **EOS}
    a = KafkaStreams(counting.topology(source, sink), {**config, **NEVER, "state.dir": str(tmp_path / "a")})
    b: KafkaStreams | None = None
    a.start()
    try:
        first = produce(bootstrap, source, keyed(600), Serdes.String(), Serdes.String())
        wait_for(lambda: processed(a) == 600, 90, "A to process the first batch")
        assert committed(bootstrap, unique_name, source, 2) == {0: 0, 1: 0}  # the transaction is open
        b = KafkaStreams(counting.topology(source, sink), {**config, "state.dir": str(tmp_path / "b")})
        b.start()
        ids = {f"{unique_name}-{a.process_id}-1", f"{unique_name}-{b.process_id}-1"}
        assert len(ids) == 2
        wait_for(lambda: committed(bootstrap, unique_name, source, 2) == first, 90,
                 "A's revocation to commit its open transaction")
        wait_for(lambda: healthy(a, b) and a.state is State.RUNNING and b.state is State.RUNNING
                 and len(owners(a, b)) == 2
                 and set(owners(a, b).values()) == ids, 90, "one task on each instance")
        commits_of_a = a.metrics()["commits"]
        second = produce(bootstrap, source, keyed(600, start=600), Serdes.String(), Serdes.String())
        [b_partition] = [int(task[-1]) for task, owner in owners(a, b).items() if b.process_id in owner]
        wait_for(lambda: committed(bootstrap, unique_name, source, 2)[b_partition] == second[b_partition], 90,
                 "B to commit its partition")
        assert a.metrics()["commits"] == commits_of_a  # A commits its part only when it closes
    finally:
        if b is not None:
            assert b.close(30)
        assert a.close(30)
    assert a.exception is None and b is not None and b.exception is None
    assert "was fenced" not in caplog.text and "wiped the local state" not in caplog.text
    assert committed(bootstrap, unique_name, source, 2) == second
    output = check_exactly_once(bootstrap, unique_name, source, sink)
    print(f"revocation committed an open transaction of {sum(first.values())} records; {sum(second.values())} "
          f"inputs, {len(output)} outputs; {time.monotonic() - started:.1f} s")


@pytest.mark.slow
def test_a_producer_fenced_before_its_revocation_commits_nothing(
        bootstrap: str, unique_name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """As above, but A's producer is fenced while its transaction is open (a producer with its transactional id
    initializes, which aborts that transaction: what the broker does to a producer it expired). B joins; A's
    revocation commit is refused: nothing of the open transaction is committed, the group's offsets stay those
    of the last committed transaction, A closes its tasks dirty, wipes them, takes a new producer and rejoins.
    Whatever was committed before is output once; the rest is re-processed from the committed offsets."""
    started = time.monotonic()
    caplog.set_level(logging.INFO, logger="streaming")
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: 2, sink: 2})
    config = {"application.id": unique_name, "bootstrap.servers": bootstrap, **EOS}
    # No instance.name for A: a fencing then means an expired producer, and A recovers by itself. A first run
    # commits a baseline (its clean close).
    baseline = commit_a_baseline(counting.topology(source, sink), {**config, "state.dir": str(tmp_path / "a")}, source)
    a = KafkaStreams(counting.topology(source, sink), {**config, **NEVER, "state.dir": str(tmp_path / "a")})
    b: KafkaStreams | None = None
    a.start()
    try:
        first = produce(bootstrap, source, keyed(600, start=400), Serdes.String(), Serdes.String())
        wait_for(lambda: processed(a) == 600, 90, "A to process the second batch")
        [transactional_id] = {t.collector.producer.transactional_id for t in threads_of(a)}
        fencer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
        fencer.init_transactions(30)
        assert committed(bootstrap, unique_name, source, 2) == baseline
        b = KafkaStreams(counting.topology(source, sink), {**config, "state.dir": str(tmp_path / "b"),
                                                           "instance.name": "b"})
        b.start()
        wait_for(lambda: "was fenced" in caplog.text, 90, "A's revocation commit to be fenced")
        assert committed(bootstrap, unique_name, source, 2) == baseline
        wait_for(lambda: healthy(a, b) and a.state is State.RUNNING and b.state is State.RUNNING
                 and set(owners(a, b).values()) == {transactional_id, f"{unique_name}-b-1"}, 90,
                 "A back in the group with a new producer, one task on each instance")
        # B commits every 100 ms; A (commit interval NEVER) commits its part when it closes.
        [b_partition] = [int(task[-1]) for task, owner in owners(a, b).items() if owner.endswith("-b-1")]
        wait_for(lambda: committed(bootstrap, unique_name, source, 2)[b_partition] == first[b_partition], 90,
                 "B to commit its partition")
        wait_for(lambda: consumed_to(first, a), 90, "A to re-process its partition")
    finally:
        if b is not None:
            assert b.close(30)
        assert a.close(30)
    assert a.exception is None and b is not None and b.exception is None
    assert committed(bootstrap, unique_name, source, 2) == first
    [fenced] = [line for line in caplog.text.splitlines() if "takes a new producer and rejoins group" in line]
    assert f"transactional producer {transactional_id!r} was fenced" in fenced, fenced
    print(f"fenced before the revocation: {fenced[:300]}...")
    account_for_an_abort(bootstrap, unique_name, source, sink, baseline, "fenced during a revocation's commit")
    print(f"{time.monotonic() - started:.1f} s")


class FailingRevocation:
    """Fault injection: once armed, the next revocation fails with an abortable error (:class:`TaskCorruptedError`,
    what a transaction commit that times out raises), from inside the revocation: beside the counting app, a
    cached count forwards its updates only when a commit flushes its cache (commit interval NEVER: the
    revocation's), to a step that raises."""

    def __init__(self) -> None:
        self.armed = threading.Event()
        self.raised: list[threading.Thread] = []  # the stream thread it failed

    def _fail(self, key: str, count: int) -> None:
        if self.armed.is_set():
            self.armed.clear()
            self.raised.append(threading.current_thread())
            raise TaskCorruptedError("injected: the revocation's commit failed with an abortable error")

    def topology(self, source: str, sink: str) -> Topology:
        builder = StreamsBuilder()
        builder.stream(source, key_serde=Serdes.String(), value_serde=Serdes.String(), name="input") \
            .group_by_key().count().to_stream().peek(self._fail)
        return (builder.build()
                .add_processor("count", counting.CountProcessor, "input")
                .add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store(counting.STORE),
                                                                Serdes.String(), Serdes.Long()), "count")
                .add_sink("output", sink, "count", key_serde=Serdes.String(), value_serde=Serdes.Json()))


@pytest.mark.slow
def test_an_abortable_failure_inside_a_revocation_aborts_and_the_thread_goes_on(
        bootstrap: str, unique_name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A's transaction is open when B joins, and A's revocation fails with an abortable error: the transaction is
    aborted (nothing of it committed: the group's offsets stay those of the last commit), A's tasks are closed
    dirty and wiped, and the thread goes on with what the rebalance gives it (it used to re-create the tasks of
    the revoked partitions and seek on them, which are no longer assigned: the thread died with "Failed to seek
    ... Erroneous state"). B and A re-process from the committed offsets; the output and counts are accounted
    for as after any abort."""
    started = time.monotonic()
    caplog.set_level(logging.INFO, logger="streaming")
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: 2, sink: 2})
    injector = FailingRevocation()
    config = {"application.id": unique_name, "bootstrap.servers": bootstrap, **EOS}
    baseline = commit_a_baseline(injector.topology(source, sink), {**config, "state.dir": str(tmp_path / "a")}, source)
    a = KafkaStreams(injector.topology(source, sink), {**config, **NEVER, "state.dir": str(tmp_path / "a")})
    b: KafkaStreams | None = None
    a.start()
    try:
        first = produce(bootstrap, source, keyed(600, start=400), Serdes.String(), Serdes.String())
        wait_for(lambda: processed(a) == 600, 90, "A to process the second batch")
        injector.armed.set()
        b = KafkaStreams(injector.topology(source, sink), {**config, "state.dir": str(tmp_path / "b")})
        b.start()
        wait_for(lambda: bool(injector.raised), 90, "A's revocation to fail")
        assert injector.raised == threads_of(a)
        assert committed(bootstrap, unique_name, source, 2) == baseline
        wait_for(lambda: healthy(a, b) and a.state is State.RUNNING and b.state is State.RUNNING
                 and len(owners(a, b)) == 2
                 and len(set(owners(a, b).values())) == 2, 90, "one task on each instance")
        assert a.exception is None
        [b_partition] = [int(task[-1]) for task, owner in owners(a, b).items() if b.process_id in owner]
        wait_for(lambda: committed(bootstrap, unique_name, source, 2)[b_partition] == first[b_partition], 90,
                 "B to commit its partition")
        wait_for(lambda: consumed_to(first, a), 90, "A to re-process its partition")
    finally:
        if b is not None:
            assert b.close(30)
        assert a.close(30)
    assert a.exception is None and b is not None and b.exception is None
    assert committed(bootstrap, unique_name, source, 2) == first
    [recovered] = [line for line in caplog.text.splitlines() if "injected: the revocation's commit" in line
                   and "were closed dirty" in line]
    assert "Failed to seek" not in caplog.text
    print(f"abortable failure inside a revocation: {recovered[:240]}...")
    account_for_an_abort(bootstrap, unique_name, source, sink, baseline, "abortable failure inside a revocation")
    print(f"{time.monotonic() - started:.1f} s")
