"""Stream-table and stream-global table joins through the test driver: matches, a missing table row, table
updates that emit nothing, tombstones, null keys and values, derived tables looked up through their parent's
store, and the repartition a key-changing operation puts before the join."""

from __future__ import annotations

from typing import Any

import pytest

from streaming import Materialized, Serdes, StreamsBuilder, TopologyError
from streaming.testing import TopologyTestDriver

APP = "stream-table-join-test"
CONFIG = {"application.id": APP}
String, Json = Serdes.String(), Serdes.Json()
CACHING = pytest.mark.parametrize("caching", [True, False], ids=["cached", "uncached"])


def users_table(builder: StreamsBuilder, caching: bool = True) -> Any:
    materialized = Materialized.as_("users")
    return builder.table("users", key_serde=String, value_serde=Json,
                         materialized=materialized if caching else materialized.with_caching_disabled())


def enrich(order: dict[str, Any], user: dict[str, Any] | None) -> dict[str, Any]:
    return {**order, "region": None if user is None else user["region"]}


@CACHING
def test_inner_join_emits_only_for_stream_records_whose_key_the_table_has(caching: bool) -> None:
    builder = StreamsBuilder()
    users = users_table(builder, caching)
    builder.stream("orders", key_serde=String, value_serde=Json).join(users, enrich).to("out")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        orders, users_in = driver.create_input_topic("orders", String, Json), driver.create_input_topic("users", String, Json)
        out = driver.create_output_topic("out", String, Json)
        orders.pipe_input("u1", {"id": 1}, timestamp=10)  # no user yet: nothing
        users_in.pipe_input("u1", {"region": "eu"}, timestamp=5)  # a table update alone: nothing
        assert out.is_empty()
        orders.pipe_input("u1", {"id": 2}, timestamp=20, headers=[("trace", b"x")])
        users_in.pipe_input("u1", {"region": "us"}, timestamp=30)
        orders.pipe_input("u1", {"id": 3}, timestamp=25)  # sees the table as it is now, whatever the timestamps
        users_in.pipe_input("u1", None, timestamp=40)  # tombstone: the user is gone
        orders.pipe_input("u1", {"id": 4}, timestamp=50)
        records = out.read_records_to_list()
        assert [(r.key, r.value, r.timestamp) for r in records] == [
            ("u1", {"id": 2, "region": "eu"}, 20), ("u1", {"id": 3, "region": "us"}, 25)]
        assert records[0].headers == [("trace", b"x")]  # the stream record's headers go along
        assert driver.metrics()["dropped_records"] == 0


def test_left_join_emits_for_every_stream_record_with_none_for_a_missing_row() -> None:
    builder = StreamsBuilder()
    users = users_table(builder)
    builder.stream("orders", key_serde=String, value_serde=Json).left_join(users, enrich).to("out")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        orders, users_in = driver.create_input_topic("orders", String, Json), driver.create_input_topic("users", String, Json)
        orders.pipe_input("u1", {"id": 1}, timestamp=1)
        users_in.pipe_input("u1", {"region": "eu"}, timestamp=2)
        orders.pipe_input("u1", {"id": 2}, timestamp=3)
        users_in.pipe_input("u1", None, timestamp=4)
        orders.pipe_input("u1", {"id": 3}, timestamp=5)
        assert driver.create_output_topic("out", String, Json).read_key_values() == [
            ("u1", {"id": 1, "region": None}), ("u1", {"id": 2, "region": "eu"}), ("u1", {"id": 3, "region": None})]


def test_null_keys_and_values_are_skipped_and_counted_except_a_null_key_in_a_left_join() -> None:
    builder = StreamsBuilder()
    users = users_table(builder)
    orders = builder.stream("orders", key_serde=String, value_serde=Json)
    orders.join(users, enrich).to("inner")
    orders.left_join(users, enrich).to("left")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        orders_in = driver.create_input_topic("orders", String, Json)
        driver.create_input_topic("users", String, Json).pipe_input("u1", {"region": "eu"})
        orders_in.pipe_input(None, {"id": 1})  # inner: skipped; left: joined with None (KIP-962)
        orders_in.pipe_input("u1", None)  # both: skipped
        orders_in.pipe_input("u1", {"id": 2})
        assert driver.create_output_topic("inner", String, Json).read_key_values() == [("u1", {"id": 2, "region": "eu"})]
        assert driver.create_output_topic("left", String, Json).read_key_values() == [
            (None, {"id": 1, "region": None}), ("u1", {"id": 2, "region": "eu"})]
        assert driver.metrics()["dropped_records"] == 3  # inner: null key, null value; left: null value


def test_a_derived_table_is_looked_up_through_its_parents_store_without_a_store_of_its_own() -> None:
    builder = StreamsBuilder()
    users = users_table(builder)
    eu_names = users.filter(lambda key, user: user["region"] == "eu").map_values(lambda user: user["name"].upper())
    builder.stream("orders", key_serde=String, value_serde=Json).left_join(
        eu_names, lambda order, name: [order["id"], name]).to("out")
    topology = builder.build()
    assert sorted(topology.store_builders) == ["users"]
    with TopologyTestDriver(topology, CONFIG) as driver:
        orders, users_in = driver.create_input_topic("orders", String, Json), driver.create_input_topic("users", String, Json)
        users_in.pipe_input("u1", {"region": "eu", "name": "ada"})
        users_in.pipe_input("u2", {"region": "us", "name": "bob"})
        orders.pipe_input("u1", {"id": 1})
        orders.pipe_input("u2", {"id": 2})  # filtered out of the table: no row
        users_in.pipe_input("u2", {"region": "eu", "name": "bob"})
        orders.pipe_input("u2", {"id": 3})
        assert driver.create_output_topic("out", String, Json).read_values_to_list() == [[1, "ADA"], [2, None], [3, "BOB"]]


def test_an_inner_join_finds_no_row_through_a_filter_and_joins_through_an_unmaterialized_table_join() -> None:
    builder = StreamsBuilder()
    users = users_table(builder)
    tiers = builder.table("tiers", key_serde=String, value_serde=Json)
    eu = users.filter(lambda key, user: user["region"] == "eu")
    eu_tiers = eu.join(tiers, lambda user, tier: f"{user['region']}-{tier}")  # no store: looked up through both
    orders = builder.stream("orders", key_serde=String, value_serde=Json)
    orders.join(eu, enrich).to("eu")
    orders.join(eu_tiers, lambda order, tier: [order["id"], tier]).to("tiers")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        orders_in, users_in = driver.create_input_topic("orders", String, Json), driver.create_input_topic("users", String, Json)
        tiers_in = driver.create_input_topic("tiers", String, Json)
        users_in.pipe_input("u1", {"region": "eu"})
        users_in.pipe_input("u2", {"region": "us"})
        tiers_in.pipe_input("u1", "gold")
        tiers_in.pipe_input("u2", "gold")
        orders_in.pipe_input("u1", {"id": 1})
        orders_in.pipe_input("u2", {"id": 2})  # filtered out: no row for either join
        orders_in.pipe_input("u3", {"id": 3})  # no user at all
        assert driver.create_output_topic("eu", String, Json).read_values_to_list() == [{"id": 1, "region": "eu"}]
        assert driver.create_output_topic("tiers", String, Json).read_values_to_list() == [[1, "eu-gold"]]


def test_a_key_changing_operation_repartitions_the_stream_before_the_join() -> None:
    builder = StreamsBuilder()
    users = users_table(builder)
    (builder.stream("orders", key_serde=String, value_serde=Json)
     .select_key(lambda order_id, order: order["user"])
     .join(users, enrich, name="orders-users").to("out"))
    topology = builder.build()
    repartition = f"{APP}-orders-users-left-repartition"
    with TopologyTestDriver(topology, CONFIG) as driver:
        assert [g.topics for g in topology.copartition_groups] == [(repartition, "users")]
        orders, users_in = driver.create_input_topic("orders", String, Json), driver.create_input_topic("users", String, Json)
        users_in.pipe_input("u1", {"region": "eu"})
        orders.pipe_input("o1", {"user": "u1"}, timestamp=7)
        orders.pipe_input("o2", {"user": None}, timestamp=8)  # no key after select_key: cannot be repartitioned
        assert driver.create_output_topic("out", String, Json).read_records_to_list()[0].timestamp == 7
        assert driver.create_output_topic(repartition, String, Json).read_key_values() == [("u1", {"user": "u1"})]
        assert driver.metrics()["dropped_records"] == 1


def test_the_join_names_its_co_partitioned_inputs_and_takes_no_repartition_when_the_key_is_unchanged() -> None:
    builder = StreamsBuilder()
    users = users_table(builder)
    builder.stream(["orders", "returns"], key_serde=String, value_serde=Json).filter(
        lambda k, v: True).join(users, enrich).to("out")
    topology = builder.build()
    (group,) = topology.copartition_groups
    assert group.topics == ("orders", "returns", "users")
    assert group.operation == "stream-table join 'KSTREAM-JOIN-0000000004'"
    assert topology.internal_topics == set()
    assert len(topology.subtopologies()) == 1  # the join reads the table's store: one task sees both


def test_join_arguments_are_checked() -> None:
    builder = StreamsBuilder()
    users, stream = users_table(builder), builder.stream("orders")
    with pytest.raises(TopologyError, match=r"join\(table, joiner\) takes one joiner"):
        stream.join(users, lambda k, v: k, enrich)
    with pytest.raises(TopologyError, match="with a KStream, a KTable or a GlobalKTable"):
        stream.join("users", enrich)  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="takes a joiner and JoinWindows"):
        stream.join(stream, enrich)
    with pytest.raises(TopologyError, match="store_name apply to a join with a stream only"):
        stream.join(users, enrich, store_name="s")
    with pytest.raises(TopologyError, match="different StreamsBuilders"):
        stream.join(users_table(StreamsBuilder()), enrich)


# -- global tables --------------------------------------------------------------------------------------------------

def test_global_table_join_looks_up_the_mapped_key_and_follows_the_global_topic() -> None:
    builder = StreamsBuilder()
    items = builder.global_table("items", key_serde=String, value_serde=Json, materialized="items")
    orders = builder.stream("orders", key_serde=String, value_serde=Json)
    orders.join(items, lambda order_id, order: order.get("item"), lambda order, item: [order["id"], item["price"]]).to("inner")
    orders.left_join(items, lambda order_id, order: order.get("item"),
                     lambda order, item: [order["id"], item and item["price"]]).to("left")
    topology = builder.build()
    assert topology.copartition_groups == []  # a global table needs no co-partitioning
    with TopologyTestDriver(topology, CONFIG) as driver:
        orders_in, items_in = driver.create_input_topic("orders", String, Json), driver.create_input_topic("items", String, Json)
        orders_in.pipe_input("o1", {"id": 1, "item": "pen"})
        items_in.pipe_input("pen", {"price": 2})
        orders_in.pipe_input("o2", {"id": 2, "item": "pen"})
        orders_in.pipe_input("o3", {"id": 3})  # the mapper returns None: left joins with None, inner skips
        items_in.pipe_input("pen", None)
        orders_in.pipe_input("o4", {"id": 4, "item": "pen"})
        orders_in.pipe_input("o5", None)  # a None value: skipped by both
        assert driver.create_output_topic("inner", String, Json).read_key_values() == [("o2", [2, 2])]
        assert driver.create_output_topic("left", String, Json).read_key_values() == [
            ("o1", [1, None]), ("o2", [2, 2]), ("o3", [3, None]), ("o4", [4, None])]
        assert driver.metrics()["dropped_records"] == 3  # inner: None mapped key, None value; left: None value


def test_global_join_needs_a_key_mapper_and_a_global_table_of_the_same_builder() -> None:
    builder = StreamsBuilder()
    items = builder.global_table("items")
    stream = builder.stream("orders")
    with pytest.raises(TopologyError, match="takes a key mapper and a joiner"):
        stream.join(items, enrich)
    with pytest.raises(TopologyError, match="not in this stream's StreamsBuilder"):
        StreamsBuilder().stream("x").left_join(items, lambda k, v: k, enrich)


def test_a_joiner_taking_three_arguments_gets_the_key_too() -> None:
    builder = StreamsBuilder()
    users = users_table(builder)
    items = builder.global_table("items", key_serde=String, value_serde=Json)
    orders = builder.stream("orders", key_serde=String, value_serde=Json)
    orders.join(users, lambda key, order, user: [key, order["id"], user["region"]]).to("table")
    orders.left_join(items, lambda key, order: order["item"], lambda key, order, item: [key, item]).to("global")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        driver.create_input_topic("users", String, Json).pipe_input("u1", {"region": "eu"})
        driver.create_input_topic("items", String, Json).pipe_input("pen", 3)
        driver.create_input_topic("orders", String, Json).pipe_input("u1", {"id": 1, "item": "pen"})
        assert driver.create_output_topic("table", String, Json).read_values_to_list() == [["u1", 1, "eu"]]
        assert driver.create_output_topic("global", String, Json).read_values_to_list() == [["u1", 3]]
