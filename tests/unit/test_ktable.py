"""KTables through the driver: table sources and tombstones, filter/map_values/to_stream, caching, and
group_by with count/reduce/aggregate where rows move between groups (checked at every step)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from streaming import KTable, Materialized, Serdes, StreamsBuilder
from streaming.dsl.change import decode_change, encode_change
from streaming.testing import TopologyTestDriver
from streaming.testing.generators import REGIONS

APP = "ktable-test"
CONFIG = {"application.id": APP}
CACHING = pytest.mark.parametrize("caching", [True, False], ids=["cached", "uncached"])
String, Json, Long = Serdes.String(), Serdes.Json(), Serdes.Long()


def options(name: str, caching: bool, store_type: str = "in_memory") -> Materialized:
    materialized = Materialized.as_(name).with_store_type(store_type)
    return materialized if caching else materialized.with_caching_disabled()


def run_table(build: Any, updates: list[tuple[Any, Any]], value_serde: Any = Long) -> tuple[list[Any], Any]:
    """Build ``build(table) -> KTable`` on a Long-valued table of topic "in", pipe ``updates``, and return
    the ``to_stream()`` output and the driver's metrics."""
    builder = StreamsBuilder()
    build(builder.table("in", key_serde=String, value_serde=Long, materialized="t")).to_stream().to(
        "out", value_serde=value_serde)
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inp = driver.create_input_topic("in", String, Long)
        for key, value in updates:
            inp.pipe_input(key, value)
        return driver.create_output_topic("out", String, value_serde).read_key_values(), driver.metrics()


# -- table sources -------------------------------------------------------------------------------------------------

@CACHING
def test_table_updates_keys_and_a_tombstone_deletes_and_forwards_a_delete(caching: bool) -> None:
    builder = StreamsBuilder()
    table = builder.table("in", key_serde=String, value_serde=Long, materialized=options("t", caching, "rocksdb"))
    table.to_stream().to("out", value_serde=Long)
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inp = driver.create_input_topic("in", String, Long)
        for key, value in [("a", 1), ("b", 2), ("a", 3), ("a", None), ("c", None), (None, 5), ("b", 4)]:
            inp.pipe_input(key, value)
        out = driver.create_output_topic("out", String, Long)
        # ("c", None): a tombstone for a key the table never had changes nothing; (None, 5) is skipped.
        assert out.read_key_values() == [("a", 1), ("b", 2), ("a", 3), ("a", None), ("b", 4)]
        assert dict(driver.get_key_value_store("t").all()) == {"b": 4}
        assert driver.metrics()["dropped_records"] == 1
        changelog = driver.create_output_topic(f"{APP}-t-changelog", String, Long).read_key_values()
        assert changelog == [("a", 1), ("b", 2), ("a", 3), ("a", None), ("b", 4)]


def test_an_unnamed_table_gets_kafka_streams_names_and_a_changelog() -> None:
    builder = StreamsBuilder()
    table = builder.table("users")
    assert table.queryable_store_name == "users-STATE-STORE-0000000000"
    assert table.node_name == "KTABLE-SOURCE-0000000002"
    topology = builder.build()
    assert [n.name for n in topology.subtopologies()[0].nodes] == ["KSTREAM-SOURCE-0000000001",
                                                                   "KTABLE-SOURCE-0000000002"]
    with TopologyTestDriver(topology, CONFIG) as driver:
        driver.create_input_topic("users").pipe_input("u1", {"name": "Ada"})
        assert driver.get_key_value_store("users-STATE-STORE-0000000000").get("u1") == {"name": "Ada"}
        assert f"{APP}-users-STATE-STORE-0000000000-changelog" in driver.produced_topic_names


@CACHING
def test_caching_forwards_one_update_per_key_per_commit(caching: bool) -> None:
    builder = StreamsBuilder()
    (builder.stream("in", value_serde=Long).flat_map_values(lambda v: [v, v + 1, v + 2])
     .to_table(options("t", caching)).to_stream().to("out", value_serde=Long))
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inp = driver.create_input_topic("in", String, Long)
        inp.pipe_input("a", 10)
        inp.pipe_input("a", 20)
        values = driver.create_output_topic("out", String, Long).read_values_to_list()
    assert values == ([12, 22] if caching else [10, 11, 12, 20, 21, 22])


# -- filter, map_values ----------------------------------------------------------------------------------------------

UPDATES = [("a", 5), ("a", 20), ("a", 30), ("a", 1), ("a", 2), ("a", None), ("b", 50), ("b", None), ("c", 99),
           ("c", 15)]


def test_filter_forwards_a_delete_for_every_update_that_does_not_pass() -> None:
    """Kafka Streams' KTableFilter without old values: each update forwards its value or a delete."""
    out, _ = run_table(lambda t: t.filter(lambda k, v: v > 10), UPDATES)
    assert out == [("a", None), ("a", 20), ("a", 30), ("a", None), ("a", None), ("a", None), ("b", 50), ("b", None),
                   ("c", 99), ("c", 15)]


def test_filter_tombstones_as_in_kafka_streams() -> None:
    """Issue 6, item 8: inputs 1, 7, 2 with ``v > 5`` give (a, None), (a, 7), (a, None)."""
    out, _ = run_table(lambda t: t.filter(lambda k, v: v > 5), [("a", 1), ("a", 7), ("a", 2)])
    assert out == [("a", None), ("a", 7), ("a", None)]


def test_filter_with_old_values_skips_updates_that_neither_pass_nor_replace_a_passing_value() -> None:
    """When a later operation needs old values (group_by), an update whose new and old values both fail
    forwards nothing; one that stops passing is subtracted from its group."""
    builder = StreamsBuilder()
    (builder.table("in", key_serde=String, value_serde=Long, materialized="t")
     .filter(lambda k, v: v > 5)
     .group_by(lambda k, v: ("all", v), key_serde=String, value_serde=Long)
     .count(materialized="passing").to_stream().to("out", value_serde=Long))
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inp = driver.create_input_topic("in", String, Long)
        for key, value in [("a", 1), ("a", 7), ("a", 2), ("b", 9), ("b", 3), ("c", 1)]:
            inp.pipe_input(key, value)
        assert driver.create_output_topic("out", String, Long).read_values_to_list() == [1, 0, 1, 0]
        assert driver.get_key_value_store("passing").get("all") == 0


def test_filter_not_is_the_complement() -> None:
    out, _ = run_table(lambda t: t.filter_not(lambda k, v: v > 10), UPDATES)
    assert out == [("a", 5), ("a", None), ("a", None), ("a", 1), ("a", 2), ("a", None), ("b", None), ("b", None),
                   ("c", None), ("c", None)]


def test_filter_with_a_truthy_non_bool_predicate() -> None:
    out, _ = run_table(lambda t: t.filter(lambda k, v: v % 2), [("a", 3), ("a", 4), ("a", 5)])
    assert out == [("a", 3), ("a", None), ("a", 5)]


def test_map_values_maps_updates_and_keeps_deletes() -> None:
    out, _ = run_table(lambda t: t.map_values(lambda v: v * 10), [("a", 1), ("a", 2), ("a", None)])
    assert out == [("a", 10), ("a", 20), ("a", None)]
    out, _ = run_table(lambda t: t.map_values(lambda k, v: f"{k}:{v}"), [("a", 1), ("a", None)], String)
    assert out == [("a", "a:1"), ("a", None)]


def test_chained_filter_and_map_values() -> None:
    out, _ = run_table(lambda t: t.map_values(lambda v: v * 2).filter(lambda k, v: v > 10).map_values(lambda v: v + 1),
                       [("a", 3), ("a", 6), ("a", 4), ("b", 100)])
    assert out == [("a", None), ("a", 13), ("a", None), ("b", 201)]


def test_table_operations_return_tables_without_their_own_store() -> None:
    builder = StreamsBuilder()
    table = builder.table("in", materialized="t")
    derived = table.filter(lambda k, v: True)
    assert isinstance(derived, KTable) and derived.queryable_store_name is None
    assert table.queryable_store_name == "t"
    assert derived.node_name == "KTABLE-FILTER-0000000002"


# -- group_by: rows moving between groups -------------------------------------------------------------------------

def user_updates(count: int, users: int, seed: int) -> list[tuple[str, dict[str, Any] | None]]:
    """Users changing region (and age) over time; about 10% of updates delete the user."""
    rng = random.Random(seed)
    updates: list[tuple[str, dict[str, Any] | None]] = []
    for _ in range(count):
        user = f"user-{rng.randrange(users):03d}"
        if rng.random() < 0.1:
            updates.append((user, None))
        else:
            updates.append((user, {"name": user.upper(), "region": rng.choice(REGIONS), "age": rng.randrange(18, 90)}))
    return updates


class RegionOracle:
    """What the per-region tables must hold: count, sum of ages and the sorted names of each region's
    users. A region keeps its entry (a count of 0) once every user left it, as in Kafka Streams."""

    def __init__(self) -> None:
        self.users: dict[str, dict[str, Any]] = {}
        self.regions: set[str] = set()

    def apply(self, user: str, value: dict[str, Any] | None) -> None:
        if value is None:
            self.users.pop(user, None)
        else:
            self.users[user] = value
            self.regions.add(value["region"])

    def counts(self) -> dict[str, int]:
        return {r: sum(1 for v in self.users.values() if v["region"] == r) for r in self.regions}

    def ages(self) -> dict[str, int]:
        return {r: sum(v["age"] for v in self.users.values() if v["region"] == r) for r in self.regions}

    def names(self) -> dict[str, list[str]]:
        return {r: sorted(v["name"] for v in self.users.values() if v["region"] == r) for r in self.regions}


def build_region_tables(caching: bool, store_type: str) -> StreamsBuilder:
    builder = StreamsBuilder()
    users = builder.table("users", key_serde=String, value_serde=Json,
                          materialized=options("users", caching, store_type))
    by_region = users.group_by(lambda user, v: (v["region"], v), key_serde=String, value_serde=Json, name="by-region")
    by_region.count(options("users-per-region", caching, store_type)).to_stream().to("count-out")
    (users.group_by(lambda user, v: (v["region"], v["age"]), value_serde=Long)
     .reduce(lambda total, age: total + age, lambda total, age: total - age,
             options("age-per-region", caching, store_type)).to_stream().to("age-out", value_serde=Long))
    by_region.aggregate(list, lambda region, v, names: sorted([*names, v["name"]]),
                        lambda region, v, names: [n for n in names if n != v["name"]],
                        options("names-per-region", caching, store_type)).to_stream().to("names-out")
    return builder


@CACHING
@pytest.mark.parametrize(("store_type", "count"), [("in_memory", 2_000), ("rocksdb", 150)])
def test_group_by_moves_rows_between_groups_and_matches_the_oracle_at_every_step(
        caching: bool, store_type: str, count: int) -> None:
    updates = user_updates(count, users=80, seed=11)
    oracle = RegionOracle()
    builder = build_region_tables(caching, store_type)
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inp = driver.create_input_topic("users", String, Json)
        outs = {"count": driver.create_output_topic("count-out", String, Long),
                "age": driver.create_output_topic("age-out", String, Long),
                "names": driver.create_output_topic("names-out", String, Json)}
        seen: dict[str, dict[str, Any]] = {name: {} for name in outs}
        moves = 0
        for step, (user, value) in enumerate(updates):
            before = oracle.users.get(user)
            oracle.apply(user, value)
            inp.pipe_input(user, value, timestamp=1_000 + step)
            emitted = outs["count"].read_key_values()
            for name, out in outs.items():
                for key, result in emitted if name == "count" else out.read_key_values():
                    seen[name][key] = result
            assert seen["count"] == oracle.counts(), f"step {step}: {user} -> {value}"
            assert seen["age"] == oracle.ages(), f"step {step}"
            assert seen["names"] == oracle.names(), f"step {step}"
            # One record per group touched: a move updates two groups, a change within a group one
            # (old and new value travel in one repartition record), an unchanged delete none.
            groups = {v["region"] for v in (before, value) if v is not None}
            assert len(emitted) == len(groups), f"step {step}: {emitted}"
            moves += len(groups) == 2
        assert moves > count // 10  # the workload really moves users around
        assert dict(driver.get_key_value_store("users-per-region").all()) == oracle.counts()
        assert dict(driver.get_key_value_store("age-per-region").all()) == oracle.ages()
        assert dict(driver.get_key_value_store("names-per-region").all()) == oracle.names()
        assert f"{APP}-by-region-repartition" in driver.produced_topic_names


def test_a_user_moving_region_is_subtracted_from_the_old_region_then_added_to_the_new() -> None:
    builder = StreamsBuilder()
    (builder.table("users", materialized=Materialized.as_("users").with_caching_disabled())
     .group_by(lambda user, v: (v["region"], v)).count(Materialized.as_("c").with_caching_disabled())
     .to_stream().to("out"))
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inp = driver.create_input_topic("users")
        out = driver.create_output_topic("out", String, Long)
        inp.pipe_input("ada", {"region": "eu"})
        inp.pipe_input("bob", {"region": "eu"})
        assert out.read_key_values() == [("eu", 1), ("eu", 2)]
        inp.pipe_input("ada", {"region": "us"})
        assert out.read_key_values() == [("eu", 1), ("us", 1)]
        inp.pipe_input("ada", {"region": "us", "name": "Ada"})  # same group: one record, count unchanged
        assert out.read_key_values() == [("us", 1)]
        inp.pipe_input("ada", None)
        assert out.read_key_values() == [("us", 0)]  # the group stays, at 0
        inp.pipe_input("ada", None)  # deleting a user that is not there changes nothing
        assert out.is_empty()


def test_table_group_by_names_nodes_and_topic_as_kafka_streams_does() -> None:
    builder = StreamsBuilder()
    builder.table("users").group_by(lambda k, v: (v["region"], v)).count()
    topology = builder.build()
    assert [[n.name for n in s.nodes] for s in topology.subtopologies()] == [
        ["KSTREAM-SOURCE-0000000001", "KTABLE-SOURCE-0000000002", "KTABLE-SELECT-0000000003",
         "KSTREAM-SINK-0000000006"],
        ["KSTREAM-SOURCE-0000000008", "KTABLE-AGGREGATE-0000000005"]]
    assert topology.internal_topics == {"KTABLE-AGGREGATE-STATE-STORE-0000000004-repartition"}


def test_group_by_through_a_filter_subtracts_rows_that_stop_passing() -> None:
    builder = StreamsBuilder()
    (builder.table("users", materialized=Materialized.as_("users").with_caching_disabled())
     .filter(lambda k, v: v["active"])
     .group_by(lambda k, v: (v["region"], v)).count(Materialized.as_("c").with_caching_disabled())
     .to_stream().to("out"))
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inp = driver.create_input_topic("users")
        out = driver.create_output_topic("out", String, Long)
        inp.pipe_input("ada", {"region": "eu", "active": True})
        inp.pipe_input("ada", {"region": "eu", "active": False})
        inp.pipe_input("ada", {"region": "us", "active": False})
        inp.pipe_input("ada", {"region": "us", "active": True})
        assert out.read_key_values() == [("eu", 1), ("eu", 0), ("us", 1)]


def test_a_selected_null_group_key_is_skipped_and_counted() -> None:
    builder = StreamsBuilder()
    builder.table("users").group_by(lambda k, v: (v.get("region"), v)).count(materialized="c").to_stream().to("out")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inp = driver.create_input_topic("users")
        inp.pipe_input("ada", {})
        inp.pipe_input("bob", {"region": "eu"})
        assert driver.create_output_topic("out", String, Long).read_key_values() == [("eu", 1)]
        assert driver.metrics()["dropped_records"] == 1


# -- the repartition framing of old and new values ---------------------------------------------------------------

@pytest.mark.parametrize(("new", "old"), [(b"n", None), (None, b"o"), (b"new", b"old"), (b"", b""), (b"", None),
                                          (None, b"")])
def test_change_framing_round_trips(new: bytes | None, old: bytes | None) -> None:
    assert decode_change(encode_change(new, old)) == (new, old)


def test_change_framing_rejects_foreign_bytes() -> None:
    with pytest.raises(ValueError, match="not a table repartition record"):
        decode_change(b"\x09junk")
