"""The scaling plan's refusals that need no broker (issue 18): each is one line, raised before the cluster is asked
anything (the bootstrap here answers nothing). The cluster's side (counts, offsets, CreatePartitions, live workers,
the plan itself) is in ``tests/integration/test_scaling_plan_on_broker.py``."""

from __future__ import annotations

import pytest

from apps.orders import topology as orders_topology
from streaming import Serdes, StreamsBuilder
from streaming.runtime.cluster import ClusterUnreachableError
from streaming.scaling import ScalingError, make_plan, scaling_groups
from streaming.scaling.plan import check_counts, choose_group

NOWHERE = {"bootstrap.servers": "127.0.0.1:1"}


def refusal(topics: list[str], partitions: object, mode: str = "migrate", **options: object) -> str:
    with pytest.raises(ScalingError) as refused:
        make_plan(orders_topology(), "o", NOWHERE, topics, partitions, mode, **options)  # type: ignore[arg-type]
    message = str(refused.value)
    assert "\n" not in message
    return message


def test_bad_counts_and_modes_are_refused_before_the_cluster_is_asked() -> None:
    assert refusal(["orders", "users"], 0) == "the new partition count must be an integer of 1 or more, got 0"
    assert refusal(["orders", "users"], -3).endswith("got -3")
    assert refusal(["orders", "users"], True).endswith("got True")
    assert refusal(["orders", "users"], 4, "sideways") == "mode must be 'migrate' or 'in_place', got 'sideways'"


def test_part_of_a_group_unknown_topics_and_several_groups_are_refused() -> None:
    assert refusal(["orders"], 4) == (
        "scaling ['orders'] alone would split co-partition group 'orders' (stream-table join 'join-users'): "
        "['users'] must keep the same partition count; name the whole group: orders, users")
    assert refusal(["orders", "users", "items"], 4) == (
        "topics ['orders', 'users', 'items'] are in different co-partition groups (orders, items): scale one group "
        "at a time")
    assert refusal(["nope"], 4).startswith("topic 'nope' is not one application 'o' scales (its groups: items: "
                                           "items; o-lines-by-region-repartition: o-lines-by-region-repartition; "
                                           "orders: orders, users)")
    assert refusal([], 4).startswith("name the topics to scale: one co-partition group of application 'o' (")


def test_a_group_with_different_counts_the_same_count_and_removing_partitions_in_place_are_refused() -> None:
    groups = scaling_groups(orders_topology(), "o")
    group = choose_group(groups, ["orders", "users"], "o")
    physical = {t: t for t in group.names()}

    def counts_refusal(counts: dict[str, int], partitions: int, mode: str = "migrate") -> str:
        with pytest.raises(ScalingError) as refused:
            check_counts(group, physical, counts, partitions, mode)
        return str(refused.value)

    assert counts_refusal({"orders": 4, "users": 2}, 8) == (
        "co-partition group 'orders' is already split, its topics have different partition counts (orders: 4, users: "
        "2): one count for the group cannot be applied; make them equal first")
    assert counts_refusal({"orders": 4, "users": 4, "o-users-changelog": 3}, 8).startswith(
        "co-partition group 'orders' is already split")
    assert counts_refusal({"orders": 4, "users": 4}, 4) == \
        "co-partition group 'orders' already has 4 partitions: nothing to scale"
    assert counts_refusal({"orders": 4, "users": 4}, 2, "in_place") == (
        "in_place cannot take group 'orders' from 4 to 2 partitions: Kafka cannot remove partitions; use mode "
        "'migrate'")
    assert counts_refusal({"orders": 4}, 8) == \
        "input topic 'users' of co-partition group 'orders' does not exist on the cluster"
    # internal topics not created yet do not count; the inputs give the group's count
    assert check_counts(group, physical, {"orders": 4, "users": 4}, 2, "migrate") == 4


def test_placements_name_a_store_of_the_group_and_a_known_placement() -> None:
    assert refusal(["orders", "users"], 4, placements={"items": "drop"}) == (
        "store 'items' is not a store of co-partition group 'orders' (its stores: order-ids, user-profiles, users)")
    assert refusal(["orders", "users"], 4, placements={"order-ids": "everywhere"}) == (
        "placement of store 'order-ids' must be 'by-key', 'replicate' or 'drop', got 'everywhere'")


def test_a_group_fed_through_a_custom_partitioner_is_refused() -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=Serdes.String(), value_serde=Serdes.String()) \
        .repartition(partitioner=lambda topic, key, value, n: 0, name="all-in-one").group_by_key().count("c")
    topology = builder.build()
    with pytest.raises(ScalingError) as refused:
        make_plan(topology, "app", NOWHERE, ["app-all-in-one-repartition"], 4)
    assert str(refused.value) == (
        "topic 'app-all-in-one-repartition' of co-partition group 'app-all-in-one-repartition' is written by sink "
        "'all-in-one-repartition-sink' with its own partitioner: its readers' state follows that partitioner, which a "
        "re-shard by murmur2 cannot reproduce; scaling this group is not supported")
    # the input's own group has no such writer: the plan goes on to ask the cluster (here, nothing listens)
    with pytest.raises(ClusterUnreachableError, match="cannot reach the Kafka cluster"):
        make_plan(topology, "app", NOWHERE, ["in"], 4)
