"""Dynamic sinks (issue 19, item 5): ``KStream.to(extractor)`` routes each record to the topic a topic name extractor
chooses (Kafka Streams' ``TopicNameExtractor``), through the test driver; the extractor's record context; what an
extractor that raises, an invalid name, a topic the app owns or reads and a missing topic do under each handler; and
the consumers of a topology's sink topics (describe, scaling groups, batch plans, reset roles) with a dynamic sink."""

from __future__ import annotations

import json
from typing import Any

import pytest

from streaming import ErrorContext, ProcessingError, ProductionError, Serdes, StreamsBuilder, Topology, TopologyError
from streaming.batch.plan import BatchPlan
from streaming.naming import dead_letter_topic
from streaming.processor import Processor, PunctuationType, Record, RecordContext
from streaming.reset.topics import classify_topics
from streaming.runtime.dead_letters import error_headers
from streaming.runtime.dynamic_sink import reserved_topics, topic_name_problem
from streaming.runtime.record_collector import KafkaRecordCollector
from streaming.runtime.streams_producer import AtLeastOnceProducer
from streaming.scaling.groups import custom_partitioned, scaling_groups
from streaming.testing import TopologyTestDriver

APP = "dynamic-sinks"
DLQ = dead_letter_topic(APP)
CATEGORIES = {"books", "toys"}


def by_category(key: Any, value: Any, context: RecordContext) -> str:
    return f"lines-{value['category']}"


def lines(extractor: Any = by_category, **to: Any) -> Topology:
    builder = StreamsBuilder()
    stream = builder.stream("lines", key_serde=Serdes.String(), value_serde=Serdes.Json())
    stream.to(extractor, **to)
    return builder.build()


def driver(topology: Topology, handler: str = "fail", existing: set[str] | None = None,
           **settings: Any) -> TopologyTestDriver:
    return TopologyTestDriver(topology, {"application.id": APP, "production.exception.handler": handler,
                                         "processing.exception.handler": handler, **settings},
                              existing_topics=existing)


def pipe(d: TopologyTestDriver, *values: dict[str, Any]) -> None:
    for offset, value in enumerate(values):
        d.pipe_raw("lines", f"o{offset}".encode(), json.dumps(value).encode(), 1_000 + offset,
                   [("trace", f"t{offset}".encode())])


def read(d: TopologyTestDriver, topic: str) -> list[tuple[Any, Any]]:
    return d.create_output_topic(topic, Serdes.String(), Serdes.Json()).read_key_values()


def test_each_record_goes_to_the_topic_of_its_category() -> None:
    with driver(lines(), existing={"lines-books", "lines-toys"}) as d:
        pipe(d, {"category": "books", "n": 0}, {"category": "toys", "n": 1}, {"category": "books", "n": 2})
        assert read(d, "lines-books") == [("o0", {"category": "books", "n": 0}), ("o2", {"category": "books", "n": 2})]
        assert read(d, "lines-toys") == [("o1", {"category": "toys", "n": 1})]
        assert d.produced_topic_names == {"lines-books", "lines-toys"}


def test_without_existing_topics_the_driver_creates_output_topics_on_the_fly() -> None:
    with driver(lines()) as d:
        pipe(d, {"category": "garden"})
        assert read(d, "lines-garden") == [("o0", {"category": "garden"})]


def test_the_produced_serdes_and_partitioner_apply_to_every_topic() -> None:
    chosen: list[tuple[str, int]] = []

    def partitioner(topic: str, key: Any, value: Any, count: int) -> int:
        chosen.append((topic, count))
        return 0

    builder = StreamsBuilder()
    (builder.stream("lines", key_serde=Serdes.String(), value_serde=Serdes.Json())
     .map_values(lambda v: v["category"].upper())
     .to(lambda k, v, c: f"lines-{v.lower()}", value_serde=Serdes.String(), partitioner=partitioner))
    with driver(builder.build()) as d:
        d.pipe_raw("lines", b"o0", b'{"category": "books"}', 1)
        out = d.create_output_topic("lines-books", Serdes.String(), Serdes.Bytes())
        assert out.read_key_value() == ("o0", b"BOOKS")  # the String value serde of to(...), not JSON's '"BOOKS"'
    assert chosen == [("lines-books", 1)]


def test_the_extractor_sees_the_input_records_context_and_the_sent_records_time_and_headers() -> None:
    seen: list[RecordContext] = []

    def extractor(key: Any, value: Any, context: RecordContext) -> str:
        seen.append(context)
        return "out"

    builder = StreamsBuilder()
    (builder.stream("lines", key_serde=Serdes.String(), value_serde=Serdes.Json())
     .process_values(Stamp)
     .to(extractor))
    with driver(builder.build()) as d:
        pipe(d, {"category": "books"}, {"category": "toys"})
    assert seen == [RecordContext("lines", 0, 0, 5_000, [("trace", b"t0"), ("stamped", b"1")]),
                    RecordContext("lines", 0, 1, 5_001, [("trace", b"t1"), ("stamped", b"1")])]


class Stamp(Processor[Any, Any]):
    """Forwards each record with a later timestamp and one more header (what the sink sends, not what came in)."""

    def process(self, record: Record[Any, Any]) -> None:
        self.context.forward(record.with_timestamp(record.timestamp + 4_000)
                             .with_headers([*record.headers, ("stamped", b"1")]))


def test_a_punctuators_output_has_no_input_record_in_its_context() -> None:
    seen: list[RecordContext] = []

    class Tick(Processor[Any, Any]):
        def init(self, context: Any) -> None:
            super().init(context)
            context.schedule(10, PunctuationType.STREAM_TIME, lambda ts: context.forward(Record("tick", {}, ts)))

        def process(self, record: Record[Any, Any]) -> None:
            pass

    topology = (Topology().add_source("src", "lines").add_processor("tick", Tick, "src")
                .add_sink("out", lambda k, v, c: seen.append(c) or "ticks", "tick"))
    with driver(topology) as d:
        pipe(d, {"category": "books"})
        assert read(d, "ticks") == [("tick", {})]
    assert seen == [RecordContext(None, None, None, 1_000, [])]


def test_describe_shows_the_extractor_and_sink_topics_leave_it_out() -> None:
    topology = lines()
    assert "Sink: KSTREAM-SINK-0000000001 (extractor class: test_dynamic_sinks.by_category)" in str(topology.describe())
    assert topology.sink_topics == [] and topology.dynamic_sinks == ["KSTREAM-SINK-0000000001"]
    (sub,) = topology.subtopologies()
    assert sub.sink_topics == () and sub.dynamic_sinks == ("KSTREAM-SINK-0000000001",)
    fixed = StreamsBuilder()
    fixed.stream("lines").to("out")
    assert "Sink: KSTREAM-SINK-0000000001 (topic: out)" in str(fixed.build().describe())


def test_add_sink_refuses_an_internal_dynamic_sink_and_a_topic_of_another_type() -> None:
    with pytest.raises(TopologyError, match="an internal topic cannot be chosen by a topic name extractor"):
        Topology().add_source("src", "in").add_sink("out", by_category, "src", internal=True)
    with pytest.raises(TopologyError, match="topic must be a non-empty string or a topic name extractor"):
        Topology().add_source("src", "in").add_sink("out", 42, "src")  # type: ignore[arg-type]


# -- errors -----------------------------------------------------------------------------------------------------------
def test_an_extractor_that_raises_is_a_processing_error() -> None:
    def broken(key: Any, value: Any, context: RecordContext) -> str:
        return f"lines-{value['missing']}"

    with driver(lines(broken)) as d, pytest.raises(ProcessingError) as raised:
        pipe(d, {"category": "books"})
    message = str(raised.value)
    assert "sink 'KSTREAM-SINK-0000000001': topic name extractor test_dynamic_sinks" in message
    assert "raised for key 'o0': KeyError('missing')" in message and "topic=lines, partition=0, offset=0" in message


def test_an_extractor_that_raises_is_dead_lettered_by_the_processing_handler() -> None:
    with driver(lines(lambda k, v, c: f"lines-{v['missing']}"), "dead_letter") as d:
        pipe(d, {"category": "books"}, {"category": "toys"})
        letters = d.create_output_topic(DLQ, Serdes.Bytes(), Serdes.Bytes()).read_records_to_list()
        assert [(error_headers(r.headers)["stage"], error_headers(r.headers)["type"], r.key) for r in letters] == \
            [("processing", "builtins.KeyError", b"o0"), ("processing", "builtins.KeyError", b"o1")]
        assert d.metrics()["record_errors"] == {"deserialization": 0, "processing": 2, "production": 0}
        assert d.committed_offsets == {("lines", 0): 2}


def test_a_missing_topic_fails_naming_the_topic_the_key_and_the_input_record() -> None:
    with driver(lines(), existing={"lines-books"}) as d:
        with pytest.raises(ProductionError) as raised:
            pipe(d, {"category": "books"}, {"category": "toys"})
        assert str(raised.value) == (
            "sink 'KSTREAM-SINK-0000000001': the topic name extractor chose topic 'lines-toys', which does not exist "
            "on the cluster (a dynamic sink's topics are never created: create it first); key 'o1' (output of the "
            "record at topic 'lines' partition 0 offset 1, task 0_0)")
        assert read(d, "lines-books") == [("o0", {"category": "books"})]
        assert "lines-toys" not in d.produced_topic_names
        assert d.committed_offsets == {("lines", 0): 1}  # nothing committed past it


def test_a_missing_topic_is_dead_lettered_with_its_name_as_the_output_topic() -> None:
    with driver(lines(), "dead_letter", existing={"lines-books"}) as d:
        pipe(d, {"category": "toys"}, {"category": "books"})
        assert read(d, "lines-books") == [("o1", {"category": "books"})]
        (letter,) = d.create_output_topic(DLQ, Serdes.Bytes(), Serdes.Bytes()).read_records_to_list()
        error = error_headers(letter.headers)
        assert (error["stage"], error["source.topic"], error["source.offset"], error["output.topic"]) == \
            ("production", "lines", "0", "lines-toys")
        assert "'lines-toys', which does not exist" in error["message"] and "key 'o0'" in error["message"]
        assert (letter.key, json.loads(letter.value)) == (b"o0", {"category": "toys"})
        assert d.committed_offsets == {("lines", 0): 2}


@pytest.mark.parametrize(("returned", "why"), [
    ("lines/books", "only ASCII letters, digits"), ("", "cannot be empty"), ("..", "cannot be named '..'"),
    ("x" * 250, "at most 249 characters"), (None, "must be a str, got NoneType")])
def test_an_invalid_topic_name_is_a_production_error(returned: Any, why: str) -> None:
    seen: list[tuple[ErrorContext, Exception]] = []

    def skip(context: ErrorContext, error: Exception) -> str:
        seen.append((context, error))
        return "continue"

    with driver(lines(lambda k, v, c: returned), skip) as d:
        pipe(d, {"category": "books"})
        assert d.produced_topic_names == set()
        assert d.metrics()["skipped_records"] == 1
    ((context, error),) = seen
    assert (context.stage, context.topic, context.offset, context.output_topic) == \
        ("production", "lines", 0, returned if isinstance(returned, str) else repr(returned))
    assert isinstance(error, ProductionError) and why in str(error) and "which is not a valid topic name" in str(error)


@pytest.mark.parametrize(("topic", "role"), [
    ("lines", "an input of the application"), (DLQ, "a topic the application owns"),
    (f"{APP}-counts-changelog", "the changelog of store 'counts'")])
def test_a_topic_the_app_reads_or_owns_is_refused(topic: str, role: str) -> None:
    builder = StreamsBuilder()
    stream = builder.stream("lines", key_serde=Serdes.String(), value_serde=Serdes.Json())
    stream.group_by_key().count(materialized="counts")
    stream.to(lambda k, v, c: topic)
    with driver(builder.build()) as d, pytest.raises(ProductionError) as raised:
        pipe(d, {"category": "books"})
    assert f"chose topic {topic!r}, which is {role}: a dynamic sink writes output topics only" in str(raised.value)


def test_topic_name_rules() -> None:
    assert topic_name_problem("lines-books.v2_x") is None
    assert topic_name_problem("a" * 249) is None
    assert topic_name_problem("ümlaut") is not None


# -- the cluster's metadata -------------------------------------------------------------------------------------------
class Listing:
    """A metadata client whose topic list the test changes; counts the reads and refuses to name a topic."""

    def __init__(self, *topics: str) -> None:
        self.topics = set(topics)
        self.reads = 0

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        assert topic is None, "a metadata request naming a topic may auto-create it"
        self.reads += 1
        info = type("TopicInfo", (), {"error": None, "partitions": {0: None}})
        return type("Metadata", (), {"topics": {name: info() for name in self.topics}})()


def test_the_collector_reads_the_topic_list_whole_cached_and_at_a_bounded_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr("streaming.runtime.record_collector.time.monotonic", lambda: clock[0])
    listing = Listing("lines-books")
    collector = KafkaRecordCollector(lambda on_error: AtLeastOnceProducer({}, None, on_error), listing)
    assert collector.topic_exists("lines-books") and listing.reads == 1
    assert collector.topic_exists("lines-books") and listing.reads == 1  # found: never asked again
    assert not collector.topic_exists("lines-toys") and listing.reads == 1  # a miss within a second of a read...
    clock[0] += 1.0
    assert not collector.topic_exists("lines-toys") and listing.reads == 2  # ... re-reads the list after one
    listing.topics.add("lines-toys")
    clock[0] += 0.5
    assert not collector.topic_exists("lines-toys") and listing.reads == 2  # ... at most once a second
    clock[0] += 0.6
    assert collector.topic_exists("lines-toys") and listing.reads == 3


def test_a_topic_list_that_cannot_be_read_stops_the_thread() -> None:
    class Down:
        def list_topics(self, timeout: float = -1) -> Any:
            raise RuntimeError("KafkaError{code=_TRANSPORT}")

    collector = KafkaRecordCollector(lambda on_error: AtLeastOnceProducer({}, None, on_error), Down())
    with pytest.raises(ProductionError, match="cannot check whether topic 'x' exists: .*_TRANSPORT"):
        collector.topic_exists("x")


# -- the consumers of a topology's sink topics ------------------------------------------------------------------------
def routed_counts() -> Topology:
    """Lines counted per key (a changelog, a stream-time topic) and routed by category through a partitioner."""
    builder = StreamsBuilder()
    stream = builder.stream("lines", key_serde=Serdes.String(), value_serde=Serdes.Json())
    stream.group_by_key().count(materialized="counts").to_stream().to("line-counts", value_serde=Serdes.Long())
    stream.to(by_category, partitioner=lambda topic, key, value, n: 0)
    return builder.build()


def test_scaling_groups_and_custom_partitioners_ignore_the_dynamic_sink() -> None:
    topology = routed_counts()
    (group,) = scaling_groups(topology, APP)
    assert group.names("input", "intermediate") == ["lines"]
    assert "" not in group.names()
    assert custom_partitioned(topology, group) == []


def test_reserved_topics_cover_the_apps_inputs_and_owned_topics() -> None:
    topology = routed_counts().bind(APP)
    reserved = reserved_topics(topology, APP)
    assert {"lines", f"{APP}-counts-changelog", DLQ, f"{APP}-metadata", f"{APP}-epoch"} <= set(reserved)
    assert "line-counts" not in reserved and "lines-books" not in reserved


def test_a_batch_plan_takes_the_declared_outputs_as_the_dynamic_sinks_topics() -> None:
    plan = BatchPlan(routed_counts(), APP, {"lines": 2, "line-counts": 2, "lines-books": 3, "lines-toys": 1})
    assert plan.output_topics == ("line-counts",)
    assert plan.dynamic_output_topics == ("lines-books", "lines-toys")
    assert plan.partition_counts["lines-books"] == 3
    assert [sub.id for sub in plan.stages] == [0]


def test_reset_roles_list_only_fixed_outputs() -> None:
    topology = routed_counts().bind(APP)
    roles = classify_topics(topology, APP, {"lines": 2, "line-counts": 2})
    assert roles.inputs == ("lines",) and roles.outputs == ("line-counts",) and roles.intermediates == ()
