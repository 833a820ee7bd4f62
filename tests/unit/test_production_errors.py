"""Production errors name the input record (issue 16, item 7), through the test driver: a record the producer refuses
(``producer.message.max.bytes``) under each handler — the error, the handler's context and the dead letter name
the source topic, partition and offset and the output topic — against a model of Kafka Streams' rule written here.
And, through the record collector, a record the broker rejects after it was sent names the input records it may be
the output of (a delivery report knows only the output; see streaming.runtime.record_collector).

The model (Kafka Streams' source, KIP-1033): the sink hands the record collector the task's record context with
each send (``SinkNode.process``), and ``production.exception.handler`` gets it (``RecordCollectorImpl``): the input
record being processed; for an output a cache flush sends, the cached entry's context (the input record that last
wrote it); for a punctuator's output, none (no topic, partition -1, offset -1).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message

from streaming import ErrorContext, ProductionError, Serdes, StreamsBuilder
from streaming.naming import dead_letter_topic
from streaming.processor import Processor, ProcessorContext, PunctuationType, Record
from streaming.runtime import streams_producer
from streaming.runtime.dead_letters import DeadLetterWriter, error_headers, original_headers
from streaming.runtime.error_handlers import DESERIALIZATION, PROCESSING, PRODUCTION, RecordErrorHandlers
from streaming.runtime.record_collector import KafkaRecordCollector
from streaming.runtime.streams_producer import AtLeastOnceProducer
from streaming.testing import TopologyTestDriver

APP = "production-errors"
DLQ = dead_letter_topic(APP)
LIMIT = 1_000  # producer.message.max.bytes
SIZES = [10, 5_000, 20, 3_000, 30]  # the padding each input asks for, in offset order
HANDLER_KEY = "production.exception.handler"


def padding() -> StreamsBuilder:
    builder = StreamsBuilder()
    (builder.stream("in", key_serde=Serdes.String(), value_serde=Serdes.Json())
     .map_values(lambda value: {"pad": "x" * value["size"]})
     .to("out", key_serde=Serdes.String(), value_serde=Serdes.Json()))
    return builder


def refused(sizes: list[int]) -> list[int]:
    """The model: the offsets whose output (key "k<offset>", value {"pad": ...}) is over the limit."""
    return [offset for offset, size in enumerate(sizes)
            if len(f"k{offset}") + len(json.dumps({"pad": "x" * size}, separators=(",", ":"))) > LIMIT]


def config(handler: Any) -> dict[str, Any]:
    return {"application.id": APP, HANDLER_KEY: handler, "producer.message.max.bytes": LIMIT}


def pipe_all(driver: TopologyTestDriver) -> None:
    for offset, size in enumerate(SIZES):
        driver.pipe_raw("in", f"k{offset}".encode(), json.dumps({"size": size}).encode(), 1_000 + offset,
                        [("trace", f"t{offset}".encode())])


def named(offset: int) -> str:
    return f"(output of the record at topic 'in' partition 0 offset {offset}, task 0_0)"


def test_fail_names_the_input_record_and_the_output_topic() -> None:
    assert refused(SIZES) == [1, 3]
    with TopologyTestDriver(padding().build(), config("fail")) as driver:
        with pytest.raises(ProductionError) as raised:
            pipe_all(driver)
        first = refused(SIZES)[0]
        message = str(raised.value)
        assert message.startswith("cannot send to topic 'out' (partition -1): ")
        assert "MSG_SIZE_TOO_LARGE" in message and message.endswith(named(first))
        assert driver.committed_offsets == {("in", 0): first}  # nothing committed past it


def test_dead_letter_keeps_the_input_record_with_its_source_and_output_topic() -> None:
    with TopologyTestDriver(padding().build(), config("dead_letter")) as driver:
        out = driver.create_output_topic("out", Serdes.String(), Serdes.Json())
        dlq = driver.create_output_topic(DLQ, Serdes.Bytes(), Serdes.Bytes())
        pipe_all(driver)
        bad = refused(SIZES)
        assert [k for k, _ in out.read_key_values()] == [f"k{o}" for o in range(len(SIZES)) if o not in bad]
        letters = dlq.read_records_to_list()
        assert [(r.key, r.value, r.timestamp) for r in letters] == \
            [(f"k{o}".encode(), json.dumps({"size": SIZES[o]}).encode(), 1_000 + o) for o in bad]
        for letter, offset in zip(letters, bad, strict=True):
            error = error_headers(letter.headers)
            assert (error["stage"], error["record"], error["source.topic"], error["source.partition"],
                    error["source.offset"], error["output.topic"], error["output.partition"]) == \
                ("production", "input", "in", "0", str(offset), "out", "-1")
            assert error["message"].endswith(named(offset)) and "'out'" in error["message"]
            assert original_headers(letter.headers) == [("trace", f"t{offset}".encode())]
        assert driver.metrics()["record_errors"]["production"] == 2
        assert driver.committed_offsets == {("in", 0): len(SIZES)}


def test_log_and_continue_logs_the_input_record(caplog: pytest.LogCaptureFixture) -> None:
    with TopologyTestDriver(padding().build(), config("log_and_continue")) as driver:
        with caplog.at_level(logging.WARNING, logger="streaming.runtime.error_handlers"):
            pipe_all(driver)
        lines = [r.getMessage() for r in caplog.records]
        assert [line.split(" skipped")[0] for line in lines] == \
            [f"production error at topic in partition 0 offset {o}" for o in refused(SIZES)]
        assert all(line.endswith(named(o)) and "'out'" in line for line, o in zip(lines, refused(SIZES), strict=True))
        assert driver.metrics()["skipped_records"] == 2


def test_a_user_handler_gets_the_input_record_and_the_output_topic() -> None:
    seen: list[ErrorContext] = []

    def skip(context: ErrorContext, error: Exception) -> str:
        seen.append(context)
        return "continue"

    with TopologyTestDriver(padding().build(), config(skip)) as driver:
        pipe_all(driver)
    assert [(c.stage, c.task_id, c.topic, c.partition, c.offset, c.output_topic, c.output_partition, c.has_input)
            for c in seen] == [("production", "0_0", "in", 0, o, "out", -1, True) for o in refused(SIZES)]
    assert [c.value for c in seen] == [json.dumps({"size": SIZES[o]}).encode() for o in refused(SIZES)]


def test_an_output_a_cache_flush_sends_names_the_input_record_that_last_wrote_its_entry() -> None:
    builder = StreamsBuilder()
    (builder.stream("in", key_serde=Serdes.String(), value_serde=Serdes.String()).group_by_key()
     .count(materialized="counts").to_stream().map_values(lambda count: "x" * 400 * count)
     .to("out", key_serde=Serdes.String(), value_serde=Serdes.String()))
    with TopologyTestDriver(builder.build(), config("dead_letter")) as driver:
        out = driver.create_output_topic("out", Serdes.String(), Serdes.String())
        dlq = driver.create_output_topic(DLQ, Serdes.Bytes(), Serdes.Bytes())
        for offset in range(4):  # the third count's output is over the limit
            driver.pipe_raw("in", b"k", b"v", 1_000 + offset)
        assert [len(v) for v in out.read_values_to_list()] == [400, 800]
        # Model: the flush after each record sends the count's output, in the context of the record that last
        # wrote the entry (that record). The output does not fit a dead letter either: it holds no bytes.
        letters = dlq.read_records_to_list()
        assert [(r.key, r.value, r.timestamp) for r in letters] == [(None, None, 1_002), (None, None, 1_003)]
        for letter, offset in zip(letters, [2, 3], strict=True):
            error = error_headers(letter.headers)
            assert (error["record"], error["source.topic"], error["source.offset"], error["output.topic"]) == \
                ("none", "in", str(offset), "out")
            assert named(offset) in error["message"] and "did not fit producer.message.max.bytes" in error["message"]
        assert driver.metrics()["dead_letter_records"] == 2


def test_a_refused_record_too_large_for_a_dead_letter_leaves_one_without_its_bytes() -> None:
    """The issue's case: a record passed through as it is, too large to send, is too large to dead-letter with
    its bytes too; the dead letter keeps only where it is (before, the dead-letter write failed and stopped the
    app under dead_letter)."""
    builder = StreamsBuilder()
    builder.stream("in", key_serde=Serdes.String(), value_serde=Serdes.String()).to("out")
    with TopologyTestDriver(builder.build(), config("dead_letter")) as driver:
        out = driver.create_output_topic("out", Serdes.String(), Serdes.String())
        dlq = driver.create_output_topic(DLQ, Serdes.Bytes(), Serdes.Bytes())
        for offset, size in enumerate([10, 3 * LIMIT, 20]):
            driver.pipe_raw("in", b"k", b"x" * size, 1_000 + offset, [("trace", b"t")])
        assert [len(v) for v in out.read_values_to_list()] == [10, 20]
        [letter] = dlq.read_records_to_list()
        error = error_headers(letter.headers)
        assert (letter.key, letter.value, letter.timestamp, original_headers(letter.headers)) == (None, None, 1_001, [])
        assert (error["record"], error["source.topic"], error["source.offset"], error["output.topic"]) == \
            ("none", "in", "1", "out")
        assert named(1) in error["message"] and "did not fit producer.message.max.bytes" in error["message"]


class BigTicker(Processor):
    """Its wall-clock punctuator forwards a record too large to send."""

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        context.schedule(10, PunctuationType.WALL_CLOCK_TIME, self.tick)

    def process(self, record: Record) -> None:
        pass

    def tick(self, timestamp: int) -> None:
        self.context.forward(Record("tick", "x" * 2 * LIMIT, timestamp))


def test_a_punctuators_output_has_no_input_record() -> None:
    builder = StreamsBuilder()
    (builder.stream("in", key_serde=Serdes.String(), value_serde=Serdes.String())
     .process(BigTicker).to("out", key_serde=Serdes.String(), value_serde=Serdes.String()))
    with TopologyTestDriver(builder.build(), config("dead_letter"), initial_wall_clock_time_ms=0) as driver:
        dlq = driver.create_output_topic(DLQ, Serdes.Bytes(), Serdes.Bytes())
        driver.advance_wall_clock_time(10)
        [letter] = dlq.read_records_to_list()
        error = error_headers(letter.headers)
        assert (letter.key, letter.timestamp, error["record"], error["output.topic"]) == (None, 10, "none", "out")
        assert not any(key.startswith("source.") for key in error)
        assert "output of" not in error["message"]


# -- records that fail after they were sent (a delivery report) ------------------------------------------------

class RejectingProducer:
    """confluent-kafka's ``Producer`` as the at-least-once producer uses it, before a broker that rejects every
    record of topic "out" after it was sent (MSG_SIZE_TOO_LARGE in the delivery report), as Apache Kafka does
    for a record over the topic's ``max.message.bytes``: the embedded broker rejects nothing (measured: 250 MB
    records, a topic's max.message.bytes ignored), so only a stand-in reaches this path."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._report = config["on_delivery"]
        self._in_flight: list[Message] = []
        self.accepted: list[Message] = []

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int = -1,
                callback: Any = None, on_delivery: Any = None, timestamp: int = 0, headers: Any = None) -> None:
        """confluent-kafka's signature (the runtime passes everything by position)."""
        self._in_flight.append(Message(topic=topic, partition=max(partition, 0), key=key, value=value,
                                       headers=headers))

    def poll(self, timeout: float = 0) -> int:
        served, self._in_flight = self._in_flight, []
        for message in served:
            if message.topic() == "out":
                self._report(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), message)
            else:
                self.accepted.append(message)
        return len(served)

    def flush(self, timeout: float = 0) -> int:
        self.poll()
        return 0


INPUTS_NAMED = " (output of a record processed since the last commit, none of them committed: task 0_0: topic 'in' " \
               "partition 0 offsets 5-9)"


def rejecting_collector(monkeypatch: pytest.MonkeyPatch, handler: str) -> KafkaRecordCollector:
    monkeypatch.setattr(streams_producer, "Producer", RejectingProducer)
    collector = KafkaRecordCollector(lambda on_error: AtLeastOnceProducer({}, None, on_error), None,
                                     always_fail=lambda topic: topic == DLQ)
    collector.errors = RecordErrorHandlers({DESERIALIZATION: "fail", PROCESSING: "fail", PRODUCTION: handler},
                                           DeadLetterWriter(APP, DLQ, collector.send))
    collector.name_inputs(lambda topic: INPUTS_NAMED if topic == "out" else "")
    return collector


def test_a_record_the_broker_rejects_after_it_was_sent_names_the_inputs_it_may_come_from(
        monkeypatch: pytest.MonkeyPatch) -> None:
    collector = rejecting_collector(monkeypatch, "fail")
    collector.send("out", b"k", b"v", 1_000, None)
    with pytest.raises(ProductionError) as raised:
        collector.flush()
    assert str(raised.value) == f"1 records failed to reach Kafka; first: topic 'out' partition 0: " \
                                f"{KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)}{INPUTS_NAMED}"


def test_its_dead_letter_keeps_the_output_and_names_the_inputs_it_may_come_from(
        monkeypatch: pytest.MonkeyPatch) -> None:
    collector = rejecting_collector(monkeypatch, "dead_letter")
    collector.send("out", b"k", b"v", 1_000, [("trace", b"t")])
    collector.flush()
    [letter] = collector.producer.producer.accepted
    error = error_headers(letter.headers())
    assert (letter.topic(), letter.key(), letter.value()) == (DLQ, b"k", b"v")
    assert (error["stage"], error["record"], error["output.topic"]) == ("production", "output", "out")
    assert error["message"].endswith(INPUTS_NAMED)
    assert collector.errors.metrics()["dead_letter_records"] == 1
