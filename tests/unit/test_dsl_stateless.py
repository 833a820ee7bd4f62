"""Stateless KStream operations, run through the TopologyTestDriver."""

from __future__ import annotations

from typing import Any

import pytest

from streaming import KStream, Serdes, StreamsBuilder, TopologyError
from streaming.testing import TestRecord, TopologyTestDriver

CONFIG = {"application.id": "dsl-stateless-test"}


def run(builder: StreamsBuilder, inputs: list[tuple[Any, Any]], outputs: list[str] = ["out"],
        topic: str = "in", key_serde: Any = None, value_serde: Any = None) -> dict[str, list[tuple[Any, Any]]]:
    """Pipe ``inputs`` into ``topic`` (timestamps 1000, 2000, ...) and read every output topic."""
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inp = driver.create_input_topic(topic, key_serde, value_serde)
        outs = {name: driver.create_output_topic(name) for name in outputs}
        for index, (key, value) in enumerate(inputs, start=1):
            inp.pipe_input(key, value, timestamp=index * 1000)
        return {name: out.read_key_values() for name, out in outs.items()}


# -- filter, filter_not ----------------------------------------------------------------------------------

def test_filter_keeps_matching_records() -> None:
    builder = StreamsBuilder()
    builder.stream("in").filter(lambda k, v: v % 2 == 0).to("out")
    assert run(builder, [("a", 1), ("b", 2), ("c", 3), ("d", 4)])["out"] == [("b", 2), ("d", 4)]


def test_filter_not_drops_matching_records() -> None:
    builder = StreamsBuilder()
    builder.stream("in").filter_not(lambda k, v: v % 2 == 0).to("out")
    assert run(builder, [("a", 1), ("b", 2), ("c", 3), ("d", 4)])["out"] == [("a", 1), ("c", 3)]


def test_filter_predicate_sees_key_and_value() -> None:
    builder = StreamsBuilder()
    builder.stream("in").filter(lambda k, v: k.startswith("keep") and v is not None).to("out")
    assert run(builder, [("keep-1", 1), ("drop", 2), ("keep-2", None), ("keep-3", 3)])["out"] == [
        ("keep-1", 1), ("keep-3", 3)]


# -- map, map_values, select_key ----------------------------------------------------------------------------

def test_map_replaces_key_and_value() -> None:
    builder = StreamsBuilder()
    builder.stream("in").map(lambda k, v: (v["user"], {"from": k, "n": v["n"] * 10})).to("out")
    result = run(builder, [("o1", {"user": "u1", "n": 1}), ("o2", {"user": "u2", "n": 2})])
    assert result["out"] == [("u1", {"from": "o1", "n": 10}), ("u2", {"from": "o2", "n": 20})]


def test_map_values_with_value_only_and_with_key() -> None:
    builder = StreamsBuilder()
    stream = builder.stream("in")
    stream.map_values(lambda v: v.upper()).to("out")
    stream.map_values(lambda k, v: f"{k}={v}").to("out-with-key")
    result = run(builder, [("a", "x"), ("b", "y")], outputs=["out", "out-with-key"])
    assert result["out"] == [("a", "X"), ("b", "Y")]
    assert result["out-with-key"] == [("a", "a=x"), ("b", "b=y")]


def test_map_values_with_a_builtin_takes_the_value() -> None:
    builder = StreamsBuilder()
    builder.stream("in").map_values(len).to("out")
    assert run(builder, [("a", "xyz")])["out"] == [("a", 3)]


def test_select_key_sets_the_key_and_keeps_the_value() -> None:
    builder = StreamsBuilder()
    builder.stream("in").select_key(lambda k, v: v["user"]).to("out")
    result = run(builder, [(None, {"user": "u1"}), ("x", {"user": "u2"})])
    assert result["out"] == [("u1", {"user": "u1"}), ("u2", {"user": "u2"})]


# -- flat_map, flat_map_values -------------------------------------------------------------------------------

def test_flat_map_emits_zero_or_more_records() -> None:
    builder = StreamsBuilder()
    builder.stream("in").flat_map(lambda k, v: [(f"{k}-{i}", i) for i in range(v)]).to("out")
    assert run(builder, [("a", 2), ("b", 0), ("c", 1)])["out"] == [("a-0", 0), ("a-1", 1), ("c-0", 0)]


def test_flat_map_values_splits_values_and_keeps_the_key() -> None:
    builder = StreamsBuilder()
    stream = builder.stream("in")
    stream.flat_map_values(lambda v: v.split()).to("out")
    stream.flat_map_values(lambda k, v: [k] * len(v.split())).to("out-with-key")
    result = run(builder, [("l1", "hello brook world"), ("l2", ""), ("l3", "bye")],
                 outputs=["out", "out-with-key"])
    assert result["out"] == [("l1", "hello"), ("l1", "brook"), ("l1", "world"), ("l3", "bye")]
    assert result["out-with-key"] == [("l1", "l1"), ("l1", "l1"), ("l1", "l1"), ("l3", "l3")]


def test_flat_map_values_accepts_a_generator() -> None:
    builder = StreamsBuilder()
    builder.stream("in").flat_map_values(lambda v: (c for c in v)).to("out")
    assert run(builder, [("k", "ab")])["out"] == [("k", "a"), ("k", "b")]


# -- peek, foreach -------------------------------------------------------------------------------------------

def test_peek_sees_every_record_and_passes_it_on() -> None:
    seen: list[tuple[Any, Any]] = []
    builder = StreamsBuilder()
    builder.stream("in").peek(lambda k, v: seen.append((k, v))).filter(lambda k, v: v > 1).to("out")
    result = run(builder, [("a", 1), ("b", 2)])
    assert seen == [("a", 1), ("b", 2)]
    assert result["out"] == [("b", 2)]


def test_foreach_is_terminal_and_sees_every_record() -> None:
    seen: list[tuple[Any, Any]] = []
    builder = StreamsBuilder()
    stream = builder.stream("in")
    assert stream.foreach(lambda k, v: seen.append((k, v))) is None
    stream.to("out")
    result = run(builder, [("a", 1), ("b", {"x": [1, 2]})])
    assert seen == [("a", 1), ("b", {"x": [1, 2]})]
    assert result["out"] == [("a", 1), ("b", {"x": [1, 2]})]


def test_operations_chain_in_order() -> None:
    builder = StreamsBuilder()
    (builder.stream("in")
     .flat_map_values(lambda v: v.split())
     .filter(lambda k, v: len(v) > 2)
     .map_values(str.upper)
     .select_key(lambda k, v: v[0])
     .to("out"))
    assert run(builder, [("l", "a big red fox jumps")])["out"] == [("B", "BIG"), ("R", "RED"), ("F", "FOX"),
                                                                     ("J", "JUMPS")]


# -- serdes travel with the stream ---------------------------------------------------------------------------

def _long_input(builder: StreamsBuilder) -> KStream:
    return builder.stream("in", key_serde=Serdes.String(), value_serde=Serdes.Long())


def test_filter_keeps_the_value_serde_for_to() -> None:
    builder = StreamsBuilder()
    _long_input(builder).filter(lambda k, v: v > 0).to("out")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        driver.create_input_topic("in", Serdes.String(), Serdes.Long()).pipe_input("k", 7, timestamp=1)
        raw = driver.create_output_topic("out", Serdes.Bytes(), Serdes.Bytes()).read_record()
        assert raw.key == b"k"
        assert raw.value == (7).to_bytes(8, "big")


def test_map_values_drops_the_value_serde_so_default_json_applies() -> None:
    builder = StreamsBuilder()
    _long_input(builder).map_values(lambda v: v + 1).to("out")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        driver.create_input_topic("in", Serdes.String(), Serdes.Long()).pipe_input("k", 41, timestamp=1)
        raw = driver.create_output_topic("out", Serdes.Bytes(), Serdes.Bytes()).read_record()
        assert raw.key == b"k"  # the key serde is kept
        assert raw.value == b"42"  # JSON, not an 8-byte long


def test_explicit_sink_serde_wins_over_the_stream_serde() -> None:
    builder = StreamsBuilder()
    _long_input(builder).to("out", value_serde=Serdes.Integer())
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        driver.create_input_topic("in", Serdes.String(), Serdes.Long()).pipe_input("k", 5, timestamp=1)
        assert driver.create_output_topic("out", Serdes.Bytes(), Serdes.Bytes()).read_value() == b"\x00\x00\x00\x05"


def test_select_key_drops_the_key_serde_and_keeps_the_value_serde() -> None:
    builder = StreamsBuilder()
    stream = builder.stream("in", key_serde=Serdes.Integer(), value_serde=Serdes.Long())
    selected = stream.select_key(lambda k, v: f"key-{k}")
    assert selected.key_serde is None and selected.value_serde is stream.value_serde
    selected.to("out")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        driver.create_input_topic("in", Serdes.Integer(), Serdes.Long()).pipe_input(3, 9, timestamp=1)
        raw = driver.create_output_topic("out", Serdes.Bytes(), Serdes.Bytes()).read_record()
        assert (raw.key, raw.value) == (b"key-3", (9).to_bytes(8, "big"))


def test_serde_propagation_rules() -> None:
    builder = StreamsBuilder()
    key_serde, value_serde = Serdes.String(), Serdes.Long()
    stream = builder.stream("in", key_serde=key_serde, value_serde=value_serde)
    for kept in (stream.filter(lambda k, v: True), stream.filter_not(lambda k, v: True),
                 stream.peek(lambda k, v: None)):
        assert (kept.key_serde, kept.value_serde) == (key_serde, value_serde)
    for value_changed in (stream.map_values(lambda v: v), stream.flat_map_values(lambda v: [v])):
        assert (value_changed.key_serde, value_changed.value_serde) == (key_serde, None)
    for both_changed in (stream.map(lambda k, v: (k, v)), stream.flat_map(lambda k, v: [(k, v)])):
        assert (both_changed.key_serde, both_changed.value_serde) == (None, None)
    branches = stream.split().branch(lambda k, v: True, name="a").default_branch()
    assert all((b.key_serde, b.value_serde) == (key_serde, value_serde) for b in branches.values())


def test_to_with_a_default_serde_from_config() -> None:
    builder = StreamsBuilder()
    builder.stream("in").map_values(lambda v: v * 2).to("out")
    config = {**CONFIG, "default.value.serde": "Long"}
    with TopologyTestDriver(builder.build(), config) as driver:
        driver.create_input_topic("in").pipe_input("k", 21, timestamp=1)
        assert driver.create_output_topic("out", Serdes.String(), Serdes.Bytes()).read_value() == \
            (42).to_bytes(8, "big")
        assert driver.create_output_topic("out").is_empty()


# -- split / branch ------------------------------------------------------------------------------------------

def test_split_with_named_branches_and_default_branch() -> None:
    builder = StreamsBuilder()
    branches = (builder.stream("in").split(name="size-")
                .branch(lambda k, v: v < 10, name="small")
                .branch(lambda k, v: v < 100, name="medium")
                .default_branch(name="large"))
    assert list(branches) == ["size-small", "size-medium", "size-large"]
    for name, stream in branches.items():
        stream.to(name)
    result = run(builder, [("a", 5), ("b", 50), ("c", 500), ("d", 9)],
                 outputs=["size-small", "size-medium", "size-large"])
    # a record goes to the FIRST matching branch only (5 also matches "medium")
    assert result == {"size-small": [("a", 5), ("d", 9)], "size-medium": [("b", 50)],
                      "size-large": [("c", 500)]}


def test_split_default_names_are_positions_and_zero_for_default() -> None:
    builder = StreamsBuilder()
    branches = (builder.stream("in").split()
                .branch(lambda k, v: v == 1)
                .branch(lambda k, v: v == 2)
                .default_branch())
    assert list(branches) == ["1", "2", "0"]
    for name, stream in branches.items():
        stream.to(f"out-{name}")
    result = run(builder, [("a", 1), ("b", 2), ("c", 3)], outputs=["out-1", "out-2", "out-0"])
    assert result == {"out-1": [("a", 1)], "out-2": [("b", 2)], "out-0": [("c", 3)]}


def test_split_without_default_branch_drops_unmatched_records() -> None:
    builder = StreamsBuilder()
    branches = (builder.stream("in").split(name="s-")
                .branch(lambda k, v: v == "x", name="x")
                .no_default_branch())
    assert list(branches) == ["s-x"]
    branches["s-x"].to("out")
    builder.stream("other").to("unused")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inp = driver.create_input_topic("in")
        out = driver.create_output_topic("out")
        for key, value in [("a", "x"), ("b", "y"), ("c", "x")]:
            inp.pipe_input(key, value, timestamp=1)
        assert out.read_key_values() == [("a", "x"), ("c", "x")]
        assert driver.produced_topic_names == {"out"}


def test_split_chain_builds_on_the_branch() -> None:
    chained: list[KStream] = []

    def evens(stream: KStream) -> None:
        chained.append(stream)
        stream.map_values(lambda v: v * 100).to("evens")

    builder = StreamsBuilder()
    (builder.stream("in").split()
     .branch(lambda k, v: v % 2 == 0, name="even", chain=evens)
     .default_branch(name="odd", chain=lambda s: s.to("odds")))
    assert len(chained) == 1 and isinstance(chained[0], KStream)
    result = run(builder, [("a", 1), ("b", 2), ("c", 4)], outputs=["evens", "odds"])
    assert result == {"evens": [("b", 200), ("c", 400)], "odds": [("a", 1)]}


def test_split_rejects_duplicate_branch_names_and_late_branches() -> None:
    builder = StreamsBuilder()
    split = builder.stream("in").split().branch(lambda k, v: True, name="a")
    with pytest.raises(TopologyError, match="'a' is defined twice"):
        split.branch(lambda k, v: True, name="a")
    split.no_default_branch()
    with pytest.raises(TopologyError, match="no branch can be added"):
        split.branch(lambda k, v: True, name="b")


def test_branch_with_predicates_returns_streams_in_order() -> None:
    builder = StreamsBuilder()
    streams = builder.stream("in").branch(lambda k, v: v.startswith("a"), lambda k, v: v.startswith("b"))
    assert len(streams) == 2
    streams[0].to("a")
    streams[1].to("b")
    result = run(builder, [("1", "apple"), ("2", "banana"), ("3", "cherry"), ("4", "avocado")],
                 outputs=["a", "b"])
    assert result == {"a": [("1", "apple"), ("4", "avocado")], "b": [("2", "banana")]}


def test_branch_needs_a_predicate() -> None:
    with pytest.raises(TopologyError, match="at least one predicate"):
        StreamsBuilder().stream("in").branch()


# -- merge ---------------------------------------------------------------------------------------------------

def test_merge_of_two_source_topics() -> None:
    builder = StreamsBuilder()
    left = builder.stream("left").map_values(lambda v: f"L:{v}")
    right = builder.stream("right").map_values(lambda v: f"R:{v}")
    left.merge(right).to("out")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        lin = driver.create_input_topic("left")
        rin = driver.create_input_topic("right")
        out = driver.create_output_topic("out")
        lin.pipe_input("k1", 1, timestamp=10)
        rin.pipe_input("k2", 2, timestamp=20)
        lin.pipe_input("k3", 3, timestamp=30)
        records = out.read_records_to_list()
        assert [(r.key, r.value, r.timestamp) for r in records] == [
            ("k1", "L:1", 10), ("k2", "R:2", 20), ("k3", "L:3", 30)]


def test_merge_keeps_a_serde_only_when_both_share_it() -> None:
    builder = StreamsBuilder()
    long_serde = Serdes.Long()
    a = builder.stream("a", value_serde=long_serde)
    b = builder.stream("b", value_serde=long_serde)
    c = builder.stream("c", value_serde=Serdes.Long())
    assert a.merge(b).value_serde is long_serde
    assert a.merge(c).value_serde is None


def test_merge_across_builders_is_refused() -> None:
    with pytest.raises(TopologyError, match="different StreamsBuilders"):
        StreamsBuilder().stream("a").merge(StreamsBuilder().stream("b"))


# -- to() with a partitioner, timestamps and headers ---------------------------------------------------------

def test_to_with_a_custom_partitioner_gets_one_partition_in_the_driver() -> None:
    calls: list[tuple[str, Any, Any, int]] = []

    def partitioner(topic: str, key: Any, value: Any, num_partitions: int) -> int:
        calls.append((topic, key, value, num_partitions))
        return 0

    builder = StreamsBuilder()
    builder.stream("in").to("out", partitioner=partitioner)
    assert run(builder, [("k1", {"a": 1}), ("k2", 2)])["out"] == [("k1", {"a": 1}), ("k2", 2)]
    assert calls == [("out", "k1", {"a": 1}, 1), ("out", "k2", 2, 1)]


def test_a_partitioner_returning_none_uses_the_default() -> None:
    builder = StreamsBuilder()
    builder.stream("in").to("out", partitioner=lambda topic, key, value, n: None)
    assert run(builder, [("k", 1)])["out"] == [("k", 1)]


def test_timestamps_and_headers_pass_through_operations() -> None:
    builder = StreamsBuilder()
    (builder.stream("in").filter(lambda k, v: True).map(lambda k, v: (k.upper(), v + 1))
     .flat_map_values(lambda v: [v, v]).to("out"))
    headers = [("trace", b"abc"), ("empty", None)]
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inp = driver.create_input_topic("in")
        out = driver.create_output_topic("out")
        inp.pipe_input("k", 1, timestamp=12_345, headers=headers)
        inp.pipe_record(TestRecord("j", 5, 99))
        records = out.read_records_to_list()
    assert [(r.key, r.value, r.timestamp, r.headers) for r in records] == [
        ("K", 2, 12_345, headers), ("K", 2, 12_345, headers), ("J", 6, 99, []), ("J", 6, 99, [])]


def test_input_topic_auto_advance_sets_timestamps() -> None:
    builder = StreamsBuilder()
    builder.stream("in").to("out")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inp = driver.create_input_topic("in", start_timestamp=1_000, auto_advance=250)
        out = driver.create_output_topic("out")
        inp.pipe_key_value_list([("a", 1), ("b", 2)])
        inp.advance_time(1_000)
        inp.pipe_value_list([3])
        assert [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()] == [
            ("a", 1, 1_000), ("b", 2, 1_250), (None, 3, 2_500)]


def test_node_names_can_be_given() -> None:
    builder = StreamsBuilder()
    stream = builder.stream("in", name="orders-source").filter(lambda k, v: True, name="only-some")
    assert stream.node_name == "only-some"
    stream.to("out", name="out-sink")
    text = str(builder.build().describe())
    assert "Source: orders-source (topics: [in])" in text
    assert "Processor: only-some (stores: [])" in text
    assert "Sink: out-sink (topic: out)" in text
