"""TopologyTestDriver: the DESIGN.md example, errors with record coordinates, timestamps, output helpers."""

from __future__ import annotations

import os
from typing import Any

import pytest

from streaming import (
    DeserializationError,
    FieldTimestampExtractor,
    ProcessingError,
    Serdes,
    StreamsBuilder,
    Topology,
)
from streaming.processor import Processor, ProcessorContext, PunctuationType, Record
from streaming.testing import TestRecord, TopologyTestDriver

CONFIG = {"application.id": "driver-test"}


# -- the DESIGN.md example -----------------------------------------------------------------------------------

def test_design_example_verbatim() -> None:
    from streaming import (  # noqa: F401
        JoinWindows,
        KafkaStreams,
        Serdes,
        SessionWindows,
        SlidingWindows,
        Stores,
        StreamsBuilder,
        Suppressed,
        TimeWindows,
        Topology,
        Windowed,
    )
    from streaming.processor import Processor, ProcessorContext, PunctuationType, Record  # noqa: F401
    from streaming.testing import TopologyTestDriver

    builder = StreamsBuilder()
    orders = builder.stream("orders", key_serde=Serdes.String(), value_serde=Serdes.Json())
    orders.filter(lambda k, v: v["amount"] > 10).map_values(lambda v: {**v, "big": True}).to("big-orders")
    counts = orders.group_by_key().count(materialized="order-counts")
    counts.to_stream().to("order-counts-out", value_serde=Serdes.Long())
    topology = builder.build()
    print(topology.describe())

    with TopologyTestDriver(topology, {"application.id": "demo"}) as driver:
        inp = driver.create_input_topic("orders", Serdes.String(), Serdes.Json())
        out = driver.create_output_topic("big-orders", Serdes.String(), Serdes.Json())
        inp.pipe_input("u1", {"amount": 12}, timestamp=1_000)
        assert out.read_key_value() == ("u1", {"amount": 12, "big": True})
        assert driver.get_key_value_store("order-counts").get("u1") == 1

    app = KafkaStreams(topology, {"application.id": "demo", "bootstrap.servers": "127.0.0.1:9092"})
    # The example goes on with `app.start(); ...; app.close()`: starting needs a broker, which unit tests
    # do not have (tests/integration runs KafkaStreams against the embedded one). Closing unstarted is fine.
    assert app.close()


def test_design_example_stateless_part() -> None:
    """The part of the DESIGN.md example that exists today, unchanged but for the stateful lines."""
    builder = StreamsBuilder()
    orders = builder.stream("orders", key_serde=Serdes.String(), value_serde=Serdes.Json())
    orders.filter(lambda k, v: v["amount"] > 10).map_values(lambda v: {**v, "big": True}).to("big-orders")
    topology = builder.build()
    assert "Sink: KSTREAM-SINK-0000000003 (topic: big-orders)" in str(topology.describe())

    with TopologyTestDriver(topology, {"application.id": "demo"}) as driver:
        inp = driver.create_input_topic("orders", Serdes.String(), Serdes.Json())
        out = driver.create_output_topic("big-orders", Serdes.String(), Serdes.Json())
        inp.pipe_input("u1", {"amount": 12}, timestamp=1_000)
        assert out.read_key_value() == ("u1", {"amount": 12, "big": True})
        inp.pipe_input("u2", {"amount": 3}, timestamp=2_000)
        assert out.is_empty()


# -- bad input -----------------------------------------------------------------------------------------------

def test_deserialization_failure_names_topic_partition_and_offset() -> None:
    builder = StreamsBuilder()
    builder.stream("orders", value_serde=Serdes.Json()).to("out")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        raw = driver.create_input_topic("orders", Serdes.String(), Serdes.Bytes())
        raw.pipe_input("k", b'{"ok": true}', timestamp=1)
        raw.pipe_input("k", b"[1, 2]", timestamp=2)
        with pytest.raises(DeserializationError) as info:
            raw.pipe_input("k", b"\xff\xfe not json", timestamp=3)
        error = info.value
        assert (error.topic, error.partition, error.offset) == ("orders", 0, 2)
        message = str(error)
        assert "topic=orders" in message and "partition=0" in message and "offset=2" in message
        assert "cannot deserialize" in message and "not json" in message  # shows the bytes
        assert driver.create_output_topic("out").read_values_to_list() == [{"ok": True}, [1, 2]]


def test_deserialization_failure_of_a_key() -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=Serdes.Long()).to("out")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        with pytest.raises(DeserializationError) as info:
            driver.create_input_topic("in", Serdes.Bytes(), Serdes.Json()).pipe_input(b"abc", 1, timestamp=1)
        assert (info.value.topic, info.value.partition, info.value.offset) == ("in", 0, 0)
        assert "expects 8 bytes" in str(info.value)


def test_deserialization_failure_in_a_multi_topic_task() -> None:
    builder = StreamsBuilder()
    builder.stream("a").merge(builder.stream("b", value_serde=Serdes.Long())).to("out")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        driver.create_input_topic("a").pipe_input("k", 1, timestamp=1)
        b = driver.create_input_topic("b", Serdes.String(), Serdes.Bytes())
        b.pipe_input("k", (7).to_bytes(8, "big"), timestamp=2)
        with pytest.raises(DeserializationError) as info:
            b.pipe_input("k", b"short", timestamp=3)
        assert (info.value.topic, info.value.partition, info.value.offset) == ("b", 0, 1)


def test_processing_error_names_the_offset() -> None:
    builder = StreamsBuilder()
    builder.stream("in").map_values(lambda v: 100 // v).to("out")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inp = driver.create_input_topic("in")
        inp.pipe_input("a", 5, timestamp=1)
        inp.pipe_input("b", 4, timestamp=2)
        with pytest.raises(ProcessingError) as info:
            inp.pipe_input("c", 0, timestamp=3)
        error = info.value
        assert (error.topic, error.partition, error.offset) == ("in", 0, 2)
        assert "offset=2" in str(error) and "ZeroDivisionError" in str(error)
        assert isinstance(error.__cause__, ZeroDivisionError)
        assert driver.create_output_topic("out").read_values_to_list() == [20, 25]


def test_processing_error_in_a_multi_topic_task() -> None:
    builder = StreamsBuilder()
    builder.stream("a").merge(builder.stream("b")).filter(lambda k, v: v["x"] > 0).to("out")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        driver.create_input_topic("a").pipe_input("k", {"x": 1}, timestamp=1)
        with pytest.raises(ProcessingError) as info:
            driver.create_input_topic("b").pipe_input("k", {"y": 1}, timestamp=2)
        assert (info.value.topic, info.value.offset) == ("b", 0)
        assert isinstance(info.value.__cause__, KeyError)


def test_processing_error_from_a_processor() -> None:
    class Failing(Processor):
        def process(self, record: Record) -> None:
            raise RuntimeError(f"cannot handle {record.key}")

    topology = Topology().add_source("src", "in").add_processor("p", Failing, "src")
    with TopologyTestDriver(topology, CONFIG) as driver:
        with pytest.raises(ProcessingError, match="cannot handle k.*topic=in, partition=0, offset=0"):
            driver.create_input_topic("in").pipe_input("k", 1, timestamp=1)


# -- timestamps ----------------------------------------------------------------------------------------------

class StreamTimeProbe(Processor):
    """Forwards each record with the stream time its context shows; punctuates every 100 ms of stream time."""

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        context.schedule(100, PunctuationType.STREAM_TIME,
                         lambda ts: context.forward(Record("punctuate", {"ts": ts}, ts)))

    def process(self, record: Record) -> None:
        self.context.forward(record.with_value({**record.value, "stream_time": self.context.current_stream_time_ms}))


def probe_topology(extractor: Any = None, *extra_topics: str) -> Topology:
    return (Topology().add_source("src", "in", *extra_topics, timestamp_extractor=extractor)
            .add_processor("probe", StreamTimeProbe, "src").add_sink("sink", "out", "probe"))


def test_field_timestamp_extractor_drives_stream_time() -> None:
    with TopologyTestDriver(probe_topology(FieldTimestampExtractor("ts")), CONFIG) as driver:
        inp = driver.create_input_topic("in")
        out = driver.create_output_topic("out")
        for ts in (50, 150, 120, 199, 260):
            inp.pipe_input("k", {"ts": ts}, timestamp=999_999)  # the record's own timestamp is ignored
        assert [(r.key, r.value["ts"], r.timestamp) for r in out.read_records_to_list()] == [
            ("k", 50, 50),
            ("punctuate", 50, 50),  # stream-time punctuation fires with the first record
            ("k", 150, 150),
            ("punctuate", 150, 150),
            ("k", 120, 120),  # out of order: stream time stays 150, no punctuation
            ("k", 199, 199),
            ("k", 260, 260),
            ("punctuate", 260, 260),
        ]


def test_stream_time_in_context_of_a_multi_topic_task() -> None:
    with TopologyTestDriver(probe_topology(FieldTimestampExtractor("ts"), "in2"), CONFIG) as driver:
        inp = driver.create_input_topic("in")
        out = driver.create_output_topic("out")
        for ts in (50, 150, 120):
            inp.pipe_input("k", {"ts": ts}, timestamp=1)
        assert [r.value["stream_time"] for r in out.read_records_to_list() if r.key == "k"] == [50, 150, 150]


def test_stream_time_in_context_includes_the_current_record() -> None:
    with TopologyTestDriver(probe_topology(FieldTimestampExtractor("ts")), CONFIG) as driver:
        inp = driver.create_input_topic("in")
        out = driver.create_output_topic("out")
        for ts in (50, 150, 120):
            inp.pipe_input("k", {"ts": ts}, timestamp=1)
        assert [r.value["stream_time"] for r in out.read_records_to_list() if r.key == "k"] == [50, 150, 150]


def test_default_timestamp_extractor_from_config() -> None:
    config = {**CONFIG, "default.timestamp.extractor": FieldTimestampExtractor("when")}
    builder = StreamsBuilder()
    builder.stream("in").to("out")
    with TopologyTestDriver(builder.build(), config) as driver:
        driver.create_input_topic("in").pipe_input("k", {"when": 1234}, timestamp=1)
        assert driver.create_output_topic("out").read_record().timestamp == 1234


def test_record_timestamp_is_the_default() -> None:
    with TopologyTestDriver(probe_topology(), CONFIG) as driver:
        driver.create_input_topic("in").pipe_input("k", {"ts": 5}, timestamp=700)
        record = driver.create_output_topic("out").read_record()
        assert (record.key, record.timestamp) == ("k", 700)


def test_negative_extracted_timestamp_is_an_error() -> None:
    with TopologyTestDriver(probe_topology(FieldTimestampExtractor("ts")), CONFIG) as driver:
        inp = driver.create_input_topic("in")
        inp.pipe_input("k", {"ts": 10}, timestamp=1)
        with pytest.raises(DeserializationError, match="invalid timestamp -5") as info:
            inp.pipe_input("k", {"ts": -5}, timestamp=1)
        assert (info.value.topic, info.value.offset) == ("in", 1)


def test_missing_timestamp_field_is_an_error() -> None:
    with TopologyTestDriver(probe_topology(FieldTimestampExtractor("ts")), CONFIG) as driver:
        with pytest.raises(DeserializationError, match="no integer timestamp field 'ts'") as info:
            driver.create_input_topic("in").pipe_input("k", {"other": 1}, timestamp=1)
        assert info.value.offset == 0


def test_extractor_gets_the_partition_time() -> None:
    calls: list[tuple[int, int]] = []

    class Recording:
        def extract(self, key: Any, value: Any, record_timestamp: int, partition_time: int) -> int:
            calls.append((record_timestamp, partition_time))
            return record_timestamp

    builder = StreamsBuilder()
    builder.stream("in", timestamp_extractor=Recording()).to("out")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inp = driver.create_input_topic("in")
        for ts in (10, 30, 20):
            inp.pipe_input("k", 1, timestamp=ts)
    assert calls == [(10, -1), (30, 10), (20, 30)]


def test_negative_record_timestamp_is_an_error() -> None:
    builder = StreamsBuilder()
    builder.stream("in").to("out")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        with pytest.raises(DeserializationError, match="invalid timestamp") as info:
            driver.create_input_topic("in").pipe_input("k", 1, timestamp=-1)
        assert (info.value.topic, info.value.partition, info.value.offset) == ("in", 0, 0)


def test_a_function_is_a_timestamp_extractor() -> None:
    builder = StreamsBuilder()
    builder.stream("in", timestamp_extractor=lambda key, value, record_ts, partition_time: value["at"] * 1000).to("out")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        driver.create_input_topic("in").pipe_input("k", {"at": 7}, timestamp=1)
        assert driver.create_output_topic("out").read_record().timestamp == 7000


# -- output helpers ------------------------------------------------------------------------------------------

@pytest.fixture
def passthrough() -> Any:
    builder = StreamsBuilder()
    builder.stream("in").to("out")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        yield driver.create_input_topic("in"), driver.create_output_topic("out"), driver


def test_read_key_values(passthrough: Any) -> None:
    inp, out, _ = passthrough
    inp.pipe_key_value_list([("a", 1), ("b", 2), ("a", 3)])
    assert out.get_queue_size() == 3
    assert out.read_key_values() == [("a", 1), ("b", 2), ("a", 3)]
    assert out.read_key_values() == []
    assert out.is_empty()


def test_read_key_values_to_map_keeps_the_latest_value_tombstones_included(passthrough: Any) -> None:
    """As Kafka Streams' readKeyValuesToMap: a key whose latest value is null maps to None (issue 6)."""
    inp, out, _ = passthrough
    inp.pipe_key_value_list([("a", 1), ("b", 2), ("a", 3), ("b", None), ("c", None), ("d", 4)])
    assert out.read_key_values_to_map() == {"a": 3, "b": None, "c": None, "d": 4}
    assert out.is_empty()


def test_read_records_to_list_keeps_timestamps_and_headers(passthrough: Any) -> None:
    inp, out, _ = passthrough
    inp.pipe_record_list([TestRecord("a", 1, 10, [("h", b"x")]), TestRecord("b", 2, 20)])
    assert out.read_records_to_list() == [TestRecord("a", 1, 10, [("h", b"x")]), TestRecord("b", 2, 20, [])]


def test_reading_an_empty_topic_raises_index_error(passthrough: Any) -> None:
    _, out, driver = passthrough
    assert out.is_empty()
    with pytest.raises(IndexError, match="'out' has no more records"):
        out.read_record()
    with pytest.raises(IndexError):
        out.read_value()
    with pytest.raises(IndexError):
        out.read_key_value()
    assert out.read_records_to_list() == []
    assert out.read_values_to_list() == []
    assert out.read_key_values_to_map() == {}
    never_written = driver.create_output_topic("nothing-here")
    assert never_written.is_empty()


def test_reads_consume_records_in_order(passthrough: Any) -> None:
    inp, out, _ = passthrough
    for index, (key, value) in enumerate([("a", 1), ("b", 2), ("c", 3)]):
        inp.pipe_input(key, value, timestamp=index)
    assert out.read_key_value() == ("a", 1)
    assert out.read_value() == 2
    assert out.read_record() == TestRecord("c", 3, 2)
    assert out.is_empty()


def test_output_topic_created_before_records_sees_them(passthrough: Any) -> None:
    inp, out, driver = passthrough
    late_reader = driver.create_output_topic("out")
    inp.pipe_input("a", 1, timestamp=1)
    assert late_reader.read_key_value() == ("a", 1)
    assert out.is_empty()  # readers of one topic share its queue
    assert driver.produced_topic_names == {"out"}


# -- driver behaviour ----------------------------------------------------------------------------------------

def test_unknown_input_topic() -> None:
    builder = StreamsBuilder()
    builder.stream("in").to("out")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        with pytest.raises(ValueError, match="topic 'nope' is not read by the topology"):
            driver.create_input_topic("nope")


def test_records_written_to_a_topic_the_topology_reads_are_processed_right_away() -> None:
    builder = StreamsBuilder()
    builder.stream("in").map_values(lambda v: v + 1).to("through")
    builder.stream("through").map_values(lambda v: v * 10).to("out")
    topology = builder.build()
    assert len(topology.subtopologies()) == 2
    with TopologyTestDriver(topology, CONFIG) as driver:
        driver.create_input_topic("in").pipe_input("k", 1, timestamp=5)
        out = driver.create_output_topic("out")
        assert [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()] == [("k", 20, 5)]
        assert driver.create_output_topic("through").read_value() == 2


def test_close_removes_the_temporary_state_dir_and_keeps_a_given_one(tmp_path: Any) -> None:
    builder = StreamsBuilder()
    builder.stream("in").to("out")
    driver = TopologyTestDriver(builder.build(), CONFIG)
    state_dir = driver.config["state.dir"]
    assert os.path.isdir(state_dir)
    driver.close()
    assert not os.path.exists(state_dir)
    given = TopologyTestDriver(builder.build(), {**CONFIG, "state.dir": str(tmp_path)})
    given.close()
    assert tmp_path.is_dir()


def test_driver_config_is_validated() -> None:
    from streaming import ConfigError

    builder = StreamsBuilder()
    builder.stream("in").to("out")
    with pytest.raises(ConfigError, match="commit.interval.msec"):
        TopologyTestDriver(builder.build(), {"commit.interval.msec": 1})


def test_default_serdes_from_config_apply_to_driver_topics() -> None:
    builder = StreamsBuilder()
    builder.stream("in").to("out")
    config = {**CONFIG, "default.key.serde": "Integer", "default.value.serde": "Long"}
    with TopologyTestDriver(builder.build(), config) as driver:
        driver.create_input_topic("in").pipe_input(1, 2, timestamp=1)
        raw = driver.create_output_topic("out", Serdes.Bytes(), Serdes.Bytes()).read_record()
        assert (raw.key, raw.value) == ((1).to_bytes(4, "big"), (2).to_bytes(8, "big"))


def test_task_idling_holds_records_until_every_input_has_data_or_the_wall_clock_passes() -> None:
    builder = StreamsBuilder()
    builder.stream("a").merge(builder.stream("b")).to("out")
    config = {**CONFIG, "max.task.idle.ms": 100}
    with TopologyTestDriver(builder.build(), config, initial_wall_clock_time_ms=0) as driver:
        a, b = driver.create_input_topic("a"), driver.create_input_topic("b")
        out = driver.create_output_topic("out")
        a.pipe_input("k", "a10", timestamp=10)
        assert out.is_empty()  # waiting for "b"
        b.pipe_input("k", "b5", timestamp=5)
        assert out.read_values_to_list() == ["b5"]  # lowest timestamp first; "a10" waits for "b" again
        driver.advance_wall_clock_time(99)
        assert out.is_empty()
        driver.advance_wall_clock_time(1)  # idle long enough: process what there is
        assert out.read_values_to_list() == ["a10"]


def test_without_task_idling_records_are_processed_at_once() -> None:
    builder = StreamsBuilder()
    builder.stream("a").merge(builder.stream("b")).to("out")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        driver.create_input_topic("a").pipe_input("k", 1, timestamp=10)
        assert driver.create_output_topic("out").read_value() == 1
