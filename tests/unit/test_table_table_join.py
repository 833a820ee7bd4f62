"""Table-table joins on the key through the test driver: inner, left and outer, updates from either side,
tombstones on either side, old values for a later group_by, materialized and queryable results, and a
random run checked against a plain-Python join after every update."""

from __future__ import annotations

import random
from typing import Any

import pytest

from streaming import KTable, Materialized, Serdes, StreamsBuilder, TopologyError
from streaming.testing import TopologyTestDriver

APP = "table-join-test"
CONFIG = {"application.id": APP}
String, Json, Long = Serdes.String(), Serdes.Json(), Serdes.Long()


def pair(left: Any, right: Any) -> list[Any]:
    return [left, right]


def tables(builder: StreamsBuilder, caching: bool) -> tuple[KTable, KTable]:
    def options(name: str) -> Materialized:
        materialized = Materialized.as_(name).with_store_type("in_memory")
        return materialized if caching else materialized.with_caching_disabled()
    return (builder.table("left", key_serde=String, value_serde=Long, materialized=options("l")),
            builder.table("right", key_serde=String, value_serde=Long, materialized=options("r")))


# (topic, key, value, timestamp): the same updates for every join kind
UPDATES = [("left", "k", 1, 10), ("right", "k", 10, 20), ("left", "k", 2, 15), ("right", "k", None, 40),
           ("left", "k", None, 50), ("right", "k", 20, 60), ("right", "k", None, 70)]


@pytest.mark.parametrize(("kind", "expected"), [
    ("join", [([1, 10], 20), ([2, 10], 20), (None, 40)]),
    ("left_join", [([1, None], 10), ([1, 10], 20), ([2, 10], 20), ([2, None], 40), (None, 50)]),
    ("outer_join", [([1, None], 10), ([1, 10], 20), ([2, 10], 20), ([2, None], 40), (None, 50), ([None, 20], 60),
                    (None, 70)]),
])
def test_updates_from_either_side_emit_the_keys_new_result_with_the_later_timestamp(
        kind: str, expected: list[tuple[Any, int]]) -> None:
    builder = StreamsBuilder()
    left, right = tables(builder, caching=False)
    getattr(left, kind)(right, pair).to_stream().to("out", value_serde=Json)
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inputs = {t: driver.create_input_topic(t, String, Long) for t in ("left", "right")}
        for topic, key, value, timestamp in UPDATES:
            inputs[topic].pipe_input(key, value, timestamp=timestamp)
        records = driver.create_output_topic("out", String, Json).read_records_to_list()
        assert [(r.value, r.timestamp) for r in records] == expected


def test_a_materialized_result_is_queryable_and_a_delete_of_a_key_without_a_result_emits_nothing() -> None:
    builder = StreamsBuilder()
    left, right = tables(builder, caching=False)
    joined = left.join(right, lambda a, b: a * b, materialized=Materialized.as_("product").with_caching_disabled())
    assert joined.queryable_store_name == "product"
    joined.to_stream().to("out", value_serde=Long)
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        left_in, right_in = (driver.create_input_topic(t, String, Long) for t in ("left", "right"))
        left_in.pipe_input("a", 2, timestamp=1)
        right_in.pipe_input("a", 3, timestamp=5)
        right_in.pipe_input("b", 4, timestamp=6)
        left_in.pipe_input("b", None, timestamp=7)  # b never had a result: its delete goes nowhere
        assert driver.get_timestamped_key_value_store("product").get_with_timestamp("a") == (6, 5)
        right_in.pipe_input("a", None, timestamp=8)
        assert driver.get_key_value_store("product").get("a") is None
        assert driver.create_output_topic("out", String, Long).read_key_values() == [("a", 6), ("a", None)]
        assert f"{APP}-product-changelog" in driver.produced_topic_names


@pytest.mark.parametrize("materialized", [None, "joined"], ids=["computed", "materialized"])
def test_old_values_reach_a_group_by_so_sums_over_the_join_stay_right(materialized: str | None) -> None:
    builder = StreamsBuilder()
    left, right = tables(builder, caching=False)
    spec = None if materialized is None else Materialized.as_(materialized).with_caching_disabled()
    (left.outer_join(right, lambda a, b: (a or 0) + (b or 0), materialized=spec)
     .group_by(lambda key, total: ("all", total), value_serde=Long)
     .reduce(lambda agg, v: agg + v, lambda agg, v: agg - v, materialized="sum"))
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inputs = {t: driver.create_input_topic(t, String, Long) for t in ("left", "right")}
        state: dict[str, dict[str, int]] = {"left": {}, "right": {}}
        rng = random.Random(11)
        for step in range(300):
            topic, key = rng.choice(["left", "right"]), rng.choice("abcde")
            value = None if rng.random() < 0.25 else rng.randrange(100)
            inputs[topic].pipe_input(key, value)
            if value is None:
                state[topic].pop(key, None)
            else:
                state[topic][key] = value
            expected = sum(state["left"].values()) + sum(state["right"].values())
            # The group keeps its sum (0) once its rows are gone, as Kafka Streams' table reduce does.
            assert driver.get_key_value_store("sum").get("all") in ((expected,) if expected else (0, None)), step


def oracle(kind: str, left: dict[str, int], right: dict[str, int]) -> dict[str, list[Any]]:
    keys = {"join": left.keys() & right.keys(), "left_join": left.keys(),
            "outer_join": left.keys() | right.keys()}[kind]
    return {key: [left.get(key), right.get(key)] for key in keys}


@pytest.mark.parametrize("caching", [True, False], ids=["cached", "uncached"])
@pytest.mark.parametrize("materialized", [False, True], ids=["computed", "materialized"])
@pytest.mark.parametrize("kind", ["join", "left_join", "outer_join"])
def test_random_updates_match_a_plain_join_after_every_update(kind: str, materialized: bool, caching: bool) -> None:
    builder = StreamsBuilder()
    left, right = tables(builder, caching)
    spec = Materialized.as_("result") if materialized else None
    joined = getattr(left, kind)(right, pair, materialized=spec if caching or spec is None
                                 else spec.with_caching_disabled())
    joined.to_stream().to("out", value_serde=Json)
    # A stream joined with the result sees the result as a plain join would compute it.
    builder.stream("probe", key_serde=String, value_serde=Long).left_join(joined, lambda probe, row: row).to(
        "probed", value_serde=Json)
    rng = random.Random(f"{kind}{materialized}{caching}")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inputs = {t: driver.create_input_topic(t, String, Long) for t in ("left", "right", "probe")}
        out, probed = (driver.create_output_topic(t, String, Json) for t in ("out", "probed"))
        state: dict[str, dict[str, int]] = {"left": {}, "right": {}}
        emitted: dict[str, Any] = {}
        for step in range(400):
            topic, key = rng.choice(["left", "right"]), rng.choice("abcdefg")
            value = None if rng.random() < 0.3 else rng.randrange(1000)
            inputs[topic].pipe_input(key, value, timestamp=step)
            if value is None:
                state[topic].pop(key, None)
            else:
                state[topic][key] = value
            for out_key, out_value in out.read_key_values():
                if out_value is None:
                    emitted.pop(out_key, None)
                else:
                    emitted[out_key] = out_value
            expected = oracle(kind, state["left"], state["right"])
            assert emitted == expected, f"step {step}"
            inputs["probe"].pipe_input(key, 0, timestamp=step)
            assert probed.read_value() == expected.get(key)
        if materialized:
            assert dict(driver.get_key_value_store("result").all()) == expected


def test_the_join_needs_both_tables_co_partitioned_and_one_task_sees_both() -> None:
    builder = StreamsBuilder()
    left, right = tables(builder, caching=True)
    joined = left.left_join(right, pair, name="pairs")
    topology = builder.build()
    assert joined.node_name == "pairs"
    assert [(g.operation, g.topics) for g in topology.copartition_groups] == [
        ("table-table left join 'pairs'", ("left", "right"))]
    assert len(topology.subtopologies()) == 1
    assert joined.queryable_store_name is None


def test_table_join_arguments_are_checked() -> None:
    builder = StreamsBuilder()
    left, right = tables(builder, caching=True)
    with pytest.raises(TopologyError, match="joins another KTable"):
        left.join(builder.stream("s"), pair)
    with pytest.raises(TopologyError, match=r"\(other, joiner\) or \(other, foreign_key_extractor, joiner\)"):
        left.join(right)
    with pytest.raises(TopologyError, match="different StreamsBuilders"):
        left.outer_join(tables(StreamsBuilder(), caching=True)[1], pair)


def test_a_joiner_taking_three_arguments_gets_the_key_on_both_sides_and_in_lookups() -> None:
    builder = StreamsBuilder()
    left, right = tables(builder, caching=False)
    joined = left.outer_join(right, lambda key, a, b: f"{key}:{a}:{b}")
    joined.to_stream().to("out", value_serde=String)
    builder.stream("probe", key_serde=String, value_serde=Long).join(joined, lambda probe, row: row).to(
        "probed", value_serde=String)
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        driver.create_input_topic("left", String, Long).pipe_input("k", 1)
        driver.create_input_topic("right", String, Long).pipe_input("k", 2)
        driver.create_input_topic("probe", String, Long).pipe_input("k", 0)
        assert driver.create_output_topic("out", String, String).read_values_to_list() == ["k:1:None", "k:1:2"]
        assert driver.create_output_topic("probed", String, String).read_values_to_list() == ["k:1:2"]


def test_a_filtered_table_joins_through_its_parents_store() -> None:
    builder = StreamsBuilder()
    left, right = tables(builder, caching=False)
    left.filter(lambda key, value: value % 2 == 0).join(right, pair).to_stream().to("out", value_serde=Json)
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        left_in, right_in = (driver.create_input_topic(t, String, Long) for t in ("left", "right"))
        out = driver.create_output_topic("out", String, Json)
        left_in.pipe_input("a", 1)
        right_in.pipe_input("a", 10)  # the left row is filtered out: the right side finds no row
        assert out.is_empty()
        left_in.pipe_input("a", 2)
        right_in.pipe_input("a", 11)
        left_in.pipe_input("a", 3)  # filtered out now: the result is deleted
        assert out.read_values_to_list() == [[2, 10], [2, 11], None]
