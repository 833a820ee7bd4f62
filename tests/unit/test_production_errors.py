"""Production errors name the input record (issue 16, item 7), through the test driver: a record the producer refuses
(``producer.message.max.bytes``) under each handler — the error, the handler's context and the dead letter name
the source topic, partition and offset and the output topic — against a model of Kafka Streams' rule written here.

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

from streaming import ErrorContext, ProductionError, Serdes, StreamsBuilder
from streaming.naming import dead_letter_topic
from streaming.processor import Processor, ProcessorContext, PunctuationType, Record
from streaming.runtime.dead_letters import error_headers, original_headers
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
