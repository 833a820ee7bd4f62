"""Joins on the embedded broker: co-partitioning checked at start-up, a stream-table join that restores its
table from the changelog after a restart, the orders pipeline's two joins with a repartition between them,
and a foreign-key join between tables with different partition counts."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from streaming import KafkaStreams, Serdes, StreamsBuilder
from streaming.admin import create_topics, partition_counts
from streaming.errors import CoPartitioningError, InvalidStateStoreError
from streaming.runtime.kafka_streams import State
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import produce, read_topic, wait_for

pytestmark = pytest.mark.integration
String, Json = Serdes.String(), Serdes.Json()
T0 = 1_700_000_000_000
REGIONS = ["eu", "us", "apac"]


def config(bootstrap: str, app_id: str, state_dir: Path) -> dict[str, Any]:
    return {"application.id": app_id, "bootstrap.servers": bootstrap, "commit.interval.ms": 200,
            "state.dir": str(state_dir)}


def store_size(app: KafkaStreams, store: str) -> int:
    """Entries of ``store`` on this instance (-1 while it cannot be queried yet)."""
    try:
        return sum(1 for _ in app.store(store).all())
    except InvalidStateStoreError:
        return -1


def last_values(records: list[Any]) -> dict[Any, Any]:
    latest: dict[Any, Any] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        latest[record.key] = record.value
    return latest


@pytest.mark.parametrize("kind", ["stream-table", "table-table"])
def test_joining_topics_with_different_partition_counts_fails_at_start_up_naming_the_join_and_both_topics(
        bootstrap: str, unique_name: str, tmp_path: Path, kind: str) -> None:
    left, right, out = f"{unique_name}-left", f"{unique_name}-right", f"{unique_name}-out"
    create_topics(bootstrap, {left: 3, right: 2, out: 1})
    builder = StreamsBuilder()
    table = builder.table(right, materialized="right")
    if kind == "stream-table":
        builder.stream(left).join(table, lambda a, b: a, name="enrich").to(out)
        operation = "stream-table join 'enrich'"
    else:
        builder.table(left, materialized="left").join(table, lambda a, b: a, name="pairs").to_stream().to(out)
        operation = "table-table join 'pairs'"
    app = KafkaStreams(builder.build(), config(bootstrap, unique_name, tmp_path))
    with pytest.raises(CoPartitioningError) as failure:
        app.start()
    message = str(failure.value)
    assert operation in message
    assert f"topic {left!r} has 3 partitions" in message and f"topic {right!r} has 2" in message
    assert app.state is State.NOT_RUNNING
    assert app.close(5)


class Restores:
    """A restore listener that counts what each store restored."""

    def __init__(self) -> None:
        self.restored: dict[str, int] = {}

    def on_restore_start(self, topic_partition: Any, store_name: str, start_offset: int, end_offset: int) -> None:
        self.restored.setdefault(store_name, 0)

    def on_batch_restored(self, topic_partition: Any, store_name: str, batch_end_offset: int,
                          num_restored: int) -> None:
        self.restored[store_name] = self.restored.get(store_name, 0) + num_restored

    def on_restore_end(self, topic_partition: Any, store_name: str, total_restored: int) -> None:
        """Counted batch by batch."""


def test_a_stream_table_join_restores_its_table_after_a_restart_and_joins_as_before(
        bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    users, orders, enriched = f"{unique_name}-users", f"{unique_name}-orders", f"{unique_name}-enriched"
    create_topics(bootstrap, {users: 2, orders: 2, enriched: 2})
    user_records = [GeneratedRecord(f"user-{i}", {"region": REGIONS[i % 3]}, T0) for i in range(120)]
    produce(bootstrap, users, user_records, String, Json)

    def topology() -> Any:
        builder = StreamsBuilder()
        table = builder.table(users, key_serde=String, value_serde=Json, materialized="users")
        (builder.stream(orders, key_serde=String, value_serde=Json)
         .left_join(table, lambda order, user: {**order, "region": user and user["region"]}).to(enriched))
        return builder.build()

    def orders_batch(first: int, count: int) -> list[GeneratedRecord]:
        return [GeneratedRecord(f"user-{i % 120}", {"id": i}, T0 + 1_000 + i) for i in range(first, first + count)]

    first = KafkaStreams(topology(), config(bootstrap, unique_name, tmp_path / "first"))
    first.start()
    try:
        wait_for(lambda: store_size(first, "users") == 120, 60, "the users table to hold every user")
        produce(bootstrap, orders, orders_batch(0, 300), String, Json)
        wait_for(lambda: len(read_topic(bootstrap, enriched, String, Json, 2)) >= 300, 60, "the first orders joined")
    finally:
        assert first.close(30)

    # A new state directory: nothing local survives, and the users topic is not read again (its offsets
    # are committed), so the table can only come back from its changelog.
    restores = Restores()
    second = KafkaStreams(topology(), config(bootstrap, unique_name, tmp_path / "second"))
    second.set_global_state_restore_listener(restores)
    second.start()
    try:
        produce(bootstrap, orders, orders_batch(300, 300), String, Json)
        wait_for(lambda: len(read_topic(bootstrap, enriched, String, Json, 2)) >= 600, 60, "the second orders joined")
        produce(bootstrap, users, [GeneratedRecord("user-7", {"region": "mars"}, T0 + 5_000)], String, Json)
        wait_for(lambda: second.store("users").get("user-7") == {"region": "mars"}, 30, "the table to follow its topic")
        produce(bootstrap, orders, [GeneratedRecord("user-7", {"id": 600}, T0 + 6_000)], String, Json)
        wait_for(lambda: len(read_topic(bootstrap, enriched, String, Json, 2)) >= 601, 30, "the last order joined")
        assert second.state is State.RUNNING
    finally:
        assert second.close(30)
    assert first.exception is None and second.exception is None
    assert restores.restored.get("users") == 120

    output = {r.value["id"]: r for r in read_topic(bootstrap, enriched, String, Json, 2)}
    assert sorted(output) == list(range(601))
    assert all(output[i].value["region"] == REGIONS[(i % 120) % 3] for i in range(600))
    assert all(output[i].key == f"user-{i % 120}" and output[i].timestamp == T0 + 1_000 + i for i in range(600))
    assert output[600].value["region"] == "mars"


def test_orders_joined_with_users_then_repartitioned_by_item_and_joined_with_items(
        bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    users, items, orders, lines = (f"{unique_name}-{t}" for t in ("users", "items", "orders", "lines"))
    create_topics(bootstrap, {users: 3, orders: 3, items: 2, lines: 2})
    rng = random.Random(3)
    user_region = {f"user-{i}": rng.choice(REGIONS) for i in range(60)}
    item_region = {f"item-{i}": rng.choice(REGIONS) for i in range(25)}
    produce(bootstrap, users, [GeneratedRecord(u, {"region": r}, T0) for u, r in user_region.items()], String, Json)
    produce(bootstrap, items, [GeneratedRecord(i, {"made_in": r}, T0) for i, r in item_region.items()], String, Json)
    order_records = [GeneratedRecord(rng.choice(list(user_region)), {"id": n, "item": rng.choice(list(item_region))},
                                     T0 + 1_000 + n) for n in range(800)]

    builder = StreamsBuilder()
    users_table = builder.table(users, key_serde=String, value_serde=Json, materialized="users")
    items_table = builder.table(items, key_serde=String, value_serde=Json, materialized="items")
    (builder.stream(orders, key_serde=String, value_serde=Json)
     .join(users_table, lambda order, user: {**order, "user_region": user["region"]}, name="with-user")
     .select_key(lambda user, order: order["item"])
     .join(items_table, lambda order, item: {**order, "local": order["user_region"] == item["made_in"]},
           key_serde=String, value_serde=Json, name="with-item")
     .to(lines))
    app = KafkaStreams(builder.build(), config(bootstrap, unique_name, tmp_path))
    app.start()
    try:
        wait_for(lambda: store_size(app, "users") == 60 and store_size(app, "items") == 25, 60, "both tables loaded")
        produce(bootstrap, orders, order_records, String, Json)
        wait_for(lambda: len(read_topic(bootstrap, lines, String, Json, 2)) >= 800, 90, "every order line")
    finally:
        assert app.close(30)
    assert app.exception is None
    repartition = f"{unique_name}-with-item-left-repartition"
    assert partition_counts(bootstrap, {repartition: 0}) == {repartition: 2}  # the items table's count, not 3

    output = read_topic(bootstrap, lines, String, Json, 2)
    assert sorted(r.value["id"] for r in output) == list(range(800))
    for record in output:
        order = order_records[record.value["id"]]
        assert record.key == order.value["item"]
        assert record.value["local"] == (user_region[order.key] == item_region[order.value["item"]])
    # Every line of an item went through one partition of the repartition topic, the items table's.
    assert all(len({r.partition for r in output if r.key == item}) == 1 for item in item_region)


def test_a_foreign_key_join_between_tables_with_different_partition_counts(
        bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    orders, items, lines = (f"{unique_name}-{t}" for t in ("orders", "items", "lines"))
    create_topics(bootstrap, {orders: 3, items: 2, lines: 3})
    rng = random.Random(9)
    prices = {f"item-{i}": i * 10 for i in range(15)}
    order_items = {f"order-{n}": rng.choice(list(prices)) for n in range(200)}
    produce(bootstrap, items, [GeneratedRecord(i, {"price": p}, T0) for i, p in prices.items()], String, Json)

    builder = StreamsBuilder()
    orders_table = builder.table(orders, key_serde=String, value_serde=Json, materialized="orders")
    items_table = builder.table(items, key_serde=String, value_serde=Json, materialized="items")
    (orders_table.left_join(items_table, lambda order: order["item"],
                            lambda order, item: {"item": order["item"], "price": item and item["price"]},
                            name="order-items", materialized="lines")
     .to_stream().to(lines))
    app = KafkaStreams(builder.build(), config(bootstrap, unique_name, tmp_path))
    app.start()
    try:
        wait_for(lambda: store_size(app, "items") == 15, 60, "the items table loaded")
        produce(bootstrap, orders, [GeneratedRecord(o, {"item": i}, T0 + 1) for o, i in order_items.items()],
                String, Json)
        expected = {o: {"item": i, "price": prices[i]} for o, i in order_items.items()}
        wait_for(lambda: last_values(read_topic(bootstrap, lines, String, Json, 3)) == expected, 90, "every order joined")
        # A right update reaches every order of the item, on whichever partition it is; a right delete too.
        produce(bootstrap, items, [GeneratedRecord("item-3", {"price": 999}, T0 + 2),
                                   GeneratedRecord("item-4", None, T0 + 2)], String, Json)
        expected = {o: {"item": i, "price": {"item-3": 999, "item-4": None}.get(i, prices[i])}
                    for o, i in order_items.items()}
        wait_for(lambda: last_values(read_topic(bootstrap, lines, String, Json, 3)) == expected, 60,
                 "the item changes to reach the orders")
        assert dict(app.store("lines").all()) == expected
    finally:
        assert app.close(30)
    assert app.exception is None
    topics = {f"{unique_name}-order-items-subscription-registration-topic": 2,
              f"{unique_name}-order-items-subscription-response-topic": 3}
    assert partition_counts(bootstrap, dict.fromkeys(topics, 0)) == topics


def test_a_stream_is_not_held_back_once_its_table_partition_is_caught_up(
        bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    # Every order is joined within seconds, also after a table update: as in Kafka Streams
    # (max.task.idle.ms=0, the default), a task waits only for a partition that has records still on the
    # broker, and the users partition, read to its high watermark, has none. A small buffer per partition makes the
    # stream thread pause and resume partitions along the way; nothing may be lost or repeated.
    users, orders, enriched = f"{unique_name}-users", f"{unique_name}-orders", f"{unique_name}-enriched"
    create_topics(bootstrap, {users: 1, orders: 1, enriched: 1})
    produce(bootstrap, users, [GeneratedRecord(f"user-{i}", {"region": REGIONS[i % 3]}, T0) for i in range(50)],
            String, Json)
    produce(bootstrap, orders, [GeneratedRecord(f"user-{i % 50}", {"id": i}, T0 + 1_000 + i) for i in range(5_000)],
            String, Json)
    builder = StreamsBuilder()
    table = builder.table(users, key_serde=String, value_serde=Json, materialized="users")
    builder.stream(orders, key_serde=String, value_serde=Json).join(
        table, lambda order, user: {**order, "region": user["region"]}).to(enriched)
    app = KafkaStreams(builder.build(), {**config(bootstrap, unique_name, tmp_path),
                                         "buffered.records.per.partition": 100})
    app.start()
    try:
        wait_for(lambda: len(read_topic(bootstrap, enriched, String, Json, 1)) >= 5_000, 60, "every order joined")
        produce(bootstrap, users, [GeneratedRecord("user-7", {"region": "mars"}, T0 + 10_000)], String, Json)
        # The orders go out once the table has the update: with max.task.idle.ms=0 a task does not wait for a
        # record that reached the broker after the partition's last fetch (KIP-695), so an order fetched first
        # would rightly join the old row.
        wait_for(lambda: (app.store("users").get("user-7") or {}).get("region") == "mars", 60, "the table update")
        produce(bootstrap, orders, [GeneratedRecord("user-7", {"id": 5_000 + i}, T0 + 11_000 + i) for i in range(3)],
                String, Json)
        wait_for(lambda: len(read_topic(bootstrap, enriched, String, Json, 1)) >= 5_003, 60,
                 "the orders after a table update")
    finally:
        assert app.close(30)
    assert app.exception is None
    output = read_topic(bootstrap, enriched, String, Json, 1)
    assert [r.value["id"] for r in output] == list(range(5_003))  # each once, in order
    assert all(r.value["region"] == REGIONS[int(r.key.split("-")[1]) % 3] for r in output[:5_000])
    assert [r.value["region"] for r in output[5_000:]] == ["mars"] * 3
