"""Global tables: the driver updates global stores directly; processors read them (read-only) without
connecting them; the global state manager's checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from streaming import Materialized, ProcessingError, Serdes, StreamsBuilder, StreamsError, TopologyError
from streaming.config import StreamsConfig
from streaming.processor import Processor, Record
from streaming.runtime.global_state import GlobalStateManager
from streaming.testing import TopologyTestDriver

APP = "global-test"
CONFIG = {"application.id": APP}
String, Json = Serdes.String(), Serdes.Json()


class Enrich(Processor):
    """Adds the user's region from the global store "users" to each order."""

    def init(self, context: Any) -> None:
        super().init(context)
        self.users = context.get_state_store("users")

    def process(self, record: Record) -> None:
        user = self.users.get(record.key)
        self.context.forward(record.with_value({**record.value, "region": None if user is None else user["region"]}))


def enrich_topology(store_type: str = "rocksdb") -> StreamsBuilder:
    builder = StreamsBuilder()
    users = builder.global_table("users", key_serde=String, value_serde=Json,
                                 materialized=Materialized.as_("users").with_store_type(store_type))
    assert users.queryable_store_name == "users"
    builder.stream("orders", key_serde=String, value_serde=Json).process(Enrich).to("enriched")
    return builder


@pytest.mark.parametrize("store_type", ["rocksdb", "in_memory"])
def test_piping_into_a_global_topic_updates_the_store_that_processors_read(store_type: str) -> None:
    with TopologyTestDriver(enrich_topology(store_type).build(), CONFIG) as driver:
        users = driver.create_input_topic("users", String, Json)
        orders = driver.create_input_topic("orders", String, Json)
        out = driver.create_output_topic("enriched", String, Json)
        users.pipe_input("ada", {"region": "eu"})
        users.pipe_input("bob", {"region": "us"})
        orders.pipe_input("ada", {"id": 1})
        users.pipe_input("ada", {"region": "apac"})
        orders.pipe_input("ada", {"id": 2})
        users.pipe_input("bob", None)  # a tombstone deletes
        orders.pipe_input("bob", {"id": 3})
        users.pipe_input(None, {"region": "eu"})  # no key: skipped, counted
        assert out.read_values_to_list() == [{"id": 1, "region": "eu"}, {"id": 2, "region": "apac"},
                                             {"id": 3, "region": None}]
        store = driver.get_key_value_store("users")
        assert dict(store.all()) == {"ada": {"region": "apac"}}
        assert store.persistent is (store_type == "rocksdb")
        assert driver.metrics()["dropped_records"] == 1
        assert not any("changelog" in topic for topic in driver.produced_topic_names)  # the topic is the changelog


def test_global_stores_are_read_only() -> None:
    class Writer(Processor):
        def process(self, record: Record) -> None:
            self.context.get_state_store("users").put(record.key, record.value)

    builder = StreamsBuilder()
    builder.global_table("users", materialized="users")
    builder.stream("orders").process(Writer)
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        with pytest.raises(ProcessingError, match="global store 'users' is read-only.*produce to that topic"):
            driver.create_input_topic("orders").pipe_input("ada", {})
        store = driver.get_key_value_store("users")
        for write in (lambda: store.put("a", 1), lambda: store.delete("a"), lambda: store.put_if_absent("a", 1),
                      lambda: store.put_all([("a", 1)])):
            with pytest.raises(StreamsError, match="read-only"):
                write()


def test_a_sink_writing_to_a_global_topic_updates_the_global_store() -> None:
    builder = StreamsBuilder()
    builder.global_table("latest", materialized="latest")
    builder.stream("in").to("latest")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        driver.create_input_topic("in").pipe_input("k", {"v": 1})
        assert driver.get_key_value_store("latest").get("k") == {"v": 1}


def test_a_topology_of_global_tables_only() -> None:
    builder = StreamsBuilder()
    builder.global_table("items", materialized=Materialized.as_("items").with_store_type("in_memory"))
    topology = builder.build()
    assert topology.subtopologies() == []
    with TopologyTestDriver(topology, CONFIG) as driver:
        driver.create_input_topic("items").pipe_input("i1", {"price": 3})
        assert driver.get_key_value_store("items").get("i1") == {"price": 3}
        assert set(driver.get_all_state_stores()) == {"items"}


def test_describe_shows_global_stores_as_kafka_streams_does() -> None:
    builder = StreamsBuilder()
    builder.global_table("users")
    builder.stream("orders").to("out")
    text = str(builder.build().describe())
    assert text.endswith(
        "   Sub-topology: 1 for global store (will not generate tasks)\n"
        "    Source: KSTREAM-SOURCE-0000000001 (topics: [users])\n"
        "      --> KTABLE-SOURCE-0000000002\n"
        "    Processor: KTABLE-SOURCE-0000000002 (stores: [users-STATE-STORE-0000000000])\n"
        "      <-- KSTREAM-SOURCE-0000000001\n")


def test_global_stores_have_no_changelog_or_cache_whatever_materialized_says() -> None:
    builder = StreamsBuilder()
    builder.global_table("users", materialized=Materialized.as_("users").with_logging_enabled({"x": "y"}))
    topology = builder.build()
    store = topology.global_stores["users"].store_builder
    assert not store.logging_enabled and not store.caching_enabled
    assert topology.store_builders == {}  # not a task store: no changelog topic is created for it


def test_a_topic_is_read_by_one_source_only() -> None:
    builder = StreamsBuilder()
    builder.stream("users")
    with pytest.raises(TopologyError, match="'users' is already read by source"):
        builder.global_table("users")
    builder = StreamsBuilder()
    builder.global_table("users", materialized="u")
    with pytest.raises(TopologyError, match="'users' already feeds global store 'u'"):
        builder.stream("users")
    with pytest.raises(TopologyError, match="'users' already feeds global store 'u'"):
        builder.global_table("users")


def test_global_and_task_store_names_share_one_namespace() -> None:
    builder = StreamsBuilder()
    builder.global_table("users", materialized="s")
    with pytest.raises(TopologyError, match="state store 's' is already added"):
        builder.stream("in").group_by_key().count(materialized="s")


def test_processors_still_need_to_connect_task_stores() -> None:
    class Reader(Processor):
        def process(self, record: Record) -> None:
            self.context.get_state_store("counts")

    builder = StreamsBuilder()
    builder.stream("a").group_by_key().count(materialized="counts")
    builder.stream("b").process(Reader)
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        with pytest.raises(ProcessingError, match="has no access to state store 'counts'"):
            driver.create_input_topic("b").pipe_input("k", {})


# -- the global checkpoint ---------------------------------------------------------------------------------

def global_state(tmp_path: Path, store_type: str) -> GlobalStateManager:
    builder = StreamsBuilder()
    builder.global_table("users", materialized=Materialized.as_("users").with_store_type(store_type))
    config = StreamsConfig({"application.id": APP, "state.dir": str(tmp_path)}, require_bootstrap=False)
    return GlobalStateManager(builder.build(), config)


def test_a_clean_close_lets_a_persistent_global_store_resume_from_its_checkpoint(tmp_path: Path) -> None:
    state = global_state(tmp_path, "rocksdb")
    assert state.open() == {}
    state.update("users", [(b"ada", b'{"r":"eu"}', 1), (b"bob", b'{"r":"us"}', 2), (b"bob", None, 3)])
    state.write_checkpoint({("users", 0): 3, ("users", 1): 0})
    state.close()

    reopened = global_state(tmp_path, "rocksdb")
    assert reopened.open() == {("users", 0): 3, ("users", 1): 0}
    assert dict(reopened.views["users"].all()) == {"ada": {"r": "eu"}}
    reopened.close()

    crashed = global_state(tmp_path, "rocksdb")  # the checkpoint was consumed by the last open: none now
    assert crashed.open() == {}
    assert dict(crashed.views["users"].all()) == {}  # wiped, to be rebuilt from the topic
    crashed.close()


def test_an_in_memory_global_store_always_rebuilds_from_the_start(tmp_path: Path) -> None:
    state = global_state(tmp_path, "in_memory")
    state.open()
    state.update("users", [(b"ada", b"{}", 1)])
    state.write_checkpoint({("users", 0): 1})
    state.close()
    reopened = global_state(tmp_path, "in_memory")
    assert reopened.open() == {}
    reopened.close()


def test_a_timestamped_global_store_keeps_the_records_timestamps() -> None:
    """A global store may keep timestamps (Processor API): its topic's record timestamps become the values'."""
    from streaming import Stores, Topology

    builder = Stores.timestamped_key_value_store_builder(Stores.in_memory_key_value_store("prices"), String, Json)
    topology = (Topology().add_global_store(builder, "prices", source_name="prices-source",
                                            processor_name="prices-update")
                .add_source("in", "orders").add_sink("out", "copy", "in"))
    with TopologyTestDriver(topology, CONFIG) as driver:
        driver.create_input_topic("prices", String, Json).pipe_input("p1", {"eur": 3}, timestamp=1234)
        view = driver.get_state_store("prices")
        assert view.get("p1") == {"eur": 3}
        assert view.get_with_timestamp("p1") == ({"eur": 3}, 1234)
