"""Throttling and backpressure on the embedded broker: buffers pause and resume their partitions, the rate
limit holds, a full producer queue is waited out. Every test checks its output against the oracle."""

from __future__ import annotations

import collections
import itertools
import logging
import time
from typing import Any

import pytest

from streaming import KafkaStreams, Serdes, StreamsBuilder, Topology
from streaming.admin import create_topics
from streaming.processor import Processor, ProcessorContext, PunctuationType, Record
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import produce, read_topic, wait_for

pytestmark = pytest.mark.integration


def sequenced(count: int, keys: int, origin: str = "a", pad: int = 0) -> list[GeneratedRecord]:
    """Records whose value carries a per-key sequence number (and ``pad`` bytes), to check order and
    exactly-once."""
    return [GeneratedRecord(f"k{i % keys:03d}", {"origin": origin, "seq": i // keys, "pad": "x" * pad},
                            1_700_000_000_000 + i) for i in range(count)]


def config(bootstrap: str, app_id: str, **extra: Any) -> dict[str, Any]:
    return {"application.id": app_id, "bootstrap.servers": bootstrap, "commit.interval.ms": 500, **extra}


def metric(streams: KafkaStreams, name: str) -> float:
    """The sum over stream threads of ``brook_<name>`` (a gauge, or a counter's ``_total``)."""
    return sum(sample.value for family in streams.metrics_registry.collect() for sample in family.samples
               if sample.name in (name, f"{name}_total"))


def assert_oracle(output: list[Any], inputs: list[GeneratedRecord]) -> None:
    """Every input record exactly once in the output, and each key's records of one origin in order."""
    assert len(output) == len(inputs)
    assert collections.Counter((r.key, r.value["origin"], r.value["seq"]) for r in output) == \
        collections.Counter((r.key, r.value["origin"], r.value["seq"]) for r in inputs)
    seqs: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
    for record in sorted(output, key=lambda r: (r.partition, r.offset)):
        seqs[(record.key, record.value["origin"])].append(record.value["seq"])
    assert all(s == sorted(s) for s in seqs.values())


@pytest.mark.parametrize("shape", ["one topic", "two topics in one task"])
def test_a_partition_paused_by_backpressure_resumes(bootstrap: str, unique_name: str, shape: str) -> None:
    """A processor slower than its input (~0.4 ms a record): a poll brings more than a loop iteration processes
    in ``max.poll.processing.ms``, the buffer reaches ``buffered.records.per.partition``, the partition is
    paused, and it resumes once half drained (counted by the thread; nothing stays paused or buffered at the
    end) — for a single-partition task and for a task reading two co-partitioned topics (a PartitionGroup)."""
    topics = [f"{unique_name}-a"] if shape == "one topic" else [f"{unique_name}-a", f"{unique_name}-b"]
    sink = f"{unique_name}-out"
    create_topics(bootstrap, {**dict.fromkeys(topics, 1), sink: 1})
    inputs: list[GeneratedRecord] = []
    for topic in topics:
        records = sequenced(4000 // len(topics), 20, origin=topic[-1])
        produce(bootstrap, topic, records, Serdes.String(), Serdes.Json())
        inputs += records


    def slow(value: dict[str, Any]) -> dict[str, Any]:
        time.sleep(0.0004)
        return value

    builder = StreamsBuilder()
    builder.stream(topics, key_serde=Serdes.String(), value_serde=Serdes.Json()).map_values(slow).to(sink)
    streams = KafkaStreams(builder.build(), config(
        bootstrap, unique_name, **{"buffered.records.per.partition": 100, "max.poll.processing.ms": 50,
                                   "consumer.max.poll.records": 300}))
    streams.start()
    try:
        wait_for(lambda: streams.metrics()["records_processed"] >= len(inputs), 120, "every record to be processed")
        final = streams.metrics()
        assert metric(streams, "brook_paused_partitions") == 0  # all drained: nothing stays paused
        assert metric(streams, "brook_buffered_records") == 0
    finally:
        assert streams.close(30)
    assert streams.exception is None
    print(f"{shape}: {final['backpressure_pauses']} pauses, {final['backpressure_resumes']} resumes, "
          f"{final['records_processed']} records processed")
    assert final["backpressure_pauses"] > 0, "no partition was ever paused"
    assert final["backpressure_resumes"] == final["backpressure_pauses"]
    assert_oracle(read_topic(bootstrap, sink, Serdes.String(), Serdes.Json(), 1), inputs)


class SlowWithTicks(Processor):
    """2 ms a record, and a wall-clock punctuator every 50 ms that records when it fired."""

    def __init__(self, ticks: list[float], processed: list[int]) -> None:
        self.ticks = ticks
        self.processed = processed

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        context.schedule(50, PunctuationType.WALL_CLOCK_TIME, lambda timestamp: self.ticks.append(time.monotonic()))

    def process(self, record: Record) -> None:
        time.sleep(0.002)
        self.processed.append(1)


def test_the_processing_time_cap_keeps_punctuators_on_time(bootstrap: str, unique_name: str) -> None:
    """Polls of 1,000 records at 2 ms a record would take 2 s each; ``max.poll.processing.ms=100`` sends the
    loop back to punctuate (and poll, and commit) every ~100 ms, so a 50 ms wall-clock punctuator never
    waits much longer than that while the input is processed."""
    source = f"{unique_name}-in"
    create_topics(bootstrap, {source: 1})
    inputs = sequenced(2000, 10)
    produce(bootstrap, source, inputs, Serdes.String(), Serdes.Json())
    ticks: list[float] = []
    processed: list[int] = []
    topology = Topology().add_source("in", source).add_processor("slow", lambda: SlowWithTicks(ticks, processed), "in")
    streams = KafkaStreams(topology, config(bootstrap, unique_name, **{
        "max.poll.processing.ms": 100, "consumer.max.poll.records": 1000, "buffered.records.per.partition": 5000}))
    streams.start()
    try:
        wait_for(lambda: len(processed) >= 100, 60, "processing to start")
        started = time.monotonic()
        wait_for(lambda: len(processed) >= len(inputs), 60, "every record to be processed")
        finished = time.monotonic()
        cap_hits = metric(streams, "brook_processing_time_cap_hits")
    finally:
        assert streams.close(30)
    assert streams.exception is None
    during = [t for t in ticks if started <= t <= finished]
    gaps = [b - a for a, b in itertools.pairwise(during)]
    print(f"time cap: {len(during)} punctuations in {finished - started:.1f} s of processing, longest gap "
          f"{max(gaps):.3f} s, {cap_hits:.0f} iterations stopped at the cap")
    assert cap_hits >= 1
    assert len(during) >= (finished - started) / 0.5
    assert max(gaps) < 0.6, f"a punctuation waited {max(gaps):.2f} s"


@pytest.mark.parametrize("limit", ["records", "bytes"])
def test_the_rate_limit_holds_the_processing_rate(bootstrap: str, unique_name: str, limit: str) -> None:
    """``processing.rate.limit.records`` = 1,500/s, or ``.bytes`` at ~1,500 records' worth a second: measured
    over the middle 80% of a 6,000-record run, the rate stays within 60-125% of the limit (lenient: a shared
    machine may process slower, never faster)."""
    rate, count = 1500, 6000
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: 2, sink: 2})
    inputs = sequenced(count, 50, pad=100)
    produce(bootstrap, source, inputs, Serdes.String(), Serdes.Json())
    record_bytes = sum(len(Serdes.String().serialize(r.key)) + len(Serdes.Json().serialize(r.value))
                       for r in inputs) / count
    setting = {"processing.rate.limit.records": rate} if limit == "records" else \
        {"processing.rate.limit.bytes": int(rate * record_bytes)}
    builder = StreamsBuilder()
    builder.stream(source, key_serde=Serdes.String(), value_serde=Serdes.Json()).to(sink)
    streams = KafkaStreams(builder.build(), config(bootstrap, unique_name, **setting))
    progress: list[tuple[float, int]] = []
    streams.start()
    try:
        def done() -> bool:
            progress.append((time.monotonic(), streams.metrics()["records_processed"]))
            return progress[-1][1] >= count
        wait_for(done, 90, "every record to be processed", interval=0.05)
        throttled = metric(streams, "brook_throttled_seconds")
    finally:
        assert streams.close(30)
    assert streams.exception is None
    start = next(t for t, n in progress if n >= count * 0.1)
    end = next(t for t, n in progress if n >= count * 0.9)
    measured = count * 0.8 / (end - start)
    print(f"rate limit by {limit}: {measured:.0f} records/s measured under a limit of {rate}/s; "
          f"throttled {throttled:.1f} s")
    assert 0.6 * rate <= measured <= 1.25 * rate, f"{measured:.0f} records/s under a limit of {rate}/s"
    assert throttled > 1.0
    assert_oracle(read_topic(bootstrap, sink, Serdes.String(), Serdes.Json(), 2), inputs)


def test_a_full_producer_queue_is_waited_out(bootstrap: str, unique_name: str,
                                             caplog: pytest.LogCaptureFixture) -> None:
    """A producer queue of 10 records (``producer.queue.buffering.max.messages``): sends wait for room again
    and again, every record still arrives, and the stalls are counted and logged (not once per stall)."""
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: 2, sink: 2})
    inputs = sequenced(5000, 50)
    produce(bootstrap, source, inputs, Serdes.String(), Serdes.Json())
    builder = StreamsBuilder()
    builder.stream(source, key_serde=Serdes.String(), value_serde=Serdes.Json()).to(sink)
    streams = KafkaStreams(builder.build(), config(
        bootstrap, unique_name, **{"producer.queue.buffering.max.messages": 10, "producer.batch.num.messages": 10}))
    caplog.set_level(logging.WARNING, logger="streaming.runtime.record_collector")
    streams.start()
    try:
        wait_for(lambda: streams.metrics()["records_processed"] >= len(inputs), 120, "every record to be processed")
        stalls = streams.metrics()["producer_queue_full"]
        waited = metric(streams, "brook_producer_queue_full_seconds")
    finally:
        assert streams.close(30)
    assert streams.exception is None
    print(f"producer queue of 10: {stalls} stalls, {waited:.2f} s waited")
    assert stalls > 10, f"only {stalls} sends found the producer queue full"
    assert waited > 0
    lines = [r.getMessage() for r in caplog.records if "producer queue full" in r.getMessage()]
    assert lines and f"topic {sink!r}" in lines[0]
    assert len(lines) < stalls
    assert_oracle(read_topic(bootstrap, sink, Serdes.String(), Serdes.Json(), 2), inputs)


def test_partitions_paused_by_backpressure_survive_a_rebalance(bootstrap: str, unique_name: str) -> None:
    """Instance A pauses its partitions (a slow processor); instance B joins, so every partition is revoked
    and assigned again (eager, range). No partition stays paused: both finish the input, each record once."""
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: 2, sink: 2})
    inputs = sequenced(6000, 40)
    produce(bootstrap, source, inputs, Serdes.String(), Serdes.Json())

    def slow(value: dict[str, Any]) -> dict[str, Any]:
        time.sleep(0.0005)
        return value

    builder = StreamsBuilder()
    builder.stream(source, key_serde=Serdes.String(), value_serde=Serdes.Json()).map_values(slow).to(sink)
    topology = builder.build()
    settings = config(bootstrap, unique_name, **{"buffered.records.per.partition": 100,
                                                 "max.poll.processing.ms": 50, "consumer.max.poll.records": 300})
    a, b = KafkaStreams(topology, settings), KafkaStreams(topology, settings)
    a.start()
    try:
        wait_for(lambda: a.metrics()["backpressure_pauses"] > 0, 60, "instance A to pause a partition")
        b.start()
        wait_for(lambda: a.metrics()["tasks"] and b.metrics()["tasks"], 60, "both instances to own a task")
        wait_for(lambda: a.metrics()["records_processed"] + b.metrics()["records_processed"] >= len(inputs), 120,
                 "every record to be processed")
        assert metric(a, "brook_paused_partitions") == metric(b, "brook_paused_partitions") == 0
    finally:
        assert a.close(30) and b.close(30)
    assert a.exception is None and b.exception is None
    assert a.metrics()["rebalances"] >= 2
    assert_oracle(read_topic(bootstrap, sink, Serdes.String(), Serdes.Json(), 2), inputs)
