"""The Processor API: Topology.add_source/add_processor/add_sink/add_state_store, forward, stores, metadata."""

from __future__ import annotations

from typing import Any

import pytest

from streaming import ProcessingError, Serdes, Stores, StreamsBuilder, Topology, TopologyError
from streaming.processor import Processor, ProcessorContext, Record
from streaming.testing import TopologyTestDriver

CONFIG = {"application.id": "processor-api-test"}

# A runtime bug outside this suite's reach (streaming/runtime/task.py): when building a task fails, StreamTask.__init__
# calls close() before self.group exists, so close() raises AttributeError and hides the real TopologyError.


class Upper(Processor):
    def process(self, record: Record) -> None:
        self.context.forward(record.with_value(record.value.upper()))


class Router(Processor):
    """Sends values starting with 'a' to the child 'to-a' and everything else to all children."""

    def process(self, record: Record) -> None:
        if record.value.startswith("a"):
            self.context.forward(record, to="to-a")
        else:
            self.context.forward(record)


def test_forward_reaches_all_children_and_to_a_named_child() -> None:
    topology = (Topology()
                .add_source("src", "in")
                .add_processor("router", Router, "src")
                .add_sink("to-a", "out-a", "router")
                .add_sink("to-b", "out-b", "router"))
    with TopologyTestDriver(topology, CONFIG) as driver:
        inp = driver.create_input_topic("in")
        out_a, out_b = driver.create_output_topic("out-a"), driver.create_output_topic("out-b")
        inp.pipe_input("1", "apple", timestamp=1)
        inp.pipe_input("2", "banana", timestamp=2)
        assert out_a.read_key_values() == [("1", "apple"), ("2", "banana")]
        assert out_b.read_key_values() == [("2", "banana")]


def test_forward_to_an_unknown_child_fails_clearly() -> None:
    class Bad(Processor):
        def process(self, record: Record) -> None:
            self.context.forward(record, to="nope")

    topology = Topology().add_source("src", "in").add_processor("bad", Bad, "src").add_sink("sink", "out", "bad")
    with TopologyTestDriver(topology, CONFIG) as driver:
        with pytest.raises(ProcessingError) as info:
            driver.create_input_topic("in").pipe_input("k", "v", timestamp=1)
        assert isinstance(info.value.__cause__, TopologyError)
        assert "'nope'" in str(info.value) and "'sink'" in str(info.value)


def test_processor_chain_with_sink_serdes() -> None:
    topology = (Topology()
                .add_source("src", "in", key_serde=Serdes.String(), value_serde=Serdes.String())
                .add_processor("upper", Upper, "src")
                .add_sink("sink", "out", "upper", key_serde=Serdes.String(), value_serde=Serdes.String()))
    with TopologyTestDriver(topology, CONFIG) as driver:
        driver.create_input_topic("in", Serdes.String(), Serdes.String()).pipe_input("k", "hello", timestamp=5)
        raw = driver.create_output_topic("out", Serdes.Bytes(), Serdes.Bytes()).read_record()
        assert (raw.key, raw.value, raw.timestamp) == (b"k", b"HELLO", 5)


def test_forward_can_change_timestamp_and_headers() -> None:
    class Stamp(Processor):
        def process(self, record: Record) -> None:
            self.context.forward(record.with_timestamp(record.timestamp + 1).with_headers([("h", b"1")]))

    topology = Topology().add_source("src", "in").add_processor("p", Stamp, "src").add_sink("sink", "out", "p")
    with TopologyTestDriver(topology, CONFIG) as driver:
        driver.create_input_topic("in").pipe_input("k", 1, timestamp=100, headers=[("orig", b"x")])
        record = driver.create_output_topic("out").read_record()
        assert (record.timestamp, record.headers) == (101, [("h", b"1")])


# -- state stores --------------------------------------------------------------------------------------------

class Counter(Processor):
    """Counts values per key in the store 'counts' and forwards the running count."""

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.store = context.get_state_store("counts")

    def process(self, record: Record) -> None:
        count = (self.store.get(record.key) or 0) + 1
        self.store.put(record.key, count)
        self.context.forward(record.with_value(count))


def counts_store(value_serde: Any = None) -> Any:
    return Stores.key_value_store_builder(Stores.in_memory_key_value_store("counts"), Serdes.String(),
                                          value_serde or Serdes.Long())


def test_get_state_store_with_an_in_memory_store_added_with_add_state_store() -> None:
    topology = (Topology()
                .add_source("src", "in")
                .add_processor("counter", Counter, "src")
                .add_state_store(counts_store(), "counter")
                .add_sink("sink", "out", "counter"))
    with TopologyTestDriver(topology, CONFIG) as driver:
        inp = driver.create_input_topic("in")
        out = driver.create_output_topic("out")
        for key in ["a", "b", "a", "a"]:
            inp.pipe_input(key, "x", timestamp=1)
        assert out.read_key_values() == [("a", 1), ("b", 1), ("a", 2), ("a", 3)]
        store = driver.get_key_value_store("counts")
        assert store.get("a") == 3 and store.get("b") == 1
        assert list(store.all()) == [("a", 3), ("b", 1)]
        assert set(driver.get_all_state_stores()) == {"counts"}
        assert "counts" in str(topology.describe())


def test_store_connected_through_the_dsl_process() -> None:
    builder = StreamsBuilder()
    builder.add_state_store(counts_store())
    builder.stream("in").process(Counter, "counts").to("out", value_serde=Serdes.Long())
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inp = driver.create_input_topic("in")
        out = driver.create_output_topic("out", Serdes.String(), Serdes.Long())
        inp.pipe_input("w", "x", timestamp=1)
        inp.pipe_input("w", "y", timestamp=2)
        assert out.read_key_values() == [("w", 1), ("w", 2)]


def test_store_uses_default_serdes_when_none_given() -> None:
    class Remember(Processor):
        def process(self, record: Record) -> None:
            self.context.get_state_store("counts").put(record.key, record.value)

    builder = Stores.key_value_store_builder(Stores.in_memory_key_value_store("counts"))
    topology = (Topology().add_source("src", "in").add_processor("p", Remember, "src")
                .add_state_store(builder, "p"))
    with TopologyTestDriver(topology, CONFIG) as driver:
        driver.create_input_topic("in").pipe_input("k", {"nested": [1, 2]}, timestamp=1)
        store = driver.get_key_value_store("counts")
        assert store.get("k") == {"nested": [1, 2]}
        assert store.inner.get(b"k") == b'{"nested":[1,2]}'  # String key, Json value by default


def test_unconnected_store_access_in_process_raises_topology_error() -> None:
    class Snoop(Processor):
        def process(self, record: Record) -> None:
            self.context.get_state_store("counts")

    topology = (Topology()
                .add_source("src", "in")
                .add_processor("counter", Counter, "src")
                .add_processor("snoop", Snoop, "src")
                .add_state_store(counts_store(), "counter"))
    with TopologyTestDriver(topology, CONFIG) as driver:
        with pytest.raises(ProcessingError) as info:
            driver.create_input_topic("in").pipe_input("k", "v", timestamp=1)
        cause = info.value.__cause__
        assert isinstance(cause, TopologyError)
        assert "processor 'snoop' has no access to state store 'counts'" in str(cause)
        assert "add_state_store" in str(cause)


def test_unconnected_store_access_in_init_raises_topology_error() -> None:
    class Snoop(Processor):
        def init(self, context: ProcessorContext) -> None:
            context.get_state_store("counts")

        def process(self, record: Record) -> None:
            pass

    topology = (Topology()
                .add_source("src", "in")
                .add_processor("counter", Counter, "src")
                .add_processor("snoop", Snoop, "src")
                .add_state_store(counts_store(), "counter"))
    with pytest.raises(TopologyError, match="processor 'snoop' has no access to state store 'counts'"):
        TopologyTestDriver(topology, CONFIG)


def test_driver_store_lookup_errors() -> None:
    topology = Topology().add_source("src", "in").add_processor("counter", Counter, "src")
    topology.add_state_store(counts_store(), "counter")
    with TopologyTestDriver(topology, CONFIG) as driver:
        with pytest.raises(KeyError, match="no state store named 'missing'"):
            driver.get_state_store("missing")


# -- record metadata -----------------------------------------------------------------------------------------

class Metadata(Processor):
    def process(self, record: Record) -> None:
        ctx = self.context
        self.context.forward(record.with_value({
            "topic": ctx.topic, "partition": ctx.partition, "offset": ctx.offset, "timestamp": ctx.timestamp,
            "headers": [[k, v.decode() if v else v] for k, v in (ctx.headers or [])],
            "task": ctx.task_id, "app": ctx.application_id, "stream_time": ctx.current_stream_time_ms,
        }))


def test_record_metadata_in_context() -> None:
    topology = (Topology()
                .add_source("src", "a", "b")
                .add_processor("meta", Metadata, "src")
                .add_sink("sink", "out", "meta"))
    with TopologyTestDriver(topology, CONFIG) as driver:
        a, b = driver.create_input_topic("a"), driver.create_input_topic("b")
        out = driver.create_output_topic("out")
        a.pipe_input("k", 0, timestamp=50, headers=[("h", b"v")])
        a.pipe_input("k", 0, timestamp=40)
        b.pipe_input("k", 0, timestamp=60)
        values = out.read_values_to_list()
    assert values == [
        {"topic": "a", "partition": 0, "offset": 0, "timestamp": 50, "headers": [["h", "v"]], "task": "0_0",
         "app": "processor-api-test", "stream_time": 50},
        {"topic": "a", "partition": 0, "offset": 1, "timestamp": 40, "headers": [], "task": "0_0",
         "app": "processor-api-test", "stream_time": 50},
        {"topic": "b", "partition": 0, "offset": 0, "timestamp": 60, "headers": [], "task": "0_0",
         "app": "processor-api-test", "stream_time": 60},
    ]


def test_record_metadata_in_context_of_a_single_topic_task() -> None:
    topology = Topology().add_source("src", "in").add_processor("meta", Metadata, "src").add_sink("sink", "out", "meta")
    with TopologyTestDriver(topology, CONFIG) as driver:
        inp = driver.create_input_topic("in")
        for timestamp in (7, 8, 9):
            inp.pipe_input("k", 0, timestamp=timestamp, headers=[("n", str(timestamp).encode())])
        values = driver.create_output_topic("out").read_values_to_list()
    assert [(v["topic"], v["partition"], v["offset"], v["timestamp"], v["headers"]) for v in values] == [
        ("in", 0, 0, 7, [["n", "7"]]), ("in", 0, 1, 8, [["n", "8"]]), ("in", 0, 2, 9, [["n", "9"]])]


def test_processor_lifecycle_init_once_close_on_driver_close() -> None:
    events: list[str] = []

    class Lifecycle(Processor):
        def init(self, context: ProcessorContext) -> None:
            super().init(context)
            events.append("init")

        def process(self, record: Record) -> None:
            events.append(f"process {record.key}")

        def close(self) -> None:
            events.append("close")

    topology = Topology().add_source("src", "in").add_processor("p", Lifecycle, "src")
    with TopologyTestDriver(topology, CONFIG) as driver:
        inp = driver.create_input_topic("in")
        inp.pipe_input("a", 1, timestamp=1)
        inp.pipe_input("b", 2, timestamp=2)
    assert events == ["init", "process a", "process b", "close"]


def test_context_commit_request_is_served_by_the_driver() -> None:
    class Committer(Processor):
        def process(self, record: Record) -> None:
            self.context.commit()

    topology = Topology().add_source("src", "in").add_processor("p", Committer, "src")
    with TopologyTestDriver(topology, CONFIG) as driver:
        driver.create_input_topic("in").pipe_input("a", 1, timestamp=1)
        task = driver._tasks[0]
        assert task.commit_requested is False  # the driver commits after every record
        assert task.consumed == {("in", 0): 1}


def test_supplier_must_return_a_processor() -> None:
    topology = Topology().add_source("src", "in").add_processor("p", lambda: object(), "src")
    with pytest.raises(TopologyError, match="no process"):
        TopologyTestDriver(topology, CONFIG)


def test_record_value_object() -> None:
    record = Record("k", 1, 10)
    assert record.headers == []
    changed = record.with_key("j").with_value(2).with_timestamp(20).with_headers([("a", b"b")])
    assert (changed.key, changed.value, changed.timestamp, changed.headers) == ("j", 2, 20, [("a", b"b")])
    assert (record.key, record.value, record.timestamp) == ("k", 1, 10)
    assert Record("k", 1, 10) == Record("k", 1, 10, [])
    assert Record("k", 1, 10) != Record("k", 1, 11)
