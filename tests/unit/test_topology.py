"""Topology building: errors, sub-topologies and describe()."""

from __future__ import annotations

import pytest

from streaming import Serdes, Stores, StreamsBuilder, Topology, TopologyError
from streaming.processor import Processor, Record


class Noop(Processor):
    def process(self, record: Record) -> None:
        self.context.forward(record)


def store(name: str = "s") -> object:
    return Stores.key_value_store_builder(Stores.in_memory_key_value_store(name), Serdes.String(), Serdes.Long())


# -- errors --------------------------------------------------------------------------------------------------

def test_duplicate_node_name() -> None:
    topology = Topology().add_source("src", "in").add_processor("p", Noop, "src")
    with pytest.raises(TopologyError, match="a node named 'p' is already in this topology"):
        topology.add_processor("p", Noop, "src")
    with pytest.raises(TopologyError, match="'src' is already"):
        topology.add_source("src", "other")
    with pytest.raises(TopologyError, match="'p' is already"):
        topology.add_sink("p", "out", "src")


def test_duplicate_node_name_in_the_dsl() -> None:
    builder = StreamsBuilder()
    stream = builder.stream("in")
    stream.filter(lambda k, v: True, name="f")
    with pytest.raises(TopologyError, match="'f' is already"):
        stream.map_values(lambda v: v, name="f")


def test_unknown_parent() -> None:
    topology = Topology().add_source("src", "in")
    with pytest.raises(TopologyError, match="'p' names parent 'nope', which is not in the topology"):
        topology.add_processor("p", Noop, "nope")
    with pytest.raises(TopologyError, match="'sink' names parent 'ghost'"):
        topology.add_sink("sink", "out", "ghost")


def test_processor_and_sink_need_a_parent() -> None:
    topology = Topology()
    with pytest.raises(TopologyError, match="processor 'p' needs a parent"):
        topology.add_processor("p", Noop)
    with pytest.raises(TopologyError, match="sink 'k' needs a parent"):
        topology.add_sink("k", "out")


def test_a_sink_cannot_be_a_parent() -> None:
    topology = Topology().add_source("src", "in").add_sink("sink", "out", "src")
    with pytest.raises(TopologyError, match="cannot have sink 'sink' as a parent"):
        topology.add_processor("p", Noop, "sink")


def test_store_added_twice() -> None:
    topology = Topology().add_source("src", "in").add_processor("p", Noop, "src").add_state_store(store(), "p")
    with pytest.raises(TopologyError, match="state store 's' is already added"):
        topology.add_state_store(store(), "p")
    builder = StreamsBuilder()
    builder.add_state_store(store())
    with pytest.raises(TopologyError, match="state store 's' is already added"):
        builder.add_state_store(store())


def test_topic_read_by_two_sources() -> None:
    topology = Topology().add_source("a", "orders")
    with pytest.raises(TopologyError, match="topic 'orders' is already read by source 'a'"):
        topology.add_source("b", "users", "orders")
    builder = StreamsBuilder()
    builder.stream("orders")
    with pytest.raises(TopologyError, match="topic 'orders' is already read"):
        builder.stream(["x", "orders"])


def test_processor_using_a_store_never_added() -> None:
    topology = Topology().add_source("src", "in").add_processor("p", Noop, "src")
    with pytest.raises(TopologyError, match="processor 'p' uses state store 'missing', which was never added"):
        topology.connect_processor_and_state_stores("p", store_names=["missing"])
    builder = StreamsBuilder()
    with pytest.raises(TopologyError, match="uses state store 'missing', which was never added"):
        builder.stream("in").process(Noop, "missing")


def test_store_connected_to_an_unknown_processor() -> None:
    topology = Topology().add_source("src", "in")
    with pytest.raises(TopologyError, match="'ghost': no such processor"):
        topology.add_state_store(store(), "ghost")
    with pytest.raises(TopologyError, match="'src': no such processor"):
        topology.connect_processor_and_state_stores("src", store_names=["s"])


@pytest.mark.parametrize("topics", [(), ("",)])
def test_source_needs_topics(topics: tuple[str, ...]) -> None:
    with pytest.raises(TopologyError, match="source 'src'"):
        Topology().add_source("src", *topics)


def test_bad_offset_reset_and_names() -> None:
    with pytest.raises(TopologyError, match="offset_reset must be 'earliest' or 'latest'"):
        Topology().add_source("src", "in", offset_reset="newest")
    with pytest.raises(TopologyError, match="node names must be non-empty strings"):
        Topology().add_source("", "in")
    with pytest.raises(TopologyError, match="sink 'k': topic must be a non-empty string"):
        Topology().add_source("src", "in").add_sink("k", "", "src")
    with pytest.raises(TopologyError, match="supplier must be callable"):
        Topology().add_source("src", "in").add_processor("p", Noop(), "src")  # type: ignore[arg-type]


def test_empty_builder_cannot_build() -> None:
    with pytest.raises(TopologyError, match="no source"):
        StreamsBuilder().build()
    with pytest.raises(TopologyError, match="no nodes"):
        Topology().describe()


# -- sub-topologies and describe() ---------------------------------------------------------------------------

def test_subtopologies_split_at_unconnected_parts_and_join_on_shared_stores() -> None:
    topology = (Topology()
                .add_source("a-src", "a").add_processor("a-p", Noop, "a-src").add_sink("a-sink", "a-out", "a-p")
                .add_source("b-src", "b").add_processor("b-p", Noop, "b-src")
                .add_source("c-src", "c").add_processor("c-p", Noop, "c-src")
                .add_state_store(store("shared"), "b-p", "c-p"))
    subtopologies = topology.subtopologies()
    assert [s.id for s in subtopologies] == [0, 1]
    assert subtopologies[0].source_topics == ("a",) and subtopologies[0].sink_topics == ("a-out",)
    assert subtopologies[1].source_topics == ("b", "c") and subtopologies[1].stores == ("shared",)
    assert topology.source_topics == ["a", "b", "c"]
    assert topology.sink_topics == ["a-out"]


def test_describe_text() -> None:
    topology = (Topology()
                .add_source("src", "in", "in2")
                .add_processor("p", Noop, "src")
                .add_state_store(store("counts"), "p")
                .add_sink("sink-1", "out-1", "p")
                .add_sink("sink-2", "out-2", "p")
                .add_source("other", "side")
                .add_sink("side-sink", "side-out", "other"))
    assert str(topology.describe()) == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: src (topics: [in, in2])\n"
        "      --> p\n"
        "    Processor: p (stores: [counts])\n"
        "      --> sink-1, sink-2\n"
        "      <-- src\n"
        "    Sink: sink-1 (topic: out-1)\n"
        "      <-- p\n"
        "    Sink: sink-2 (topic: out-2)\n"
        "      <-- p\n"
        "   Sub-topology: 1\n"
        "    Source: other (topics: [side])\n"
        "      --> side-sink\n"
        "    Sink: side-sink (topic: side-out)\n"
        "      <-- other\n")
    assert repr(topology) == str(topology.describe())


def test_describe_of_a_dsl_topology_uses_kafka_streams_names() -> None:
    builder = StreamsBuilder()
    builder.stream("orders").filter(lambda k, v: True).map_values(lambda v: v).to("big-orders")
    description = builder.build().describe()
    assert len(description.subtopologies) == 1
    assert [node.name for node in description.subtopologies[0].nodes] == [
        "KSTREAM-SOURCE-0000000000", "KSTREAM-FILTER-0000000001", "KSTREAM-MAPVALUES-0000000002",
        "KSTREAM-SINK-0000000003"]
    assert "Sink: KSTREAM-SINK-0000000003 (topic: big-orders)\n      <-- KSTREAM-MAPVALUES-0000000002" \
        in str(description)


def test_add_methods_chain() -> None:
    topology = Topology()
    assert topology.add_source("s", "t") is topology
    assert topology.add_processor("p", Noop, "s") is topology
    assert topology.add_state_store(store(), "p") is topology
    assert topology.add_sink("k", "o", "p") is topology
    assert topology.node("p").stores == ["s"]
    assert set(topology.store_builders) == {"s"}
