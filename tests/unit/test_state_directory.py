"""Store names and application ids are checked where they are made, and the runtime never deletes
anything outside ``state.dir/<application.id>/`` (issue 6, item 3)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streaming import ConfigError, Materialized, Serdes, Stores, StreamsBuilder, StreamsConfig, Topology, TopologyError
from streaming.errors import StreamsError
from streaming.processor import Processor, Record
from streaming.runtime.state_directory import remove_path
from streaming.runtime.state_manager import ProcessorStateManager
from streaming.state.stores import StoreBuilder
from streaming.testing import TopologyTestDriver
from streaming.topic_generations import TopicGenerations

BAD_NAMES = ["../../../victim", "a/b", "", ".", "..", "a\\b", "x" * 201, "white space", None]


class Counter(Processor):
    def init(self, context) -> None:
        self.store = context.get_state_store("counts")

    def process(self, record: Record) -> None:
        self.store.put(record.key, (self.store.get(record.key) or 0) + 1)


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_store_names_are_refused_where_the_store_is_made(name: object) -> None:
    with pytest.raises(TopologyError, match="store name"):
        Stores.persistent_key_value_store(name)  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="store name"):
        Stores.in_memory_key_value_store(name)  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="store name"):
        Materialized.as_(name)  # type: ignore[arg-type]
    if name is not None:  # materialized=None means "an unnamed store"
        with pytest.raises(TopologyError, match="store name"):
            StreamsBuilder().stream("in").group_by_key().count(materialized=name)  # type: ignore[arg-type]


def test_a_builder_renamed_after_creation_is_refused_when_added() -> None:
    builder = Stores.key_value_store_builder(Stores.persistent_key_value_store("ok"), Serdes.String(), Serdes.Long())
    builder.name = "../escape"
    topology = Topology().add_source("src", "in").add_processor("count", Counter, "src")
    with pytest.raises(TopologyError, match="'../escape'"):
        topology.add_state_store(builder, "count")
    with pytest.raises(TopologyError, match="'../escape'"):
        Topology().add_global_store(builder, "t", source_name="s", processor_name="p")


def test_custom_store_builders_check_their_name() -> None:
    with pytest.raises(TopologyError, match="store name"):
        StoreBuilder("../x")


@pytest.mark.parametrize("app_id", ["..", ".", "a/b", "", "../x"])
def test_bad_application_ids_are_refused(app_id: str) -> None:
    with pytest.raises(ConfigError, match="application.id"):
        StreamsConfig({"application.id": app_id, "bootstrap.servers": "x:1"})


def test_remove_path_refuses_anything_outside_its_root(tmp_path: Path) -> None:
    root = tmp_path / "state" / "app"
    (root / "0_0" / "store").mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep me")
    for path in [victim, root / ".." / ".." / "victim", root, root / ".."]:
        with pytest.raises(StreamsError, match="refusing to delete"):
            remove_path(str(path), inside=str(root))
    link = root / "0_0" / "link"
    os.symlink(victim, link)
    with pytest.raises(StreamsError, match="refusing to delete"):  # resolves outside: refused
        remove_path(str(link / "precious"), inside=str(root))
    assert (victim / "precious").read_text() == "keep me"
    remove_path(str(root / "0_0" / "store"), inside=str(root))
    assert not (root / "0_0" / "store").exists()


def test_a_store_directory_linked_outside_is_never_wiped(tmp_path: Path) -> None:
    """A task without a checkpoint wipes its persistent stores' directories: never through a link that
    leads outside the application's directory."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep me")
    task_dir = tmp_path / "state" / "app" / "0_0"
    task_dir.mkdir(parents=True)
    os.symlink(victim, task_dir / "counts")
    manager = ProcessorStateManager(str(tmp_path / "state"), "app", "0_0", 0, TopicGenerations())
    with pytest.raises(StreamsError, match="refusing to delete"):
        manager.prepare_store_dir("counts", persistent=True, logged=True)
    assert (victim / "precious").read_text() == "keep me"


def test_the_driver_keeps_state_inside_its_directory(tmp_path: Path) -> None:
    """End to end: a RocksDB store runs, closes and reopens (wiped: no checkpoint) under state.dir only."""
    state_dir = tmp_path / "state"
    topology = (Topology().add_source("src", "in", key_serde=Serdes.String(), value_serde=Serdes.String())
                .add_processor("count", Counter, "src")
                .add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"),
                                                                Serdes.String(), Serdes.Long()), "count"))
    for _ in range(2):
        with TopologyTestDriver(topology, {"application.id": "app", "state.dir": str(state_dir)}) as driver:
            driver.create_input_topic("in", Serdes.String(), Serdes.String()).pipe_input("k", "v", timestamp=1)
            assert driver.get_key_value_store("counts").get("k") == 1
    assert os.listdir(tmp_path) == ["state"]
    assert os.listdir(state_dir) == ["app"]
