"""Load shedding on the embedded broker: input at 3x the rate limit is shed beyond it, counted exactly
(shed + processed = input), every shed record diverted to ``<application.id>-shed`` with its original key,
value, headers and timestamp, and the offsets of shed records committed."""

from __future__ import annotations

import time

import pytest

from streaming import KafkaStreams, Serdes, StreamsBuilder
from streaming.admin import create_topics
from streaming.naming import shed_topic
from streaming.runtime.load_shedding import SOURCE_OFFSET, SOURCE_PARTITION, SOURCE_TOPIC
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import committed_offsets, produce, read_topic, wait_for

pytestmark = pytest.mark.integration

RATE = 200  # records per second, the rate limit
SECONDS = 4  # input arrives at 3 * RATE for this long
PARTITIONS = 2


def shed_metric(streams: KafkaStreams) -> dict[tuple[str, str], float]:
    """``brook_shed_records_total`` by (topic, partition)."""
    return {(s.labels["topic"], s.labels["partition"]): s.value for family in streams.metrics_registry.collect()
            for s in family.samples if s.name == "brook_shed_records_total"}


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_input_at_three_times_the_limit_is_shed_counted_and_diverted(bootstrap: str, unique_name: str,
                                                                     guarantee: str) -> None:
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS})
    builder = StreamsBuilder()
    builder.stream(source, key_serde=Serdes.String(), value_serde=Serdes.Json()).to(sink)
    streams = KafkaStreams(builder.build(), {
        "application.id": unique_name, "bootstrap.servers": bootstrap, "commit.interval.ms": 200,
        "processing.guarantee": guarantee, "processing.rate.limit.records": RATE,
        "processing.overflow.policy": "shed", "processing.overflow.shed.divert": True})
    inputs = [GeneratedRecord(f"k{i % 17}", {"seq": i}, 1_700_000_000_000 + i, headers=[("trace", str(i).encode())])
              for i in range(3 * RATE * SECONDS)]
    streams.start()
    try:
        wait_for(lambda: streams.state.value == "RUNNING", 60, "the app to run")
        started = time.monotonic()
        per_tick = 3 * RATE // 10
        for tick, start in enumerate(range(0, len(inputs), per_tick)):  # 3x the limit, in tenths of a second
            produce(bootstrap, source, inputs[start:start + per_tick], Serdes.String(), Serdes.Json())
            time.sleep(max(started + (tick + 1) / 10 - time.monotonic(), 0))
        wait_for(lambda: streams.metrics()["records_processed"] + sum(shed_metric(streams).values()) >= len(inputs),
                 60, "every input record to be processed or shed")
        wait_for(lambda: sum(committed_offsets(bootstrap, unique_name, source, PARTITIONS).values()) == len(inputs),
                 30, "the offsets of processed and shed records to be committed")
        processed = streams.metrics()["records_processed"]
        shed = shed_metric(streams)
    finally:
        streams.close()

    output = read_topic(bootstrap, sink, Serdes.String(), Serdes.Json(), PARTITIONS)
    diverted = read_topic(bootstrap, shed_topic(unique_name), Serdes.String(), Serdes.Json(), PARTITIONS)
    shed_total = sum(shed.values())
    # Counted exactly: every input record is processed or shed, never both, never neither.
    assert processed + shed_total == len(inputs)
    assert len(output) == processed
    # Roughly the limit got through (the bucket's 0.1 s burst aside); two thirds or so were shed.
    assert RATE * SECONDS * 0.6 <= processed <= RATE * SECONDS * 1.6, processed
    by_seq = {r.value["seq"]: r for r in inputs}
    out_seqs = [r.value["seq"] for r in output]
    shed_seqs = [r.value["seq"] for r in diverted]
    assert len(set(out_seqs)) == len(out_seqs) and len(set(shed_seqs)) == len(shed_seqs)
    assert set(out_seqs).isdisjoint(shed_seqs)
    assert set(out_seqs) | set(shed_seqs) == set(by_seq)
    # Divert: every shed record, record by record, with its original key, value, headers and timestamp, and
    # headers naming where it was read; per partition the counts match the metric.
    assert len(diverted) == shed_total
    counted: dict[tuple[str, str], int] = {}
    source_offsets: set[tuple[int, int]] = set()
    for record in diverted:
        original = by_seq[record.value["seq"]]
        headers = dict(record.headers)
        assert (record.key, record.value, record.timestamp) == (original.key, original.value, original.timestamp)
        assert headers["trace"] == original.headers[0][1]
        assert headers[SOURCE_TOPIC] == source.encode()
        partition = int(headers[SOURCE_PARTITION])
        assert record.partition == partition % PARTITIONS
        source_offsets.add((partition, int(headers[SOURCE_OFFSET])))
        counted[(source, str(partition))] = counted.get((source, str(partition)), 0) + 1
    assert counted == {k: v for k, v in shed.items() if v}
    assert len(source_offsets) == shed_total
