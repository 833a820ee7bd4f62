"""How internal topics are sized when joins need them co-partitioned with the user's topics (no broker: the
sizing is a function of the topology and the topics' partition counts)."""

from __future__ import annotations

from streaming import Serdes, StreamsBuilder
from streaming.runtime.internal_topics import internal_topic_partitions

String, Json = Serdes.String(), Serdes.Json()


def sizes(builder: StreamsBuilder, counts: dict[str, int]) -> dict[str, int]:
    return internal_topic_partitions(builder.build().bind("app"), "app", counts)


def test_a_stream_repartitioned_for_a_join_takes_the_tables_partition_count_not_its_writers() -> None:
    builder = StreamsBuilder()
    users = builder.table("users", materialized="users")
    builder.stream("orders").select_key(lambda k, v: v["user"]).join(users, lambda o, u: o, name="enrich").to("out")
    assert sizes(builder, {"orders": 6, "users": 2, "out": 1}) == {
        "app-enrich-left-repartition": 2, "app-users-changelog": 2,
        "app-0-stream-time": 2}  # a stateful sub-topology's stream time: a partition per task


def test_orders_joined_with_users_then_repartitioned_by_item_and_joined_with_items() -> None:
    # The orders pipeline's shape: each join's repartition topic is sized by the table it joins.
    builder = StreamsBuilder()
    users = builder.table("users", materialized="users")
    items = builder.table("items", materialized="items")
    (builder.stream("orders").join(users, lambda o, u: o, name="with-user")
     .select_key(lambda user, order: order["item"]).join(items, lambda o, i: o, name="with-item").to("out"))
    assert sizes(builder, {"orders": 3, "users": 3, "items": 5, "out": 1}) == {
        "app-with-item-left-repartition": 5, "app-users-changelog": 3, "app-items-changelog": 5,
        "app-0-stream-time": 3, "app-1-stream-time": 5}


def test_a_foreign_key_joins_topics_take_the_partition_counts_of_their_sides() -> None:
    builder = StreamsBuilder()
    orders = builder.table("orders", materialized="orders")
    items = builder.table("items", materialized="items")
    orders.join(items, lambda order: order["item"], lambda o, i: o, name="fk", materialized="lines")
    assert sizes(builder, {"orders": 3, "items": 2}) == {
        "app-fk-subscription-registration-topic": 2,  # read with items: items' partitions
        "app-fk-subscription-response-topic": 3,  # read with orders
        "app-fk-subscription-store-changelog": 2, "app-items-changelog": 2,
        "app-orders-changelog": 3, "app-lines-changelog": 3, "app-0-stream-time": 3, "app-1-stream-time": 2}


def test_a_group_of_internal_topics_only_takes_the_highest_count_among_them() -> None:
    builder = StreamsBuilder()
    clicks = builder.stream("clicks").group_by(lambda k, v: v["user"], name="by-user").count(materialized="c")
    views = builder.stream("views").group_by(lambda k, v: v["user"], name="views-by-user").count(materialized="v")
    clicks.join(views, lambda c, v: c + v)
    assert sizes(builder, {"clicks": 4, "views": 7}) == {
        "app-by-user-repartition": 7, "app-views-by-user-repartition": 7, "app-c-changelog": 7, "app-v-changelog": 7,
        "app-1-stream-time": 7}


def test_a_stream_stream_join_names_its_inputs_and_sizes_a_repartition_by_the_other_stream() -> None:
    from streaming import JoinWindows
    builder = StreamsBuilder()
    clicks = builder.stream("clicks").select_key(lambda k, v: v["user"])
    clicks.join(builder.stream("views"), lambda c, v: c, JoinWindows.of(1000), name="clicks-views")
    topology = builder.build().bind("app")
    assert [(g.operation, g.topics) for g in topology.copartition_groups] == [
        ("stream-stream join 'clicks-views'", ("app-clicks-views-left-repartition", "views"))]
    sizes = internal_topic_partitions(topology, "app", {"clicks": 6, "views": 4})
    assert sizes["app-clicks-views-left-repartition"] == 4
