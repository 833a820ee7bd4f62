"""Co-partition groups for scaling (issue 18): the word count, the orders pipeline and a foreign-key join, checked
against the runtime's own sizing of internal topics (``internal_topic_partitions``)."""

from __future__ import annotations

from apps.orders import topology as orders_topology
from apps.wordcount import topology as wordcount_topology
from streaming import Materialized, Serdes, StreamsBuilder
from streaming.runtime.internal_topics import internal_topic_partitions
from streaming.scaling.groups import left_subscription_stores, scaling_groups
from streaming.topology.topology import Topology

String, Json = Serdes.String(), Serdes.Json()


def shape(topology: Topology, app: str) -> dict[str, list[tuple[str, str]]]:
    return {g.name: [(t.topic, t.role) for t in g.topics] for g in scaling_groups(topology, app)}


def test_the_word_count_scales_its_lines_and_its_counting_separately() -> None:
    assert shape(wordcount_topology(), "wc") == {
        "wordcount-lines": [("wordcount-lines", "input")],
        "wordcount-words": [("wordcount-words", "intermediate"), ("wc-word-counts-changelog", "changelog"),
                            ("wc-word-counts-pending-changelog", "changelog"), ("wc-1-stream-time", "stream-time")]}


def test_the_orders_pipeline_groups_its_joins_and_repartitioned_counts() -> None:
    groups = {g.name: g for g in scaling_groups(orders_topology(), "o")}
    assert shape(orders_topology(), "o") == {
        "items": [("items", "input"), ("o-lines-by-item-left-repartition", "repartition"),
                  ("o-items-changelog", "changelog"), ("o-1-stream-time", "stream-time")],
        "o-lines-by-region-repartition": [("o-lines-by-region-repartition", "repartition"),
                                          ("o-local-buyers-changelog", "changelog"),
                                          ("o-local-buyers-finals-store-changelog", "changelog"),
                                          ("o-2-stream-time", "stream-time")],
        "orders": [("orders", "input"), ("users", "input"), ("o-order-ids-changelog", "changelog"),
                   ("o-user-profiles-changelog", "changelog"), ("o-users-changelog", "changelog"),
                   ("o-0-stream-time", "stream-time")]}
    assert groups["orders"].joins == ("stream-table join 'join-users'",)
    assert groups["orders"].external == ["orders", "users"]
    assert groups["o-lines-by-region-repartition"].external == ["o-lines-by-region-repartition"]


def test_a_groups_changelogs_and_stream_time_get_the_groups_count_from_the_runtime() -> None:
    """``internal_topic_partitions`` (what the runtime creates) gives every changelog and stream-time topic of a
    group the count of the group's sources: the groups are what one count applies to."""
    topology = orders_topology().bind("o")
    groups = scaling_groups(topology, "o")
    counts = {"orders": 6, "users": 6, "items": 3}
    sized = internal_topic_partitions(topology, "o", {**counts, "o-lines-by-region-repartition": 5,
                                                      "o-lines-by-item-left-repartition": 3})
    for group in groups:
        sources = {sized.get(t, counts.get(t)) for t in group.names("input", "intermediate", "repartition")}
        assert len(sources) == 1, group.name
        for topic in group.names("changelog", "stream-time"):
            assert sized[topic] in sources, (group.name, topic)


def test_a_foreign_key_join_ties_its_subscription_topic_to_the_right_table_and_responses_to_the_left() -> None:
    builder = StreamsBuilder()
    orders = builder.table("orders", key_serde=String, value_serde=Json, materialized=Materialized.as_("orders"))
    items = builder.table("items", key_serde=String, value_serde=Json, materialized=Materialized.as_("items"))
    orders.join(items, lambda o: o["item"], lambda o, i: [o, i], name="fk").to_stream().to("out")
    groups = shape(builder.build(), "app")
    assert [t for t, _ in groups["items"]][:2] == ["items", "app-fk-subscription-registration-topic"]
    assert [t for t, _ in groups["orders"]][:2] == ["orders", "app-fk-subscription-response-topic"]
    assert ("app-fk-subscription-store-changelog", "changelog") in groups["items"]
    # the subscriptions live with the right table, and name left partitions: scaling the left side rewrites them
    topology = builder.build()
    by_name = {g.name: g for g in scaling_groups(topology, "app")}
    assert left_subscription_stores(topology, by_name["orders"]) == ["fk-subscription-store"]
    assert left_subscription_stores(topology, by_name["items"]) == []

