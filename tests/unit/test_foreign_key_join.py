"""Foreign-key table joins through the test driver: subscriptions and responses, a left row changing its
foreign key, tombstones on either side, None foreign keys, stale responses, and random runs checked against a
plain-Python join after every update."""

from __future__ import annotations

import random
from typing import Any

import pytest

from streaming import Materialized, Serdes, StreamsBuilder
from streaming.dsl.foreign_key_join import decode_subscription, encode_response, subscription_key, value_hash
from streaming.testing import TopologyTestDriver

APP = "fk-join-test"
CONFIG = {"application.id": APP}
String, Json = Serdes.String(), Serdes.Json()
BASE = "KTABLE-FK-JOIN-0000000004"  # the generated name of the join in these topologies
REGISTRATION = f"{APP}-{BASE}-subscription-registration-topic"
RESPONSE = f"{APP}-{BASE}-subscription-response-topic"
SUBSCRIPTIONS = f"{BASE}-subscription-store"


def item_of(order: dict[str, Any]) -> Any:
    return order.get("item")


def line(order: dict[str, Any], item: dict[str, Any] | None) -> list[Any]:
    return [order["n"], None if item is None else item["price"]]


def build(left_join: bool, caching: bool = False) -> Any:
    builder = StreamsBuilder()

    def options(name: str) -> Materialized:
        materialized = Materialized.as_(name)
        return materialized if caching else materialized.with_caching_disabled()
    orders = builder.table("orders", key_serde=String, value_serde=Json, materialized=options("orders"))
    items = builder.table("items", key_serde=String, value_serde=Json, materialized=options("items"))
    join = orders.left_join if left_join else orders.join
    join(items, item_of, line, materialized=options("lines")).to_stream().to("out")
    return builder.build()


# (topic, key, value, timestamp)
SCRIPT = [
    ("orders", "o1", {"n": 1, "item": "pen"}, 1),  # no pen yet
    ("items", "pen", {"price": 10}, 2),  # the right row arrives: answers o1's subscription
    ("orders", "o2", {"n": 2, "item": "pen"}, 3),
    ("items", "pen", {"price": 11}, 4),  # a right update reaches every subscriber
    ("orders", "o1", {"n": 3, "item": "ink"}, 5),  # o1 changes its foreign key to one without a row
    ("items", "ink", {"price": 99}, 6),
    ("items", "pen", {"price": 12}, 7),  # o1 unsubscribed from pen: only o2 hears of it
    ("orders", "o2", {"n": 4}, 8),  # o2's foreign key becomes None
    ("items", "pen", None, 9),  # pen deleted: nobody subscribes to it any more
    ("items", "ink", None, 10),  # ink deleted: o1 loses its match
    ("orders", "o1", None, 11),  # o1 deleted
]


@pytest.mark.parametrize(("left_join", "expected", "dropped"), [
    (False, [("o1", [1, 10], 2), ("o2", [2, 10], 3), ("o1", [1, 11], 4), ("o2", [2, 11], 4), ("o1", None, 5),
             ("o1", [3, 99], 6), ("o2", [2, 12], 7), ("o2", None, 8), ("o1", None, 10)], 1),
    (True, [("o1", [1, None], 1), ("o1", [1, 10], 2), ("o2", [2, 10], 3), ("o1", [1, 11], 4), ("o2", [2, 11], 4),
            ("o1", [3, None], 5), ("o1", [3, 99], 6), ("o2", [2, 12], 7), ("o2", [4, None], 8),
            ("o1", [3, None], 10), ("o1", None, 11)], 0),
], ids=["inner", "left"])
def test_updates_on_either_side_reach_the_result_as_kafka_streams_emits_them(
        left_join: bool, expected: list[tuple[str, Any, int]], dropped: int) -> None:
    with TopologyTestDriver(build(left_join), CONFIG) as driver:
        inputs = {t: driver.create_input_topic(t, String, Json) for t in ("orders", "items")}
        for topic, key, value, timestamp in SCRIPT:
            inputs[topic].pipe_input(key, value, timestamp=timestamp)
        records = driver.create_output_topic("out", String, Json).read_records_to_list()
        assert [(r.key, r.value, r.timestamp) for r in records] == expected
        # inner: o2's None foreign key is counted; left: it joins with None
        assert driver.metrics()["dropped_records"] == dropped
        assert dict(driver.get_key_value_store("lines").all()) == ({} if not left_join else {"o2": [4, None]})
        # Every subscription is gone: o1 was deleted, o2 has no foreign key.
        assert list(driver.get_key_value_store(SUBSCRIPTIONS).all()) == []


def test_a_left_row_changing_its_foreign_key_unsubscribes_from_the_old_one() -> None:
    with TopologyTestDriver(build(left_join=False), CONFIG) as driver:
        orders, items = (driver.create_input_topic(t, String, Json) for t in ("orders", "items"))
        registrations = driver.create_output_topic(REGISTRATION, Serdes.Bytes(), Serdes.Bytes())
        subscriptions = driver.get_key_value_store(SUBSCRIPTIONS)
        items.pipe_input("pen", {"price": 1})
        items.pipe_input("ink", {"price": 2})
        orders.pipe_input("o1", {"n": 1, "item": "pen"})
        assert [key for key, _ in subscriptions.all()] == [subscription_key(b"pen", b"o1")]
        orders.pipe_input("o1", {"n": 1, "item": "ink"})
        assert [key for key, _ in subscriptions.all()] == [subscription_key(b"ink", b"o1")]
        sent = [(key, decode_subscription(value)[0]) for key, value in registrations.read_key_values()]
        assert sent == [(b"pen", 2), (b"pen", 0), (b"ink", 1)]  # subscribe, unsubscribe, subscribe (answer always)
        items.pipe_input("pen", {"price": 5})  # the old foreign key's update does not reach o1
        assert driver.create_output_topic("out", String, Json).read_key_values() == [("o1", [1, 1]), ("o1", [1, 2])]


def test_a_stale_response_is_dropped_by_its_hash() -> None:
    with TopologyTestDriver(build(left_join=True), CONFIG) as driver:
        orders, items = (driver.create_input_topic(t, String, Json) for t in ("orders", "items"))
        items.pipe_input("pen", {"price": 1})
        orders.pipe_input("o1", {"n": 1, "item": "pen"})
        (old_response,) = driver.create_output_topic(RESPONSE, Serdes.Bytes(), Serdes.Bytes()).read_records_to_list()
        orders.pipe_input("o1", {"n": 2, "item": "pen"})
        out = driver.create_output_topic("out", String, Json)
        assert out.read_key_values() == [("o1", [1, 1]), ("o1", [2, 1])]
        # The answer to the first version of o1 arrives late (as it may when the partitions run at different
        # speeds): it carries the hash of a value o1 no longer has, so it changes nothing.
        responses = driver.create_input_topic(RESPONSE, Serdes.Bytes(), Serdes.Bytes())
        responses.pipe_input(old_response.key, old_response.value, timestamp=old_response.timestamp)
        assert out.is_empty()
        assert driver.get_key_value_store("lines").get("o1") == [2, 1]
        # An answer carrying the hash of o1's current value is applied.
        current = value_hash(Json.serialize({"n": 2, "item": "pen"}))
        responses.pipe_input(b"o1", encode_response(0, current, Json.serialize({"price": 7})), timestamp=9)
        assert out.read_key_values() == [("o1", [2, 7])]


def oracle(left_join: bool, orders: dict[str, dict[str, Any]], items: dict[str, dict[str, Any]]) -> dict[str, Any]:
    result = {}
    for key, order in orders.items():
        item = items.get(order["item"]) if order["item"] is not None else None
        if item is not None or left_join:
            result[key] = line(order, item)
    return result


@pytest.mark.parametrize("caching", [False, True], ids=["uncached", "cached"])
@pytest.mark.parametrize("left_join", [False, True], ids=["inner", "left"])
def test_random_updates_match_a_plain_join_after_every_update(left_join: bool, caching: bool) -> None:
    rng = random.Random(f"{left_join}{caching}")
    with TopologyTestDriver(build(left_join, caching), CONFIG) as driver:
        inputs = {t: driver.create_input_topic(t, String, Json) for t in ("orders", "items")}
        out = driver.create_output_topic("out", String, Json)
        orders: dict[str, dict[str, Any]] = {}
        items: dict[str, dict[str, Any]] = {}
        emitted: dict[str, Any] = {}
        for step in range(600):
            if rng.random() < 0.6:
                key = f"o{rng.randrange(12)}"
                value = None if rng.random() < 0.2 else {
                    "n": step, "item": None if rng.random() < 0.1 else f"i{rng.randrange(5)}"}
                (orders.pop(key, None) if value is None else orders.__setitem__(key, value))
                inputs["orders"].pipe_input(key, value, timestamp=step)
            else:
                key = f"i{rng.randrange(5)}"
                value = None if rng.random() < 0.25 else {"price": step}
                (items.pop(key, None) if value is None else items.__setitem__(key, value))
                inputs["items"].pipe_input(key, value, timestamp=step)
            for out_key, out_value in out.read_key_values():
                if out_value is None:
                    emitted.pop(out_key, None)
                else:
                    emitted[out_key] = out_value
            expected = oracle(left_join, orders, items)
            assert emitted == expected, f"step {step}"
        assert dict(driver.get_key_value_store("lines").all()) == expected
        subscribed = {key for key, _ in driver.get_key_value_store(SUBSCRIPTIONS).all()}
        assert subscribed == {subscription_key(order["item"].encode(), key.encode())
                              for key, order in orders.items() if order["item"] is not None}


def test_the_join_names_its_topics_and_stores_and_co_partitions_each_topic_with_its_side() -> None:
    builder = StreamsBuilder()
    orders = builder.table("orders", key_serde=String, value_serde=Json)
    items = builder.table("items", key_serde=String, value_serde=Json)
    joined = orders.join(items, item_of, line, name="order-items")
    topology = builder.build().bind("app")
    assert joined.queryable_store_name == "KTABLE-FK-JOIN-OUTPUT-STATE-STORE-0000000006"
    assert topology.internal_topics == {"app-order-items-subscription-registration-topic",
                                        "app-order-items-subscription-response-topic"}
    assert "order-items-subscription-store" in topology.store_builders
    assert [(g.operation, g.topics) for g in topology.copartition_groups] == [
        ("foreign-key join 'order-items' (subscriptions)", ("app-order-items-subscription-registration-topic", "items")),
        ("foreign-key join 'order-items' (responses)", ("app-order-items-subscription-response-topic", "orders"))]
    assert len(topology.subtopologies()) == 2  # the tables need not be co-partitioned with each other


def test_a_foreign_key_extractor_may_take_the_key_too() -> None:
    builder = StreamsBuilder()
    orders = builder.table("orders", key_serde=String, value_serde=Json)
    items = builder.table("items", key_serde=String, value_serde=Json)
    orders.join(items, lambda key, order: key.split("-")[0], lambda order, item: [order, item]).to_stream().to("out")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        driver.create_input_topic("items", String, Json).pipe_input("pen", 1)
        driver.create_input_topic("orders", String, Json).pipe_input("pen-7", 2)
        assert driver.create_output_topic("out", String, Json).read_key_values() == [("pen-7", [2, 1])]


def test_a_joiner_taking_three_arguments_gets_the_left_key() -> None:
    builder = StreamsBuilder()
    orders = builder.table("orders", key_serde=String, value_serde=Json)
    items = builder.table("items", key_serde=String, value_serde=Json)
    orders.left_join(items, item_of, lambda key, order, item: [key, item]).to_stream().to("out")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        driver.create_input_topic("orders", String, Json).pipe_input("o1", {"item": None})  # answered at once
        driver.create_input_topic("items", String, Json).pipe_input("pen", 1)
        driver.create_input_topic("orders", String, Json).pipe_input("o2", {"item": "pen"})  # answered by a response
        assert driver.create_output_topic("out", String, Json).read_key_values() == [("o1", ["o1", None]),
                                                                                    ("o2", ["o2", 1])]


def test_a_right_table_computed_from_another_is_looked_up_and_followed() -> None:
    builder = StreamsBuilder()
    orders = builder.table("orders", key_serde=String, value_serde=Json)
    prices = builder.table("items", key_serde=String, value_serde=Json).map_values(lambda item: item["price"] * 100)
    orders.join(prices, item_of, lambda order, cents: [order["n"], cents]).to_stream().to("out")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        items, orders_in = (driver.create_input_topic(t, String, Json) for t in ("items", "orders"))
        items.pipe_input("pen", {"price": 2})
        orders_in.pipe_input("o1", {"n": 1, "item": "pen"})  # answered from the mapped lookup
        items.pipe_input("pen", {"price": 3})  # a mapped update reaches the subscriber
        assert driver.create_output_topic("out", String, Json).read_key_values() == [("o1", [1, 200]), ("o1", [1, 300])]
