"""TaskManager's revocation life cycle: revoked tasks are committed and suspended, resumed without a restore
when the next assignment gives them back, and closed (directory released) when it does not.

The tasks run a real RocksDB store without a changelog, so no broker is needed; the producer is the test
driver's (it records commits).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from streaming import Serdes, Stores, StreamsConfig, Topology
from streaming.processor import Processor, ProcessorContext, Record
from streaming.runtime.changelog_reader import StoreChangelogReader
from streaming.runtime.memory_collector import MemoryRecordCollector
from streaming.runtime.state_directory import StateDirectory
from streaming.runtime.task_manager import TaskManager

TOPIC = "input"


class Recorder(Processor[str, str]):
    def __init__(self, events: list[tuple[str, str]]) -> None:
        self.events = events

    def init(self, context: ProcessorContext) -> None:
        self.task_id = context.task_id
        self.events.append(("init", self.task_id))

    def process(self, record: Record[str, str]) -> None:
        """Nothing: the test drives the tasks' life cycle, not their input."""

    def close(self) -> None:
        self.events.append(("close", self.task_id))


class RefusingProducer:
    """A producer whose offset commits the group refuses (it moved on)."""

    def begin(self) -> None:
        """Nothing to begin."""

    def commit(self, offsets: list[TopicPartition]) -> bool:
        return False


@pytest.fixture
def events() -> list[tuple[str, str]]:
    return []


@pytest.fixture
def directory() -> StateDirectory:
    return StateDirectory()


def manager_for(tmp_path: Path, events: list[tuple[str, str]], directory: StateDirectory,
                collector: Any = None) -> TaskManager:
    topology = (
        Topology()
        .add_source("in", TOPIC, key_serde=Serdes.String(), value_serde=Serdes.String())
        .add_processor("record", lambda: Recorder(events), "in")
        .add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store("kept"), Serdes.String(),
                                                        Serdes.Long()).with_logging_disabled(), "record")
    )
    config = StreamsConfig({"application.id": "suspension", "bootstrap.servers": "127.0.0.1:1",
                            "state.dir": str(tmp_path)})
    reader = StoreChangelogReader(config.consumer_config(), None)
    return TaskManager(topology, config, collector or MemoryRecordCollector(), lambda: 0, reader, directory=directory)


def test_a_revoked_task_is_committed_and_suspended_then_resumed_with_its_store_when_it_comes_back(
        tmp_path: Path, events: list[tuple[str, str]], directory: StateDirectory) -> None:
    collector = MemoryRecordCollector()
    manager = manager_for(tmp_path, events, directory, collector)
    assert manager.assign([(TOPIC, 0), (TOPIC, 1)]) == []
    first, second = manager.tasks["0_0"], manager.tasks["0_1"]
    first.stores["kept"].put("k", 7)
    first.consumed[(TOPIC, 0)] = 42  # processed up to offset 41
    events.clear()

    assert manager.revoke([(TOPIC, 0), (TOPIC, 1)]) == []
    assert manager.tasks == {} and manager.task_of == {}
    assert set(manager.suspended) == {"0_0", "0_1"}
    assert sorted(events) == [("close", "0_0"), ("close", "0_1")]  # processors closed
    assert collector.producer.committed == {(TOPIC, 0): 42}  # committed before suspension
    assert first.stores["kept"].is_open and second.stores["kept"].is_open
    other_thread = object()
    assert not directory.lock_active("0_0", other_thread)  # directories still held by the suspended tasks
    events.clear()

    assert manager.assign([(TOPIC, 0)]) == []  # resumed: ready at once, nothing to restore
    assert manager.tasks == {"0_0": first} and manager.task_of == {(TOPIC, 0): first}
    assert first.initialized and first.stores["kept"].get("k") == 7
    assert events == [("init", "0_0")]
    # The task not given back was closed once the assignment was done, and its directory released.
    assert manager.suspended == {}
    assert not second.stores["kept"].is_open
    assert directory.lock_active("0_1", other_thread)
    assert not directory.lock_active("0_0", other_thread)


def test_a_task_coming_back_with_other_partitions_is_rebuilt(
        tmp_path: Path, events: list[tuple[str, str]], directory: StateDirectory) -> None:
    manager = manager_for(tmp_path, events, directory)
    manager.assign([(TOPIC, 0)])
    first = manager.tasks["0_0"]
    manager.revoke([(TOPIC, 0)])
    manager.assign([(TOPIC, 1)])
    assert set(manager.tasks) == {"0_1"} and manager.suspended == {}
    assert not first.stores["kept"].is_open
    manager.revoke([(TOPIC, 1)])
    manager.assign([(TOPIC, 0), (TOPIC, 1)])  # 0_1 resumed, 0_0 new
    assert set(manager.tasks) == {"0_0", "0_1"} and manager.tasks["0_0"] is not first


def test_a_refused_commit_on_revocation_closes_the_tasks_dirty(
        tmp_path: Path, events: list[tuple[str, str]], directory: StateDirectory) -> None:
    collector = MemoryRecordCollector()
    collector.producer = RefusingProducer()  # type: ignore[assignment]
    manager = manager_for(tmp_path, events, directory, collector)
    manager.assign([(TOPIC, 0)])
    task = manager.tasks["0_0"]
    task.consumed[(TOPIC, 0)] = 10
    manager.revoke([(TOPIC, 0)])
    assert manager.tasks == {} and manager.suspended == {}
    assert not task.stores["kept"].is_open
    assert directory.lock_active("0_0", object())


@pytest.mark.parametrize("clean", [True, False])
def test_stopping_closes_suspended_tasks(tmp_path: Path, events: list[tuple[str, str]], directory: StateDirectory,
                                         clean: bool) -> None:
    manager = manager_for(tmp_path, events, directory)
    manager.assign([(TOPIC, 0)])
    task = manager.tasks["0_0"]
    manager.revoke([(TOPIC, 0)])
    if clean:
        manager.shutdown()
    else:
        manager.close_all(clean=False)
    assert manager.suspended == {}
    assert not task.stores["kept"].is_open
    assert directory.lock_active("0_0", object())


class ChangelogEnds(StoreChangelogReader):
    """The real reader, except that the changelogs' end offsets are the test's (a broker would be needed)."""

    def __init__(self, consumer_config: dict[str, Any], ends: dict[tuple[str, int], int]) -> None:
        super().__init__(consumer_config, None)
        self.ends = ends

    def end_offsets(self, tps: list[tuple[str, int]], timeout: float = 10.0) -> dict[tuple[str, int], int]:
        return {tp: self.ends[tp] for tp in tps}


def test_a_suspended_task_whose_changelog_moved_on_meanwhile_is_not_resumed(
        tmp_path: Path, events: list[tuple[str, str]], directory: StateDirectory) -> None:
    manager = manager_for(tmp_path, events, directory)
    changelog = ("suspension-kept-changelog", 0)
    ends: dict[tuple[str, int], int] = {}
    manager._reader = ChangelogEnds(manager._config.consumer_config(), ends)
    manager.assign([(TOPIC, 0)])
    first = manager.tasks["0_0"]
    manager.revoke([(TOPIC, 0)])
    # What a logged store notes at suspension: its changelog ended at 5 (this store has no changelog itself).
    manager._suspended_ends["0_0"] = {changelog: 5}
    ends[changelog] = 9  # another member owned the task in between and wrote 4 records

    manager.assign([(TOPIC, 0)])
    assert manager.tasks["0_0"] is not first and not first.stores["kept"].is_open
    assert manager.suspended == {}


def test_a_task_that_loses_or_gains_one_of_its_partitions_is_rebuilt_committed(
        tmp_path: Path, events: list[tuple[str, str]], directory: StateDirectory) -> None:
    """Incremental (cooperative) assignments can take one partition of a two-topic task or give it back."""
    collector = MemoryRecordCollector()
    other = "other-input"
    topology = (
        Topology()
        .add_source("in", TOPIC, other, key_serde=Serdes.String(), value_serde=Serdes.String())
        .add_processor("record", lambda: Recorder(events), "in")
    )
    config = StreamsConfig({"application.id": "suspension", "bootstrap.servers": "127.0.0.1:1",
                            "state.dir": str(tmp_path)})
    manager = TaskManager(topology, config, collector, lambda: 0,
                          StoreChangelogReader(config.consumer_config(), None), directory=directory)
    manager.assign([(TOPIC, 0), (other, 0)])
    whole = manager.tasks["0_0"]
    whole.consumed[(other, 0)] = 3

    assert manager.revoke([(other, 0)]) == []  # the rest is rebuilt at once (no store to restore: ready)
    half = manager.tasks["0_0"]
    assert half.partitions == [(TOPIC, 0)] and manager.task_of == {(TOPIC, 0): half}
    assert collector.producer.committed == {(other, 0): 3} and manager.suspended == {}
    half.consumed[(TOPIC, 0)] = 8

    manager.assign([(other, 0)])
    rebuilt = manager.tasks["0_0"]
    assert rebuilt is not half and sorted(rebuilt.partitions) == sorted([(other, 0), (TOPIC, 0)])
    assert collector.producer.committed == {(other, 0): 3, (TOPIC, 0): 8}  # committed before the rebuild
