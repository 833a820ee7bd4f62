"""A clean close during a restore keeps what was restored (issue 16, item 9): SIGINT to a worker whose tasks
restore a long changelog writes each task's checkpoint at the offset its restore reached, and the next start
restores only the rest, ending with the changelog's state. As Kafka Streams, whose ``TaskManager`` calls
``postCommit(true)`` on every task it closes cleanly, and a RESTORING ``StreamTask`` (or a standby) writes
its checkpoint there, from the offsets ``ProcessorStateManager.restore`` recorded batch by batch."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import rocksdict
from prometheus_client.parser import text_string_to_metric_families

from streaming import KafkaStreams, Serdes, Stores, StreamsConfig
from streaming.admin import create_topics
from streaming.naming import changelog_topic
from streaming.runtime.changelog_reader import StoreChangelogReader
from streaming.runtime.kafka_streams import State
from streaming.runtime.memory_collector import MemoryRecordCollector
from streaming.runtime.task_manager import TaskManager
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import produce, read_topic, wait_for
from tests.integration.workloads import counting

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 2
UPDATES = 150_000
KEYS = 20_000
# Small batches and fetches make this changelog's restore take ~8 s instead of ~0.3 s (measured on the embedded
# broker), as a big changelog would: the signal lands mid-way.
SMALL_FETCH_CONFIG = {"consumer.message.max.bytes": 1000, "consumer.fetch.max.bytes": 1000,
                      "consumer.max.partition.fetch.bytes": 1000}
SMALL_FETCHES = [arg for key, value in SMALL_FETCH_CONFIG.items() for arg in ("--set", f"{key}={value}")]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def restored_records(port: int) -> float:
    """``brook_restored_records_total`` summed over the worker's changelog partitions (0 until it answers)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return 0
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == "brook_restored_records_total")


def start_worker(bootstrap: str, app_id: str, state_dir: Path, source: str, sink: str, log: Path,
                 metrics_port: int, *sets: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "streaming.cli.main", "worker", "run", "tests.integration.workloads.counting:topology",
         "--set", f"bootstrap.servers={bootstrap}", "--set", f"application.id={app_id}",
         "--set", f"state.dir={state_dir}", "--metrics-port", str(metrics_port), *sets],
        cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COUNT_INPUT": source, "COUNT_OUTPUT": sink})


def checkpoint_of(task_dir: Path) -> dict[tuple[str, int], int]:
    return {(e["topic"], e["partition"]): e["offset"] for e in json.loads((task_dir / ".checkpoint").read_text())}


def write_history(bootstrap: str, changelog: str) -> dict[int, int]:
    """The store's history: UPDATES updates of KEYS keys, in small batches; returns the changelog's ends."""
    updates = [GeneratedRecord(f"key-{i % KEYS:05d}", i, 1_700_000_000_000 + i) for i in range(UPDATES)]
    return produce(bootstrap, changelog, updates, Serdes.String(), Serdes.Long(), producer_config={"batch.size": 1024})


def latest_values(bootstrap: str, changelog: str) -> dict[int, dict[bytes, bytes]]:
    """Per changelog partition, the latest value of every key: what a complete restore holds."""
    latest: dict[int, dict[bytes, bytes]] = {p: {} for p in range(PARTITIONS)}
    for record in read_topic(bootstrap, changelog, Serdes.Bytes(), Serdes.Bytes(), PARTITIONS, timeout=60):
        latest[record.partition][record.key] = record.value
    return latest


def local_store(task_dir: Path) -> dict[bytes, bytes]:
    """The closed RocksDB store of a task directory, read as it is on disk."""
    db = rocksdict.Rdict(str(task_dir / counting.STORE), options=rocksdict.Options(raw_mode=True))
    try:
        return dict(db.items())
    finally:
        db.close()


class RestoreRecorder:
    """A state restore listener: where each changelog partition's restore started, and how far it got."""

    def __init__(self) -> None:
        self.starts: dict[tuple[str, int], int] = {}
        self.restored: dict[tuple[str, int], int] = {}
        self.reached: dict[tuple[str, int], int] = {}

    def on_restore_start(self, tp: tuple[str, int], store: str, start: int, end: int) -> None:
        self.starts[tp] = start

    def on_batch_restored(self, tp: tuple[str, int], store: str, batch_end: int, count: int) -> None:
        self.restored[tp] = self.restored.get(tp, 0) + count
        self.reached[tp] = batch_end

    def on_restore_end(self, tp: tuple[str, int], store: str, total: int) -> None:
        """Nothing to record: on_batch_restored saw every batch."""


@pytest.mark.slow
def test_sigint_during_a_restore_checkpoints_it_and_the_restart_restores_only_the_rest(
        bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    source, sink, changelog = f"{unique_name}-in", f"{unique_name}-out", changelog_topic(unique_name, counting.STORE)
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS, changelog: PARTITIONS})
    ends = write_history(bootstrap, changelog)
    state_dir, app_dir = tmp_path / "state", tmp_path / "state" / unique_name

    port = free_port()
    first = start_worker(bootstrap, unique_name, state_dir, source, sink, tmp_path / "first.log", port, *SMALL_FETCHES)
    try:
        wait_for(lambda: restored_records(port) >= UPDATES / 10, 60, "the restore to be under way")
        first.send_signal(signal.SIGINT)
        assert first.wait(60) == 0, (tmp_path / "first.log").read_text()
    finally:
        if first.poll() is None:
            first.kill()
    first_log = (tmp_path / "first.log").read_text()
    assert "closed while restoring" in first_log, first_log
    covered = {p: checkpoint_of(app_dir / f"0_{p}")[(changelog, p)] for p in range(PARTITIONS)}
    assert 0 < sum(covered.values()) < UPDATES, (covered, ends)  # interrupted mid-way, and not thrown away

    port = free_port()
    second = start_worker(bootstrap, unique_name, state_dir, source, sink, tmp_path / "second.log", port)
    try:
        wait_for(lambda: (tmp_path / "second.log").read_text().count("restored store 'counts'") == PARTITIONS, 120,
                 "the restart to finish restoring")
        second.send_signal(signal.SIGTERM)
        assert second.wait(60) == 0
    finally:
        if second.poll() is None:
            second.kill()
    second_log = (tmp_path / "second.log").read_text()
    for p in range(PARTITIONS):
        start, end = map(int, re.search(rf"restoring store 'counts' of task 0_{p} from \S+\[{p}\] offsets (\d+)\.\.(\d+)",
                                        second_log).groups())
        restored = int(re.search(rf"restored store 'counts' of task 0_{p}: (\d+) records", second_log).group(1))
        assert (start, end, restored) == (covered[p], ends[p], ends[p] - covered[p])

    # The final local state is the changelog's: the latest value of every key, partition by partition.
    latest = latest_values(bootstrap, changelog)
    for p in range(PARTITIONS):
        assert local_store(app_dir / f"0_{p}") == latest[p]


@pytest.mark.slow
def test_a_clean_close_under_exactly_once_checkpoints_a_restore_too(bootstrap: str, unique_name: str,
                                                                     tmp_path: Path) -> None:
    """Checkpoints under exactly-once are written only after the last transaction committed, for tasks that
    processed (their stores may hold writes of an open transaction). A restoring task processed nothing: its
    stores hold changelog records read with read_committed, so a clean close checkpoints them as Kafka Streams
    does (``StreamTask.postCommit`` writes a RESTORING task's checkpoint whether or not EOS is on)."""
    source, sink, changelog = f"{unique_name}-in", f"{unique_name}-out", changelog_topic(unique_name, counting.STORE)
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS, changelog: PARTITIONS})
    ends = write_history(bootstrap, changelog)
    config = {"application.id": unique_name, "bootstrap.servers": bootstrap, "state.dir": str(tmp_path),
              "processing.guarantee": "exactly_once_v2", "instance.name": "restorer"}
    first, restores = KafkaStreams(counting.topology(source, sink), {**config, **SMALL_FETCH_CONFIG}), RestoreRecorder()
    first.set_global_state_restore_listener(restores)
    first.start()
    try:
        wait_for(lambda: sum(restores.restored.values()) >= UPDATES / 10, 60, "the restore to be under way")
    finally:
        assert first.close(30)
    assert first.exception is None
    covered = {p: checkpoint_of(tmp_path / unique_name / f"0_{p}")[(changelog, p)] for p in range(PARTITIONS)}
    assert 0 < sum(covered.values()) < UPDATES, (covered, ends)

    second, restores = KafkaStreams(counting.topology(source, sink), config), RestoreRecorder()
    second.set_global_state_restore_listener(restores)
    second.start()
    try:
        wait_for(lambda: second.state is State.RUNNING, 60, "the restart to restore and run")
    finally:
        assert second.close(30)
    assert second.exception is None
    for p in range(PARTITIONS):
        tp = (changelog, p)
        assert (restores.starts[tp], restores.restored.get(tp, 0)) == (covered[p], ends[p] - covered[p])
    latest = latest_values(bootstrap, changelog)
    for p in range(PARTITIONS):
        assert local_store(tmp_path / unique_name / f"0_{p}") == latest[p]


def test_a_standby_closed_mid_restore_goes_on_from_where_it_stopped(bootstrap: str, unique_name: str,
                                                                    tmp_path: Path) -> None:
    """Standby tasks, driven through the TaskManager and a StoreChangelogReader on the broker without a group
    (so every task is a standby): a clean close while they are part-way through the changelog checkpoints
    their positions (Kafka Streams' ``StandbyTask.postCommit``), and the next standbys restore only the rest."""
    source, sink, changelog = f"{unique_name}-in", f"{unique_name}-out", changelog_topic(unique_name, counting.STORE)
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS, changelog: PARTITIONS})
    ends = write_history(bootstrap, changelog)
    config = StreamsConfig({"application.id": unique_name, "bootstrap.servers": bootstrap, "state.dir": str(tmp_path),
                            "num.standby.replicas": 1})

    def standbys(restores: RestoreRecorder) -> TaskManager:
        topology = counting.topology(source, sink).bind(unique_name)
        reader = StoreChangelogReader(config.consumer_config(), restores)
        manager = TaskManager(topology, config, MemoryRecordCollector(), lambda: 0, reader, {source: PARTITIONS})
        manager.maintain_standbys()  # no active task on this instance: a standby of each stateful task
        assert sorted(manager.standby) == [f"0_{p}" for p in range(PARTITIONS)]
        return manager

    def tail(manager: TaskManager, restores: RestoreRecorder, records: int) -> int:
        """One step of the standbys (as a stream thread's loop takes it); the records they restored so far."""
        manager.catch_up_standbys(records)
        return sum(restores.restored.values())

    restores = RestoreRecorder()
    manager = standbys(restores)
    wait_for(lambda: tail(manager, restores, 1_000) >= UPDATES / 10, 60, "the standbys to be part-way")
    manager.close_all(clean=True)  # as a stream thread's clean shutdown ends
    covered = {p: checkpoint_of(tmp_path / unique_name / f"0_{p}")[(changelog, p)] for p in range(PARTITIONS)}
    assert covered == {p: restores.reached.get((changelog, p), 0) for p in range(PARTITIONS)}
    assert 0 < sum(covered.values()) < UPDATES

    restores = RestoreRecorder()
    manager = standbys(restores)
    wait_for(lambda: tail(manager, restores, 10_000) == UPDATES - sum(covered.values()), 60, "the standbys to catch up")
    manager.close_all(clean=True)
    for p in range(PARTITIONS):
        tp = (changelog, p)
        assert (restores.starts[tp], restores.restored[tp]) == (covered[p], ends[p] - covered[p])
    latest = latest_values(bootstrap, changelog)
    for p in range(PARTITIONS):
        assert local_store(tmp_path / unique_name / f"0_{p}") == latest[p]


def test_a_store_that_finished_restoring_keeps_its_offset_while_its_task_waits_for_another(
        bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    """A task with two stores, closed while one is restored and the other is not: its checkpoint covers both,
    the finished one at its changelog's end (not only the stores still restoring)."""
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    counts, seen = changelog_topic(unique_name, counting.STORE), changelog_topic(unique_name, "seen")
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS, counts: PARTITIONS, seen: PARTITIONS})
    ends = write_history(bootstrap, counts)
    short = produce(bootstrap, seen, [GeneratedRecord(f"key-{i}", i, 1_700_000_000_000) for i in range(100)],
                    Serdes.String(), Serdes.Long())
    topology = counting.topology(source, sink).add_state_store(
        Stores.key_value_store_builder(Stores.persistent_key_value_store("seen"), Serdes.String(), Serdes.Long()),
        "count").bind(unique_name)
    config = StreamsConfig({"application.id": unique_name, "bootstrap.servers": bootstrap, "state.dir": str(tmp_path),
                            **SMALL_FETCH_CONFIG})  # both changelogs fetched a little at a time: the short one ends first
    restores = RestoreRecorder()
    manager = TaskManager(topology, config, MemoryRecordCollector(), lambda: 0,
                          StoreChangelogReader(config.consumer_config(), restores), {source: PARTITIONS})
    assert manager.assign([(source, 0)]) == [(source, 0)]  # restoring: not ready

    def step() -> bool:
        assert manager.restore(500, 0.05) == [], restores.reached  # the long store keeps the task restoring
        return (seen, 0) in restores.reached and restores.reached[(seen, 0)] == short[0]

    wait_for(step, 60, "the short changelog to be restored")
    manager.shutdown()
    checkpoint = checkpoint_of(tmp_path / unique_name / "0_0")
    assert checkpoint[(seen, 0)] == short[0]
    assert checkpoint[(counts, 0)] == restores.reached[(counts, 0)] < ends[0]
