"""At-least-once: the idempotent producer fails fatally mid-run (what a broker restart that lost its producer
state does: librdkafka raises ``OUT_OF_ORDER_SEQUENCE_NUMBER`` as a fatal error, seen in the broker-bounce
test), and the stream thread rides it out as Kafka Streams does with ``OutOfOrderSequenceException``
(``RecordCollectorImpl.recordSendError``: a TaskMigratedException): its tasks are closed dirty, a new producer
is taken, and the input after the last commit is processed again — nothing is lost, nothing committed is
repeated.

The fatal error is injected where confluent-kafka raises it — from ``flush()`` inside a commit, as a
``SystemError`` whose cause is the fatal ``KafkaException`` — because no real broker here can be made to
desynchronize an idempotent producer's sequence numbers on demand (the bounce test hits it 1 run in ~20).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from streaming import KafkaStreams, Serdes
from streaming.admin import create_topics
from streaming.runtime.kafka_streams import State
from streaming.runtime.streams_producer import AtLeastOnceProducer
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import committed_offsets, produce, read_topic, wait_for
from tests.integration.workloads.counting import topology

pytestmark = pytest.mark.integration
PARTITIONS = 2
KEYS = 10
STRING = Serdes.String()


class FailsOnce:
    """A confluent-kafka producer whose next ``flush`` fails as a fatal one does (everything else delegated):
    the records it holds stay unsent, as a fatal producer's are."""

    def __init__(self, producer: Any) -> None:
        self.producer = producer
        self.failed = False

    def flush(self, *args: Any) -> int:
        if not self.failed:
            self.failed = True
            fatal = KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "sequence desynchronization with broker",
                               fatal=True)
            try:
                raise KafkaException(fatal)
            except KafkaException as cause:
                raise SystemError("<method 'append' of 'list' objects> returned a result with an exception set") \
                    from cause
        return self.producer.flush(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.producer, name)


def records(start: int, count: int) -> list[GeneratedRecord]:
    return [GeneratedRecord(f"k{i % KEYS}", f"v{i}", 1_000_000 + i) for i in range(start, start + count)]


def test_a_fatal_producer_error_renews_the_producer_and_reprocesses_from_the_last_commit(
        bootstrap: str, unique_name: str, caplog: pytest.LogCaptureFixture) -> None:
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS})
    produce(bootstrap, source, records(0, 200), STRING, STRING)
    app = KafkaStreams(topology(source, sink), {"application.id": unique_name, "bootstrap.servers": bootstrap,
                                                "commit.interval.ms": 200})
    caplog.set_level(logging.WARNING, logger="streaming.runtime.stream_thread")

    def outputs() -> list[Any]:
        return read_topic(bootstrap, sink, STRING, Serdes.Json(), PARTITIONS)

    def committed() -> int:
        return sum(committed_offsets(bootstrap, unique_name, source, PARTITIONS).values())

    app.start()
    try:
        wait_for(lambda: committed() == 200, 60, "the first 200 records committed")
        committed_before = committed_offsets(bootstrap, unique_name, source, PARTITIONS)
        collector = app._threads[0].collector
        at_least_once = collector.producer
        assert isinstance(at_least_once, AtLeastOnceProducer)
        failing = FailsOnce(at_least_once.producer)
        at_least_once.producer = failing  # the next commit's flush fails fatally
        produce(bootstrap, source, records(200, 200), STRING, STRING)
        wait_for(lambda: failing.failed and committed() == 400 or app.state is State.ERROR, 60,
                 "the fatal error, then all 400 records committed")
        assert app.state is not State.ERROR, app.exception
        assert at_least_once.producer is not failing, "the failed producer was not replaced"
        assert collector.produce == at_least_once.producer.produce
    finally:
        app.close(30)

    assert any("failed fatally during flush" in r.getMessage() and "new producer" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    # Nothing lost: every input record has its output. Nothing committed repeated: only records after the
    # commit before the failure are emitted more than once. Counts: at least the oracle's.
    emitted = Counter((r.value["partition"], r.value["offset"]) for r in outputs())
    inputs = read_topic(bootstrap, source, STRING, STRING, PARTITIONS)
    assert {(r.partition, r.offset) for r in inputs} <= set(emitted)
    repeated = {place for place, times in emitted.items() if times > 1}
    assert all(offset >= committed_before[partition] for partition, offset in repeated), sorted(repeated)[:5]
    final = {r.key: r.value["count"] for r in outputs()}
    oracle = Counter(r.key for r in inputs)
    assert all(final[key] >= oracle[key] for key in oracle), (final, oracle)
    assert sum(final.values()) - sum(oracle.values()) <= sum(times - 1 for times in emitted.values())
