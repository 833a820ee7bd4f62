"""Record error handlers through the test driver: fail, log_and_continue, dead_letter and user callables for
deserialization, processing and production errors; what a dead letter holds; what gets committed."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from streaming import ConfigError, ErrorContext, Serdes, StreamsBuilder, StreamsConfig
from streaming.errors import DeserializationError, ProcessingError, ProductionError, StreamsError
from streaming.naming import dead_letter_topic
from streaming.runtime.dead_letters import error_headers, original_headers
from streaming.runtime.error_handlers import DESERIALIZATION, PROCESSING, PRODUCTION, RecordErrorHandlers
from streaming.testing import TopologyTestDriver

APP = "handlers-app"
DLQ = dead_letter_topic(APP)


def doubling() -> StreamsBuilder:
    """in (Json) -> value["n"] * 2 -> out: bad JSON fails deserialization, a value without "n" processing."""
    builder = StreamsBuilder()
    builder.stream("in").map_values(lambda v: {"n": v["n"] * 2}).to("out")
    return builder


def pipe_raw(driver: TopologyTestDriver, values: list[bytes], headers: Any = None) -> None:
    for i, value in enumerate(values):
        driver.pipe_raw("in", f"k{i}".encode(), value, 1_000 + i, headers)


def config(**handlers: Any) -> dict[str, Any]:
    names = {"deserialization": "default.deserialization.exception.handler",
             "processing": "processing.exception.handler", "production": "production.exception.handler"}
    return {"application.id": APP, **{names[stage]: handler for stage, handler in handlers.items()}}


INPUTS = [b'{"n": 1}', b'{"n": oops', b'{"m": 2}', b'{"n": 3}']  # good, bad JSON, wrong shape, good


def test_fail_stops_at_the_bad_record_and_commits_nothing_past_it() -> None:
    with TopologyTestDriver(doubling().build(), config()) as driver:
        pipe_raw(driver, INPUTS[:1])
        with pytest.raises(DeserializationError, match=r"cannot deserialize.*topic=in, partition=0, offset=1"):
            pipe_raw(driver, INPUTS[1:2])
        assert driver.committed_offsets == {("in", 0): 1}  # the bad record at offset 1 is read again


def test_log_and_continue_skips_counts_and_logs_one_line_per_record(caplog: pytest.LogCaptureFixture) -> None:
    with TopologyTestDriver(doubling().build(), config(deserialization="log_and_continue",
                                                       processing="log_and_continue")) as driver:
        out = driver.create_output_topic("out")
        with caplog.at_level(logging.WARNING, logger="streaming.runtime.error_handlers"):
            pipe_raw(driver, INPUTS)
        assert out.read_values_to_list() == [{"n": 2}, {"n": 6}]
        assert driver.metrics()["skipped_records"] == 2
        assert driver.metrics()["record_errors"] == {"deserialization": 1, "processing": 1, "production": 0}
        assert driver.metrics()["dead_letter_records"] == 0
        assert driver.committed_offsets == {("in", 0): 4}  # skipped records are committed: not read again
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 2
        assert "deserialization error at topic in partition 0 offset 1 skipped" in lines[0]
        assert "processing error at topic in partition 0 offset 2 skipped" in lines[1] and "KeyError" in lines[1]
        assert DLQ not in driver.produced_topic_names


def test_dead_letter_keeps_the_original_bytes_and_names_the_error() -> None:
    with TopologyTestDriver(doubling().build(), config(deserialization="dead_letter",
                                                       processing="dead_letter")) as driver:
        out = driver.create_output_topic("out")
        dlq = driver.create_output_topic(DLQ, Serdes.Bytes(), Serdes.Bytes())
        pipe_raw(driver, INPUTS, headers=[("trace", b"t-1")])
        assert out.read_values_to_list() == [{"n": 2}, {"n": 6}]
        letters = dlq.read_records_to_list()
        assert [(r.key, r.value, r.timestamp) for r in letters] == [(b"k1", INPUTS[1], 1_001), (b"k2", INPUTS[2], 1_002)]
        bad_json, wrong_shape = (error_headers(r.headers) for r in letters)
        assert bad_json["stage"] == "deserialization"
        assert bad_json["type"] == "orjson.JSONDecodeError"
        assert (bad_json["source.topic"], bad_json["source.partition"], bad_json["source.offset"],
                bad_json["source.timestamp"]) == ("in", "0", "1", "1001")
        assert bad_json["record"] == "input" and bad_json["application.id"] == APP and bad_json["task"] == "0_0"
        assert "cannot deserialize" in bad_json["message"]
        assert wrong_shape["stage"] == "processing" and wrong_shape["type"] == "builtins.KeyError"
        assert "'n'" in wrong_shape["message"] and wrong_shape["source.offset"] == "2"
        assert original_headers(letters[0].headers) == [("trace", b"t-1")]
        assert driver.metrics()["dead_letter_records"] == 2 and driver.metrics()["skipped_records"] == 0


def test_a_production_error_dead_letters_the_input_record() -> None:
    builder = StreamsBuilder()
    builder.stream("in").map_values(lambda v: {"pad": "x" * v["size"]}).to("out")
    settings = {**config(production="dead_letter"), "producer.message.max.bytes": 1000}
    with TopologyTestDriver(builder.build(), settings) as driver:
        out = driver.create_output_topic("out")
        dlq = driver.create_output_topic(DLQ, Serdes.Bytes(), Serdes.Bytes())
        pipe_raw(driver, [b'{"size": 10}', b'{"size": 5000}', b'{"size": 20}'])
        assert [len(v["pad"]) for v in out.read_values_to_list()] == [10, 20]
        [letter] = dlq.read_records_to_list()
        assert letter.value == b'{"size": 5000}'
        error = error_headers(letter.headers)
        assert (error["stage"], error["record"], error["output.topic"], error["source.offset"]) == \
            ("production", "input", "out", "1")
        assert "MSG_SIZE_TOO_LARGE" in error["message"]
        assert driver.metrics()["record_errors"]["production"] == 1


def test_production_errors_fail_by_default() -> None:
    builder = StreamsBuilder()
    builder.stream("in").to("out")
    with TopologyTestDriver(builder.build(), {**config(), "producer.message.max.bytes": 1000}) as driver:
        with pytest.raises(ProductionError, match="MSG_SIZE_TOO_LARGE"):
            pipe_raw(driver, [b"\"" + b"x" * 2000 + b"\""])
        assert driver.committed_offsets == {}


SEEN: list[tuple[str, int | None, str]] = []


def skip_key_errors(context: ErrorContext, error: Exception) -> str:
    """A user handler: skip records whose processing raised KeyError, fail on anything else."""
    SEEN.append((context.stage, context.offset, type(error.__cause__).__name__))
    return "continue" if isinstance(error.__cause__, KeyError) else "fail"


def test_a_user_handler_decides_per_record() -> None:
    SEEN.clear()
    with TopologyTestDriver(doubling().build(), config(processing=skip_key_errors)) as driver:
        out = driver.create_output_topic("out")
        pipe_raw(driver, [b'{"n": 1}', b'{"m": 2}'])
        with pytest.raises(ProcessingError, match="TypeError.*offset=2"):
            driver.pipe_raw("in", b"k2", b'{"n": null}', 1_002)  # None * 2: TypeError, the handler says fail
        assert out.read_values_to_list() == [{"n": 2}]
        assert driver.committed_offsets == {("in", 0): 2}
    assert SEEN == [("processing", 1, "KeyError"), ("processing", 2, "TypeError")]


def test_a_user_handler_by_module_name() -> None:
    SEEN.clear()
    settings = config(processing=f"{__name__}:skip_key_errors")
    with TopologyTestDriver(doubling().build(), settings) as driver:
        pipe_raw(driver, [b'{"m": 2}'])
    assert SEEN == [("processing", 0, "KeyError")]
    assert driver.metrics()["skipped_records"] == 1


def test_a_user_handler_must_answer_continue_or_fail() -> None:
    with TopologyTestDriver(doubling().build(), config(processing=lambda context, error: "maybe")) as driver, \
            pytest.raises(StreamsError, match="returned 'maybe'.*must return 'continue' or 'fail'"):
        pipe_raw(driver, [b'{"m": 2}'])


@pytest.mark.parametrize("key", ["default.deserialization.exception.handler", "processing.exception.handler",
                                 "production.exception.handler"])
def test_an_unknown_handler_fails_at_start_up_naming_the_key_and_the_allowed_values(key: str) -> None:
    with pytest.raises(ConfigError, match=f"config key '{key}': must be one of fail, log_and_continue, "
                                          f"dead_letter, a callable"):
        StreamsConfig({"application.id": APP, "bootstrap.servers": "x:1", key: "skip"})
    with pytest.raises(ConfigError, match=f"config key '{key}': cannot load handler 'no.such.module:f'"):
        StreamsConfig({"application.id": APP, "bootstrap.servers": "x:1", key: "no.such.module:f"})


def test_a_skipped_record_of_a_multi_partition_task_is_committed_once_the_records_before_it_are() -> None:
    builder = StreamsBuilder()
    table = builder.table("users")
    builder.stream("orders").join(table, lambda order, user: {**order, "user": user["name"]}).to("out")
    with TopologyTestDriver(builder.build(), config(deserialization="dead_letter")) as driver:
        driver.pipe_raw("users", b"u1", b'{"name": "Ann"}', 1)
        driver.pipe_raw("orders", b"u1", b"not json", 2)
        driver.pipe_raw("orders", b"u1", b'{"id": 1}', 3)
        assert driver.create_output_topic("out").read_values_to_list() == [{"id": 1, "user": "Ann"}]
        assert driver.committed_offsets[("orders", 0)] == 2
        assert driver.metrics()["dead_letter_records"] == 1


def test_skips_and_dead_letters_are_counted_per_stage_and_action() -> None:
    letters: list[str] = []
    handlers = RecordErrorHandlers({DESERIALIZATION: "dead_letter", PROCESSING: "log_and_continue",
                                    PRODUCTION: "fail"}, lambda context, error: letters.append(context.stage))
    handlers.handle(ErrorContext(DESERIALIZATION, "0_0", "in", 0, 5), ValueError("bad json"))
    handlers.handle(ErrorContext(DESERIALIZATION, "0_0", "in", 0, 6), ValueError("bad json"))
    handlers.handle(ErrorContext(PROCESSING, "0_0", "in", 0, 7), KeyError("n"))
    assert handlers.by_action == {(DESERIALIZATION, "dead_letter"): 2, (PROCESSING, "skipped"): 1}
    assert letters == [DESERIALIZATION, DESERIALIZATION]
    assert handlers.metrics()["record_errors"] == {DESERIALIZATION: 2, PROCESSING: 1, PRODUCTION: 0}
