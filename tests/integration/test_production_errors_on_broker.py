"""Production errors name the input record, on the embedded broker through KafkaStreams (issue 16, item 7), under
both processing guarantees.

A record the producer refuses (over ``producer.message.max.bytes``: the embedded broker itself accepts records of
250 MB, measured, so the client's limit is the one a test can reach) under each handler: the error, the log line,
the handler's context and the dead letter name the source topic, partition and offset and the output topic, as
Kafka Streams hands production.exception.handler the record context of the send (KIP-1033; RecordCollectorImpl).
And records that fail after they were sent (a delivery report) name the input records they may be the outputs of.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from typing import Any

import pytest

from streaming import ErrorContext, KafkaStreams, ProductionError, Serdes, StreamsBuilder
from streaming.admin import create_topics
from streaming.naming import dead_letter_topic
from streaming.runtime.dead_letters import error_headers
from streaming.runtime.kafka_streams import State
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import committed_offsets, produce, read_topic, wait_for

pytestmark = pytest.mark.integration
PARTITIONS = 2
LIMIT = 2_000  # producer.message.max.bytes of the apps
REFUSED = {7, 19}  # the ids whose output is padded past the limit
COUNT = 30
GUARANTEES = ["at_least_once", "exactly_once_v2"]
READ_COMMITTED = {"isolation.level": "read_committed"}


def inputs() -> list[GeneratedRecord]:
    return [GeneratedRecord(f"u{i}", json.dumps({"id": i, "pad": 3_000 if i in REFUSED else 10}).encode(),
                            1_000_000 + i) for i in range(COUNT)]


def padding(source: str, sink: str, partitioner: Any = None) -> Any:
    builder = StreamsBuilder()
    (builder.stream(source, key_serde=Serdes.String(), value_serde=Serdes.Json())
     .map_values(lambda value: {"id": value["id"], "pad": "x" * value["pad"]})
     .to(sink, key_serde=Serdes.String(), value_serde=Serdes.Json(), partitioner=partitioner))
    return builder.build()


def named(source: str, partition: int, offset: int) -> str:
    return f"(output of the record at topic '{source}' partition {partition} offset {offset}, task 0_{partition})"


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_a_refused_record_is_named_under_every_handler(
        bootstrap: str, unique_name: str, guarantee: str, caplog: pytest.LogCaptureFixture) -> None:
    contexts: list[ErrorContext] = []
    lock = threading.Lock()

    def remember(context: ErrorContext, error: Exception) -> str:
        with lock:
            contexts.append(context)
        return "continue"

    handlers: dict[str, Any] = {"fail": "fail", "log": "log_and_continue", "dlq": "dead_letter", "user": remember}
    topics = {name: (f"{unique_name}-{name}-in", f"{unique_name}-{name}-out") for name in handlers}
    create_topics(bootstrap, {topic: PARTITIONS for pair in topics.values() for topic in pair})
    places = {}  # model: where each input is, and so what each refusal names
    for name, (source, _) in topics.items():
        produce(bootstrap, source, inputs(), Serdes.String(), Serdes.Bytes())
        places[name] = {json.loads(r.value)["id"]: (r.partition, r.offset)
                        for r in read_topic(bootstrap, source, Serdes.String(), Serdes.Bytes(), PARTITIONS)}
    apps = {name: KafkaStreams(padding(*topics[name]), {
        "application.id": f"{unique_name}-{name}", "bootstrap.servers": bootstrap, "commit.interval.ms": 200,
        "processing.guarantee": guarantee, "producer.message.max.bytes": LIMIT,
        "production.exception.handler": handler}) for name, handler in handlers.items()}

    def outputs(name: str) -> list[int]:
        return sorted(r.value["id"] for r in read_topic(bootstrap, topics[name][1], Serdes.String(), Serdes.Json(),
                                                         PARTITIONS, client_config=READ_COMMITTED))

    expected = sorted(set(range(COUNT)) - REFUSED)
    with caplog.at_level(logging.WARNING, logger="streaming.runtime.error_handlers"):
        for app in apps.values():
            app.start()
        try:
            wait_for(lambda: apps["fail"].state is State.ERROR
                     and all(outputs(name) == expected for name in ("log", "dlq", "user")), 90,
                     "the failing app to stop and the others to write every other record")
            assert all(app.state is not State.ERROR for name, app in apps.items() if name != "fail")
            metrics = {name: app.metrics() for name, app in apps.items()}
        finally:
            for app in apps.values():
                app.close(30)

    # fail: the first refused record of a partition stops the app, nothing committed past it.
    source, sink = topics["fail"]
    error = apps["fail"].exception
    assert isinstance(error, ProductionError), error
    refused_places = {places["fail"][i] for i in REFUSED}
    named_place = next(place for place in refused_places if str(error).endswith(named(source, *place)))
    assert str(error).startswith(f"cannot send to topic '{sink}' (partition -1): ") and "MSG_SIZE_TOO_LARGE" in str(error)
    assert committed_offsets(bootstrap, f"{unique_name}-fail", source, PARTITIONS)[named_place[0]] <= named_place[1]

    # log_and_continue: one line per refused record, naming it and the output topic.
    source, sink = topics["log"]
    lines = [r.getMessage() for r in caplog.records if f"at topic {source} " in r.getMessage()]
    assert sorted(line.split(" skipped")[0] for line in lines) == sorted(
        f"production error at topic {source} partition {p} offset {o}" for p, o in (places["log"][i] for i in REFUSED))
    assert all(f"'{sink}'" in line and "(output of the record at topic" in line for line in lines)
    assert metrics["log"]["skipped_records"] == len(REFUSED)

    # dead_letter: the input record's bytes, its source and the output topic.
    source, sink = topics["dlq"]
    letters = read_topic(bootstrap, dead_letter_topic(f"{unique_name}-dlq"), Serdes.String(), Serdes.Bytes(), 1,
                         client_config=READ_COMMITTED)
    assert sorted(json.loads(letter.value)["id"] for letter in letters) == sorted(REFUSED)
    for letter in letters:
        partition, offset = places["dlq"][json.loads(letter.value)["id"]]
        headers = error_headers(letter.headers)
        assert (headers["stage"], headers["record"], headers["source.topic"], headers["source.partition"],
                headers["source.offset"], headers["output.topic"]) == \
            ("production", "input", source, str(partition), str(offset), sink)
        assert headers["message"].endswith(named(source, partition, offset))
    assert metrics["dlq"]["dead_letter_records"] == len(REFUSED)

    # a user's handler: the input record's place and the output topic in its context.
    source, sink = topics["user"]
    assert sorted((c.stage, c.topic, c.partition, c.offset, c.output_topic, c.has_input) for c in contexts) == \
        sorted(("production", source, *places["user"][i], sink, True) for i in REFUSED)


def test_records_failing_after_they_were_sent_name_the_records_they_may_come_from(
        bootstrap: str, unique_name: str) -> None:
    """The app reads from the broker but its producer reaches none (``producer.bootstrap.servers`` is a port
    nothing listens on): every output fails after it was sent, in a delivery report, when
    ``producer.message.timeout.ms`` runs out. (The embedded broker rejects no record after it was sent; under
    exactly_once_v2 the producer cannot even start without a broker: see tests/unit/test_production_errors.py.)"""
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: 1, sink: 1})
    produce(bootstrap, source, inputs()[:10], Serdes.String(), Serdes.Bytes())
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        nowhere = f"127.0.0.1:{sock.getsockname()[1]}"
    app = KafkaStreams(padding(source, sink), {
        "application.id": unique_name, "bootstrap.servers": bootstrap, "commit.interval.ms": 200,
        "producer.bootstrap.servers": nowhere, "producer.message.timeout.ms": 2_000})
    app.start()
    try:
        wait_for(lambda: app.state is State.ERROR, 60, "the app to stop")
    finally:
        app.close(30)
    error = str(app.exception)
    assert isinstance(app.exception, ProductionError), error
    assert f"records failed to reach Kafka; first: topic '{sink}'" in error and "timed out" in error
    assert error.endswith(f"(output of a record processed since the last commit, none of them committed: task 0_0: "
                          f"topic '{source}' partition 0 offsets up to 9)")
    assert committed_offsets(bootstrap, unique_name, source, 1) == {0: 0}
