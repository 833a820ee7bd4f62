"""Exactly-once (``processing.guarantee=exactly_once_v2``) on a real broker.

What the embedded broker (Tansu 0.6.0) does with transactions was measured first (a probe, then pinned by
``test_the_embedded_broker_s_transactions_as_documented``): commits, aborts, ``send_offsets_to_transaction``
and fencing by a newer producer with the same transactional id work; a ``read_committed`` reader stops at
an open transaction (the last stable offset) but still sees the records of ABORTED transactions; a
transaction is never timed out (``transaction.timeout.ms`` is not enforced). So these tests check exactly
what the broker can show — outputs and offsets committed together, offsets that never move without a
committed transaction, fencing, state wiped and restored after an abort — and where aborted records are
visible they check that every visible duplicate lies in the aborted transaction; on a broker that hides
aborted records (``BROOK_TEST_BOOTSTRAP_SERVERS`` pointing at Apache Kafka) the same tests demand exactly
one output per input.
"""

from __future__ import annotations

import collections
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from streaming import KafkaStreams, Serdes, Stores, Topology
from streaming.admin import create_topics
from streaming.errors import TaskCorruptedError
from streaming.naming import changelog_topic
from streaming.processor import Record
from streaming.runtime.kafka_streams import State
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import ConsumedRecord, committed_offsets, produce, read_topic, wait_for
from tests.integration.workloads import counting

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 2
KEYS = 40
EOS = {"processing.guarantee": "exactly_once_v2"}
# The group notices a stopped or killed member within 2 s (the fault injection tests' settings).
SESSION = {"consumer.session.timeout.ms": "2000", "consumer.heartbeat.interval.ms": "250"}
STATE_CHANGE = re.compile(r"state \w+ -> (\w+)")


def keyed(count: int, start: int = 0) -> list[GeneratedRecord]:
    return [GeneratedRecord(f"key-{i % KEYS:03d}", f"v{i}", 1_700_000_000_000 + i) for i in range(start, start + count)]


def hides_aborted_records(bootstrap: str) -> bool:
    """Whether the broker hides aborted records from read_committed readers (Kafka does; Tansu does not):
    one record is produced in an aborted transaction and read back."""
    topic = f"probe-aborted-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, {topic: 1})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"aborted")
    producer.flush(10)
    producer.abort_transaction(30)
    return not read_topic(bootstrap, topic, Serdes.Bytes(), Serdes.Bytes(), 1,
                          client_config={"isolation.level": "read_committed"})


def read_committed(bootstrap: str, topic: str, value_serde: Any, partitions: int = PARTITIONS) -> list[ConsumedRecord]:
    return read_topic(bootstrap, topic, Serdes.String(), value_serde, partitions,
                      client_config={"isolation.level": "read_committed"})


def last_per_key(records: list[ConsumedRecord]) -> dict[Any, Any]:
    return {r.key: r.value for r in sorted(records, key=lambda r: (r.partition, r.offset))}


class Oracle:
    """The input as read back: per (partition, offset) its key; counts per key; each record's running count."""

    def __init__(self, bootstrap: str, source: str, skipped: tuple[int, int] | None = None,
                 partitions: int = PARTITIONS) -> None:
        self.partitions = partitions
        inputs = read_topic(bootstrap, source, Serdes.String(), Serdes.String(), partitions)
        self.key_of = {(r.partition, r.offset): r.key for r in inputs if (r.partition, r.offset) != skipped}
        self.counts = collections.Counter(self.key_of.values())
        seen: collections.Counter[str] = collections.Counter()
        self.rank = {}
        for po in sorted(self.key_of):
            seen[self.key_of[po]] += 1
            self.rank[po] = seen[self.key_of[po]]

    def check_state(self, bootstrap: str, app_id: str, output: list[ConsumedRecord]) -> None:
        """The changelog's last count per key, and the last output per key, are the oracle's counts."""
        final = last_per_key(read_committed(bootstrap, changelog_topic(app_id, counting.STORE), Serdes.Long(),
                                            self.partitions))
        assert final == dict(self.counts), {k: (final.get(k), v) for k, v in self.counts.items() if final.get(k) != v}
        assert {k: v["count"] for k, v in last_per_key(output).items()} == dict(self.counts)


def emissions(output: list[ConsumedRecord]) -> dict[tuple[int, int], list[int]]:
    """Per input (partition, offset): the counts emitted for it, in output order."""
    emitted: dict[tuple[int, int], list[int]] = collections.defaultdict(list)
    for r in sorted(output, key=lambda r: (r.partition, r.offset)):
        emitted[(r.value["partition"], r.value["offset"])].append(r.value["count"])
    return emitted


def check_exactly_once(bootstrap: str, app_id: str, source: str, sink: str) -> list[ConsumedRecord]:
    """The counting app's read_committed output has every input exactly once, with its running count, and the
    changelog and the last output per key hold the oracle's counts. Returns the output."""
    oracle = Oracle(bootstrap, source)
    output = read_committed(bootstrap, sink, Serdes.Json())
    emitted = emissions(output)
    assert set(emitted) == set(oracle.key_of)
    assert all(counts == [oracle.rank[po]] for po, counts in emitted.items()), \
        {po: c for po, c in emitted.items() if c != [oracle.rank[po]]}
    oracle.check_state(bootstrap, app_id, output)
    return output


class RestoreStarts:
    """A StateRestoreListener keeping every restore start (changelog partition, start and end offset)."""

    def __init__(self, on_start: Any = None) -> None:
        self.starts: list[tuple[tuple[str, int], int, int]] = []
        self._on_start = on_start

    def on_restore_start(self, tp: tuple[str, int], store: str, start: int, end: int) -> None:
        self.starts.append((tp, start, end))
        if self._on_start is not None:
            self._on_start()

    def on_batch_restored(self, tp: tuple[str, int], store: str, batch_end: int, count: int) -> None:
        pass

    def on_restore_end(self, tp: tuple[str, int], store: str, total: int) -> None:
        pass


def test_the_embedded_broker_s_transactions_as_documented(bootstrap: str, unique_name: str) -> None:
    """docs/broker-limits.md's transactions, measured: fencing works, an open transaction holds read_committed
    readers back, a newer producer with the same id aborts it, and aborted records stay visible."""
    if os.environ.get("BROOK_TEST_BOOTSTRAP_SERVERS"):
        pytest.skip("pins the embedded broker's behaviour")
    topic = f"{unique_name}-txn"
    create_topics(bootstrap, {topic: 1})
    old = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_name})
    old.init_transactions(30)
    old.begin_transaction()
    old.produce(topic, b"open")
    old.flush(10)
    assert read_topic(bootstrap, topic, Serdes.Bytes(), Serdes.Bytes(), 1) == []  # held back by the open transaction
    new = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_name})
    new.init_transactions(30)  # bumps the epoch: aborts the old producer's transaction and fences it
    new.begin_transaction()
    new.produce(topic, b"committed")
    new.commit_transaction(30)
    old.produce(topic, b"zombie")
    with pytest.raises(Exception, match="fence"):
        old.commit_transaction(10)
    values = [r.value for r in read_topic(bootstrap, topic, Serdes.Bytes(), Serdes.Bytes(), 1,
                                          client_config={"isolation.level": "read_committed"})]
    assert values == [b"open", b"committed"]  # the aborted record is visible; the zombie's never reached the log
    assert not hides_aborted_records(bootstrap)


def test_the_embedded_broker_answers_an_offset_fetch_while_a_transaction_holds_pending_offsets(
        bootstrap: str, unique_name: str) -> None:
    """docs/broker-limits.md's transactions, measured: KIP-447's ``require_stable`` (which librdkafka sets for a
    read_committed consumer) is not honoured. While an open transaction holds offsets for the group, the group's
    committed offset is answered at once with the offset before it; Kafka answers UNSTABLE_OFFSET_COMMIT, and the
    client asks again until the transaction ends."""
    if os.environ.get("BROOK_TEST_BOOTSTRAP_SERVERS"):
        pytest.skip("pins the embedded broker's behaviour")
    source, sink, group = f"{unique_name}-in", f"{unique_name}-out", f"{unique_name}-group"
    create_topics(bootstrap, {source: 1, sink: 1})
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_name})
    producer.init_transactions(30)
    for offset in (5, 100):  # the first transaction commits 5; the second holds 100 pending
        producer.begin_transaction()
        producer.produce(sink, b"output")
        producer.send_offsets_to_transaction([TopicPartition(source, 0, offset)], member.consumer_group_metadata(),
                                             30)
        if offset == 5:
            producer.commit_transaction(30)
    producer.flush(10)
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                       "isolation.level": "read_committed"})
    try:
        started = time.monotonic()
        assert reader.committed([TopicPartition(source, 0)], timeout=10)[0].offset == 5
        assert time.monotonic() - started < 1.0  # answered at once, not after the transaction
        producer.commit_transaction(30)
        assert reader.committed([TopicPartition(source, 0)], timeout=10)[0].offset == 100
    finally:
        reader.close()
        member.close()


def test_counting_app_output_and_state_match_the_oracle(bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    """Every input record gives exactly one output with its running count; the changelog and the last outputs
    hold the oracle's counts; outputs were written in transactions (commit markers take offsets)."""
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS})
    app = KafkaStreams(counting.topology(source, sink), {
        "application.id": unique_name, "bootstrap.servers": bootstrap, "state.dir": str(tmp_path), **EOS})
    app.start()
    try:
        for batch in range(3):  # at least one transaction per batch
            ends = produce(bootstrap, source, keyed(1000, start=1000 * batch), Serdes.String(), Serdes.String())
            wait_for(lambda ends=ends: committed_offsets(bootstrap, unique_name, source, PARTITIONS) == ends, 90,
                     "every input offset committed")
    finally:
        assert app.close(30)
    assert app.exception is None
    output = check_exactly_once(bootstrap, unique_name, source, sink)
    for partition in range(PARTITIONS):  # a commit marker follows each transaction's records
        offsets = sorted(r.offset for r in output if r.partition == partition)
        assert offsets[-1] + 1 >= len(offsets) + 2, f"output partition {partition} has no transaction markers"


class AbortOnce:
    """Fault injection: the first time a record with value ``abort-here`` is processed, the transaction fails
    as an abortable producer error would (:class:`TaskCorruptedError`), after noting the group's committed
    offsets at that moment."""

    def __init__(self, bootstrap: str, group: str, source: str, partitions: int = PARTITIONS) -> None:
        self.bootstrap, self.group, self.source, self.partitions = bootstrap, group, source, partitions
        self.committed_at_abort: dict[int, int] | None = None
        self.at: tuple[int, int] | None = None

    def topology(self, sink: str) -> Topology:
        injector = self

        class Failing(counting.CountProcessor):
            def process(self, record: Record[str, str]) -> None:
                if record.value == "abort-here" and injector.at is None:
                    injector.at = (self.context.partition, self.context.offset)
                    injector.committed_at_abort = committed_offsets(injector.bootstrap, injector.group,
                                                                    injector.source, injector.partitions)
                    raise TaskCorruptedError("injected: the transaction failed with an abortable error")
                if record.value != "abort-here":
                    super().process(record)

        return (Topology()
                .add_source("input", self.source, key_serde=Serdes.String(), value_serde=Serdes.String())
                .add_processor("count", Failing, "input")
                .add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store(counting.STORE),
                                                                Serdes.String(), Serdes.Long()), "count")
                .add_sink("output", sink, "count", key_serde=Serdes.String(), value_serde=Serdes.Json()))


def test_an_aborted_transaction_commits_no_offsets_and_its_tasks_restore_from_zero(
        bootstrap: str, unique_name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A transaction fails mid-batch: it is aborted, the group's offsets stay where the last committed
    transaction put them, every task is closed dirty and its state wiped, and the re-created tasks restore
    their stores from changelog offset 0 (the restore listener says so) and re-read from the committed
    offsets. The final state is the oracle's."""
    caplog.set_level(logging.INFO, logger="streaming")
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS})
    injector = AbortOnce(bootstrap, unique_name, source)
    committed_at_restores: list[dict[int, int]] = []
    listener = RestoreStarts(lambda: committed_at_restores.append(
        committed_offsets(bootstrap, unique_name, source, PARTITIONS)))
    app = KafkaStreams(injector.topology(sink), {
        "application.id": unique_name, "bootstrap.servers": bootstrap, "state.dir": str(tmp_path),
        "commit.interval.ms": 200, **EOS})
    app.set_global_state_restore_listener(listener)
    app.start()
    try:
        first = produce(bootstrap, source, keyed(600), Serdes.String(), Serdes.String())
        wait_for(lambda: committed_offsets(bootstrap, unique_name, source, PARTITIONS) == first, 90,
                 "the first batch committed")
        batch = keyed(600, start=600)
        batch[300] = GeneratedRecord(batch[300].key, "abort-here", batch[300].timestamp)
        ends = produce(bootstrap, source, batch, Serdes.String(), Serdes.String())
        wait_for(lambda: committed_offsets(bootstrap, unique_name, source, PARTITIONS) == ends, 90,
                 "every input offset committed after the abort")
        assert app.state is State.RUNNING
    finally:
        assert app.close(30)
    assert app.exception is None
    assert injector.committed_at_abort == first
    restarts = listener.starts[PARTITIONS:]  # the first restores are of the empty changelogs at start-up
    assert sorted(tp[1] for tp, _, _ in restarts) == list(range(PARTITIONS)), listener.starts
    assert all(start == 0 and end > 0 for _, start, end in restarts), restarts
    assert all(offsets == first for offsets in committed_at_restores[PARTITIONS:]), committed_at_restores
    assert "wiped the local state of task" in caplog.text

    oracle = Oracle(bootstrap, source, skipped=injector.at)
    output = read_committed(bootstrap, sink, Serdes.Json())
    emitted = emissions(output)
    assert set(emitted) == set(oracle.key_of)
    duplicated = {po for po, counts in emitted.items() if len(counts) > 1}
    if hides_aborted_records(bootstrap):
        assert not duplicated
    else:  # the aborted transaction's outputs stay visible here: only records after the committed offsets, and
        # the re-processed copy carries the same count (the state was rolled back, not counted twice)
        assert all(po[1] >= first.get(po[0], 0) and len(set(emitted[po])) == 1 for po in duplicated), duplicated
        print(f"aborted outputs visible to read_committed on this broker: {len(duplicated)}")
    assert all(counts[-1] == oracle.rank[po] for po, counts in emitted.items())
    oracle.check_state(bootstrap, unique_name, output)


def test_a_fenced_instance_without_instance_name_rejoins_with_a_new_producer(
        bootstrap: str, unique_name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Without instance.name no other process shares the transactional id, so a fencing means the broker
    expired the producer (simulated here: a producer with the app's transactional id initializes). The
    thread closes its tasks dirty, wipes them, takes a new producer, rejoins the group, restores from
    changelog offset 0 and goes on; nothing is lost or output twice."""
    caplog.set_level(logging.INFO, logger="streaming")
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS})
    listener = RestoreStarts()
    app = KafkaStreams(counting.topology(source, sink), {
        "application.id": unique_name, "bootstrap.servers": bootstrap, "state.dir": str(tmp_path), **EOS})
    app.set_global_state_restore_listener(listener)
    app.start()
    try:
        first = produce(bootstrap, source, keyed(500), Serdes.String(), Serdes.String())
        wait_for(lambda: committed_offsets(bootstrap, unique_name, source, PARTITIONS) == first, 90,
                 "the first batch committed")
        [transactional_id] = re.findall(r"transactional producer '([^']+)' initialized", caplog.text)
        fencer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
        fencer.init_transactions(30)
        ends = produce(bootstrap, source, keyed(500, start=500), Serdes.String(), Serdes.String())
        wait_for(lambda: committed_offsets(bootstrap, unique_name, source, PARTITIONS) == ends, 90,
                 "every input offset committed after the fencing")
        assert app.state is State.RUNNING
    finally:
        assert app.close(30)
    assert app.exception is None
    assert "was fenced" in caplog.text and "takes a new producer and rejoins group" in caplog.text
    assert re.findall(r"transactional producer '([^']+)' initialized", caplog.text) == [transactional_id] * 2
    restarts = listener.starts[PARTITIONS:]
    assert sorted(tp[1] for tp, _, _ in restarts) == list(range(PARTITIONS)), listener.starts
    assert all(start == 0 and end > 0 for _, start, end in restarts), restarts
    check_exactly_once(bootstrap, unique_name, source, sink)


def test_restore_rebuilds_aborted_changelog_writes_on_a_broker_that_shows_them(
        bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    """Measures what docs/broker-limits.md says: a changelog record written in an ABORTED transaction is restored into
    the store by a broker that shows aborted records to read_committed readers (the embedded one), and
    not by one that hides them."""
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS})
    app_config = {"application.id": unique_name, "bootstrap.servers": bootstrap, "state.dir": str(tmp_path), **EOS}
    first = KafkaStreams(counting.topology(source, sink), app_config)
    first.start()  # creates the changelog topic
    try:
        wait_for(lambda: first.state is State.RUNNING, 60, "the app running")
    finally:
        assert first.close(30)
    writer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{unique_name}-writer"})
    writer.init_transactions(30)
    for key, outcome in (("committed-key", "commit"), ("aborted-key", "abort")):
        writer.begin_transaction()
        for partition in range(PARTITIONS):
            writer.produce(changelog_topic(unique_name, counting.STORE), Serdes.Long().serialize(999),
                           key.encode(), partition)
        writer.flush(10)
        writer.commit_transaction(30) if outcome == "commit" else writer.abort_transaction(30)
    listener = RestoreStarts()
    second = KafkaStreams(counting.topology(source, sink), app_config)
    second.cleanup()
    second.set_global_state_restore_listener(listener)
    second.start()
    try:
        wait_for(lambda: second.state is State.RUNNING and len(listener.starts) == PARTITIONS, 60, "restored")
        store = second.store(counting.STORE)
        values = {key: store.get(key) for key in ("committed-key", "aborted-key")}
    finally:
        assert second.close(30)
    hidden = hides_aborted_records(bootstrap)
    print(f"restored from a changelog with an aborted write: {values} (broker hides aborted records: {hidden})")
    assert values == {"committed-key": 999, "aborted-key": None if hidden else 999}


# -- worker processes --------------------------------------------------------------------------------------------
class Worker:
    """A ``brook worker run`` of the counting app under exactly_once_v2, with its own log and state directory."""

    def __init__(self, name: str, bootstrap: str, app_id: str, source: str, sink: str, directory: Path,
                 instance: str, slow_ms: int = 0, settings: dict[str, str] | None = None) -> None:
        self.name, self.log, self.state_dir = name, directory / f"{name}.log", directory / f"state-{name}"
        settings = {"bootstrap.servers": bootstrap, "application.id": app_id, "state.dir": str(self.state_dir),
                    "instance.name": instance, **EOS, **SESSION, **(settings or {})}
        with self.log.open("ab") as log:
            log.write(f"=== test: starting worker {name}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                [sys.executable, "-m", "streaming.cli.main", "worker", "run",
                 "tests.integration.workloads.counting:topology",
                 *(arg for key, value in settings.items() for arg in ("--set", f"{key}={value}"))],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONFAULTHANDLER": "1", "COUNT_INPUT": source,
                     "COUNT_OUTPUT": sink, "COUNT_SLOW_MS": str(slow_ms)})

    def text(self) -> str:
        return self.log.read_text(errors="replace").rsplit("=== test: starting worker", 1)[-1]

    def running(self) -> bool:
        states = STATE_CHANGE.findall(self.text())
        return bool(states) and states[-1] == "RUNNING"

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(f"worker {self.name} did not stop:\n{self.text()[-4000:]}") from None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@pytest.mark.slow
def test_a_zombie_instance_is_fenced_and_its_output_never_committed(bootstrap: str, unique_name: str,
                                                                    tmp_path: Path) -> None:
    """Worker A (instance.name=x) is SIGSTOPped; worker B starts with the same instance.name, so the same
    transactional id: its init_transactions fences A. B takes over and processes new input. A is continued
    while input keeps flowing: it finds its assignment lost (closing its tasks dirty and wiping them), rejoins
    the group with its old producer and, at its first send, is fenced: it closes its tasks dirty again,
    wipes their state and stops. None of its output is committed; the output and counts are exactly the
    oracle's."""
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS})
    first = produce(bootstrap, source, keyed(500), Serdes.String(), Serdes.String())
    a = Worker("a", bootstrap, unique_name, source, sink, tmp_path, instance="x")
    b: Worker | None = None
    try:
        wait_for(lambda: a.running() and committed_offsets(bootstrap, unique_name, source, PARTITIONS) == first, 90,
                 "worker A to commit the first batch")
        a.process.send_signal(signal.SIGSTOP)
        b = Worker("b", bootstrap, unique_name, source, sink, tmp_path, instance="x")
        wait_for(b.running, 90, "worker B to take over A's partitions")
        second = produce(bootstrap, source, keyed(500, start=500), Serdes.String(), Serdes.String())
        wait_for(lambda: committed_offsets(bootstrap, unique_name, source, PARTITIONS) == second, 90,
                 "worker B to commit the second batch")
        feeder = Feeder(bootstrap, source, rate=100, start=1000)
        a.process.send_signal(signal.SIGCONT)
        feeder.start()
        try:
            assert a.process.wait(120) == 1, a.text()[-4000:]
        finally:
            feeder.stopping.set()
            feeder.join(60)
        zombie = a.text()
        assert "was fenced" in zombie and "the thread stops" in zombie, zombie[-4000:]
        assert "wiped the local state of task" in zombie
        leftovers = [p for p in (a.state_dir / unique_name).glob("0_*") if any(p.iterdir())] \
            if (a.state_dir / unique_name).exists() else []
        assert not leftovers, f"A's task state was not wiped: {leftovers}"
        assert b.process.poll() is None, b.text()[-4000:]
        wait_for(lambda: committed_offsets(bootstrap, unique_name, source, PARTITIONS) == feeder.ends, 90,
                 "worker B to commit everything")
        assert b.stop() == 0, b.text()[-4000:]
    finally:
        a.process.send_signal(signal.SIGCONT)
        a.kill()
        if b is not None:
            b.kill()
    lost_first = 0 <= zombie.find("lost its partitions") < zombie.find("was fenced")
    print("zombie A: " + ("its assignment was lost first, then its producer was fenced" if lost_first
                          else "fenced while processing what arrived while it was stopped"))
    fenced_at = zombie[zombie.index("was fenced") - 300:zombie.index("was fenced") + 200]
    print(f"zombie A's fencing: ...{fenced_at}...")
    check_exactly_once(bootstrap, unique_name, source, sink)


class Feeder(threading.Thread):
    """Produces keyed records at ~``rate`` per second until stopped; ``ends``: end offsets once joined."""

    def __init__(self, bootstrap: str, topic: str, rate: int = 300, start: int = 0) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.rate, self.start_at = bootstrap, topic, rate, start
        self.stopping = threading.Event()
        self.ends: dict[int, int] = {}

    def run(self) -> None:
        produced = self.start_at
        while not self.stopping.is_set():
            for partition, end in produce(self.bootstrap, self.topic, keyed(self.rate // 10, start=produced),
                                          Serdes.String(), Serdes.String()).items():
                self.ends[partition] = max(self.ends.get(partition, 0), end)
            produced += self.rate // 10
            time.sleep(0.1)


# 4 ms a record in batches of 100 while 300 records/s arrive: the worker is always mid-batch, so the kill lands
# in a transaction whose outputs are on their way.
BUSY = {"consumer.max.poll.records": "100"}


@pytest.mark.slow
def test_a_worker_killed_mid_transaction_commits_nothing_and_its_restart_rereads_from_the_last_commit(
        bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    """SIGKILL mid-transaction: the group's committed offsets are those of the last committed transaction and
    do not move until the worker is back; the restart (same instance.name, so init_transactions aborts the
    transaction the dead one left open) restores its stores from changelog offset 0 (no checkpoint after a
    crash) and re-reads from the committed offsets. Everything before them was output exactly once."""
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS})
    feeder = Feeder(bootstrap, source)
    worker = Worker("w", bootstrap, unique_name, source, sink, tmp_path, instance="w", slow_ms=4, settings=BUSY)
    restarted: Worker | None = None
    try:
        feeder.start()
        wait_for(lambda: worker.running() and sum(committed_offsets(bootstrap, unique_name, source,
                                                                    PARTITIONS).values()) >= 600, 90,
                 "the worker to commit 600 records")
        worker.kill()
        at_kill = committed_offsets(bootstrap, unique_name, source, PARTITIONS)
        time.sleep(1.0)
        assert committed_offsets(bootstrap, unique_name, source, PARTITIONS) == at_kill
        restarted = Worker("w", bootstrap, unique_name, source, sink, tmp_path, instance="w", slow_ms=4, settings=BUSY)
        wait_for(restarted.running, 90, "the restarted worker to restore and run")
        feeder.stopping.set()
        feeder.join(60)
        wait_for(lambda: committed_offsets(bootstrap, unique_name, source, PARTITIONS) == feeder.ends, 120,
                 "every input offset committed")
        assert restarted.stop() == 0, restarted.text()[-4000:]
    finally:
        feeder.stopping.set()
        worker.kill()
        if restarted is not None:
            restarted.kill()
    restores = re.findall(r"restoring store 'counts' of task (\S+) from \S+\[(\d+)\] offsets (\d+)\.\.(\d+)",
                          restarted.text())
    assert restores and all(start == "0" for _, _, start, _ in restores), restores
    assert any(int(end) > 0 for *_, end in restores), restores

    account_for_an_abort(bootstrap, unique_name, source, sink, at_kill, "killed mid-transaction")


def account_for_an_abort(bootstrap: str, app_id: str, source: str, sink: str, committed: dict[int, int],
                         what: str) -> None:
    """After a transaction was aborted at ``committed`` (the group's offsets then): every input record is
    output; those before ``committed`` exactly once with their running count. A broker that hides aborted
    records shows no duplicate and the oracle's counts; on one that does not, every visible duplicate lies at
    or after ``committed`` (re-read from exactly there), and counts above the oracle's come only from
    aborted changelog writes that the restore replayed, at most one per aborted output of the key."""
    oracle = Oracle(bootstrap, source)
    output = read_committed(bootstrap, sink, Serdes.Json())
    emitted = emissions(output)
    assert set(emitted) == set(oracle.key_of)
    before = {po: counts for po, counts in emitted.items() if po[1] < committed.get(po[0], 0)}
    assert all(counts == [oracle.rank[po]] for po, counts in before.items()), "committed work was output twice"
    duplicated = {po for po, counts in emitted.items() if len(counts) > 1}
    if hides_aborted_records(bootstrap):
        assert not duplicated
        oracle.check_state(bootstrap, app_id, output)
        return
    assert all(po[1] >= committed.get(po[0], 0) for po in duplicated)
    assert any(po[1] == committed.get(po[0], 0) for po in duplicated) or not duplicated
    # The aborted transaction carried changelog writes only if it was cut during a commit, between the store
    # flush and the transaction's commit; restore then rebuilds them on this broker (docs/broker-limits.md).
    final = last_per_key(read_committed(bootstrap, changelog_topic(app_id, counting.STORE), Serdes.Long()))
    aborted = collections.Counter(oracle.key_of[po] for po in duplicated)
    excess = {key: final[key] - count for key, count in oracle.counts.items() if final[key] != count}
    assert all(0 < extra <= aborted[key] for key, extra in excess.items()), (excess, aborted)
    print(f"{what}: {len(duplicated)} aborted outputs visible, counts above the oracle for {len(excess)} keys "
          f"(aborted changelog writes restored)")


@pytest.mark.slow
def test_a_zombie_paused_mid_transaction_is_fenced_and_its_transaction_never_committed(
        bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    """As above, but A is SIGSTOPped mid-run, in a transaction with records on their way, while input keeps
    flowing. B's init_transactions aborts A's open transaction; the group's offsets stay where A's last
    committed transaction put them until B commits. When A is continued its next send or commit is fenced:
    it closes its tasks dirty, wipes them and stops. Nothing A did after its last commit is committed."""
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS})
    feeder = Feeder(bootstrap, source)
    a = Worker("a", bootstrap, unique_name, source, sink, tmp_path, instance="x", slow_ms=4, settings=BUSY)
    b: Worker | None = None
    try:
        feeder.start()
        wait_for(lambda: a.running() and sum(committed_offsets(bootstrap, unique_name, source,
                                                               PARTITIONS).values()) >= 600, 90,
                 "worker A to commit 600 records")
        a.process.send_signal(signal.SIGSTOP)
        at_stop = committed_offsets(bootstrap, unique_name, source, PARTITIONS)
        b = Worker("b", bootstrap, unique_name, source, sink, tmp_path, instance="x", slow_ms=4, settings=BUSY)
        wait_for(lambda: b.running() and sum(committed_offsets(bootstrap, unique_name, source, PARTITIONS).values())
                 >= sum(at_stop.values()) + 300, 90, "worker B to take over and commit 300 more records")
        a.process.send_signal(signal.SIGCONT)
        assert a.process.wait(120) == 1, a.text()[-4000:]
        zombie = a.text()
        assert "was fenced" in zombie and "the thread stops" in zombie, zombie[-4000:]
        assert "wiped the local state of task" in zombie
        feeder.stopping.set()
        feeder.join(60)
        wait_for(lambda: committed_offsets(bootstrap, unique_name, source, PARTITIONS) == feeder.ends, 120,
                 "worker B to commit everything")
        assert b.stop() == 0, b.text()[-4000:]
    finally:
        feeder.stopping.set()
        a.process.send_signal(signal.SIGCONT)
        a.kill()
        if b is not None:
            b.kill()
    print(f"zombie A paused mid-transaction: fenced during {re.findall(r'was fenced during ([a-z_ ]+):', zombie)}, "
          f"{'after' if 0 <= zombie.find('lost its partitions') < zombie.find('was fenced') else 'before'} finding "
          f"its assignment lost")
    account_for_an_abort(bootstrap, unique_name, source, sink, at_stop, "zombie paused mid-transaction")
