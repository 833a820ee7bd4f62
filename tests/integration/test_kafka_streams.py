"""KafkaStreams on the embedded broker: group processing, rebalances, ordering, errors at start-up."""

from __future__ import annotations

import collections
import gc
from pathlib import Path

import pytest

from streaming import KafkaStreams, Serdes, StreamsBuilder
from streaming.admin import create_topics
from streaming.errors import ConfigError, CoPartitioningError, DeserializationError, MissingSourceTopicError
from streaming.runtime.kafka_streams import State
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import committed_offsets, produce, read_topic, wait_for

pytestmark = pytest.mark.integration

PARTITIONS = 4


def streams_config(bootstrap: str, app_id: str, **extra: object) -> dict[str, object]:
    return {"application.id": app_id, "bootstrap.servers": bootstrap, "commit.interval.ms": 500, **extra}


def sequenced(count: int, keys: int, start: int = 0) -> list[GeneratedRecord]:
    """Records whose value carries a per-key sequence number, to check order and exactly-once."""
    return [GeneratedRecord(f"k{i % keys:04d}", {"key": f"k{i % keys:04d}", "seq": i // keys, "n": i},
                            1_700_000_000_000 + i) for i in range(start, start + count)]


def test_two_instances_every_output_exactly_once_in_key_order(bootstrap: str, unique_name: str) -> None:
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS})
    builder = StreamsBuilder()
    (builder.stream(source, key_serde=Serdes.String(), value_serde=Serdes.Json())
     .filter(lambda k, v: v["n"] % 10 != 9)  # drop a tenth, so the filter is exercised
     .map_values(lambda v: {**v, "doubled": v["n"] * 2})
     .to(sink))
    topology = builder.build()
    first_half, second_half = sequenced(10_000, 200), sequenced(10_000, 200, start=10_000)
    ends = produce(bootstrap, source, first_half, Serdes.String(), Serdes.Json())

    a = KafkaStreams(topology, streams_config(bootstrap, unique_name))
    b = KafkaStreams(topology, streams_config(bootstrap, unique_name))
    a.start()
    try:
        wait_for(lambda: a.metrics()["records_processed"] > 0, 60, "instance A to process records")
        b.start()  # joins mid-stream: A's partitions are revoked (committed first) and shared out
        wait_for(lambda: len(a.metrics()["tasks"]) + len(b.metrics()["tasks"]) == PARTITIONS
                 and a.metrics()["tasks"] and b.metrics()["tasks"], 60, "both instances to own tasks")
        for partition, end in produce(bootstrap, source, second_half, Serdes.String(), Serdes.Json()).items():
            ends[partition] = end
        wait_for(lambda: committed_offsets(bootstrap, unique_name, source, PARTITIONS) == ends, 90,
                 "all input committed")
        assert a.state is State.RUNNING and b.state is State.RUNNING
        assert a.metrics()["records_processed"] > 0 and b.metrics()["records_processed"] > 0
    finally:
        assert a.close(30) and b.close(30)
    assert a.exception is None and b.exception is None

    output = read_topic(bootstrap, sink, Serdes.String(), Serdes.Json(), PARTITIONS)
    expected = [r for r in first_half + second_half if r.value["n"] % 10 != 9]
    produced = collections.Counter(r.value["n"] for r in output)
    assert len(output) == len(expected) == 18_000
    assert set(produced) == {r.value["n"] for r in expected}
    assert max(produced.values()) == 1, "an output appeared more than once"
    assert all(r.value["doubled"] == 2 * r.value["n"] for r in output)
    per_key: dict[str, list[int]] = collections.defaultdict(list)
    partition_of: dict[str, set[int]] = collections.defaultdict(set)
    for record in sorted(output, key=lambda r: (r.partition, r.offset)):
        per_key[record.key].append(record.value["seq"])
        partition_of[record.key].add(record.partition)
    assert all(seqs == sorted(seqs) for seqs in per_key.values()), "per-key order was not kept"
    assert all(len(p) == 1 for p in partition_of.values()), "a key's outputs were spread over partitions"


def test_co_partitioned_topics_are_processed_by_one_task_in_timestamp_order(bootstrap: str, unique_name: str) -> None:
    left, right, sink = f"{unique_name}-left", f"{unique_name}-right", f"{unique_name}-out"
    create_topics(bootstrap, {left: 2, right: 2, sink: 2})
    builder = StreamsBuilder()
    builder.stream(left).merge(builder.stream(right)).to(sink)
    records_left = [GeneratedRecord(f"k{i % 5}", {"side": "L", "i": i}, 1_000 + 2 * i) for i in range(500)]
    records_right = [GeneratedRecord(f"k{i % 5}", {"side": "R", "i": i}, 1_001 + 2 * i) for i in range(500)]
    ends_left = produce(bootstrap, left, records_left, Serdes.String(), Serdes.Json())
    ends_right = produce(bootstrap, right, records_right, Serdes.String(), Serdes.Json())
    # Wait up to 2 s for an empty partition before processing the other: strict event-time order.
    app = KafkaStreams(builder.build(), streams_config(bootstrap, unique_name, **{"max.task.idle.ms": 2000}))
    app.start()
    try:
        wait_for(lambda: committed_offsets(bootstrap, unique_name, left, 2) == ends_left
                 and committed_offsets(bootstrap, unique_name, right, 2) == ends_right, 60, "all input committed")
        assert app.metrics()["tasks"] == ["0_0", "0_1"]  # one task per partition number, owning both topics
    finally:
        app.close(30)
    output = read_topic(bootstrap, sink, Serdes.String(), Serdes.Json(), 2)
    assert len(output) == 1_000
    for partition in (0, 1):
        stamps = [r.timestamp for r in sorted(output, key=lambda r: r.offset) if r.partition == partition]
        assert stamps == sorted(stamps), f"partition {partition} was not processed in timestamp order"
        sides = {r.value["side"] for r in output if r.partition == partition}
        assert sides == {"L", "R"}


def test_a_record_the_value_serde_cannot_read_stops_the_app_naming_topic_partition_offset(
        bootstrap: str, unique_name: str) -> None:
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: 1, sink: 1})
    good = [GeneratedRecord("k", b'{"ok": 1}', 1_000 + i) for i in range(5)]
    bad = GeneratedRecord("k", b"not json at all", 2_000)
    produce(bootstrap, source, [*good, bad, *good], Serdes.String(), Serdes.Bytes())
    builder = StreamsBuilder()
    builder.stream(source, value_serde=Serdes.Json()).to(sink)
    app = KafkaStreams(builder.build(), streams_config(bootstrap, unique_name))
    app.start()
    try:
        wait_for(lambda: app.state is State.ERROR, 60, "the app to fail")
    finally:
        app.close(30)
    error = app.exception
    assert isinstance(error, DeserializationError)
    assert (error.topic, error.partition, error.offset) == (source, 0, 5)
    assert f"topic={source}, partition=0, offset=5" in str(error)
    # Nothing after the bad record was committed: a restart would stop at the same record.
    assert committed_offsets(bootstrap, unique_name, source, 1)[0] <= 5


def test_start_fails_clearly_when_a_source_topic_is_missing(bootstrap: str, unique_name: str) -> None:
    builder = StreamsBuilder()
    builder.stream(f"{unique_name}-nope").to(f"{unique_name}-out")
    app = KafkaStreams(builder.build(), streams_config(bootstrap, unique_name))
    with pytest.raises(MissingSourceTopicError, match=f"{unique_name}-nope"):
        app.start()


def test_start_fails_when_co_partitioned_topics_differ_in_partition_count(bootstrap: str, unique_name: str) -> None:
    left, right, sink = f"{unique_name}-l", f"{unique_name}-r", f"{unique_name}-out"
    create_topics(bootstrap, {left: 2, right: 3, sink: 2})
    builder = StreamsBuilder()
    builder.stream(left).merge(builder.stream(right)).to(sink)
    app = KafkaStreams(builder.build(), streams_config(bootstrap, unique_name))
    with pytest.raises(CoPartitioningError, match="different partition counts"):
        app.start()


def test_unknown_config_key_fails_at_construction(bootstrap: str) -> None:
    builder = StreamsBuilder()
    builder.stream("a").to("b")
    with pytest.raises(ConfigError, match="'commit.interval.msec'.*Did you mean 'commit.interval.ms'"):
        KafkaStreams(builder.build(), {"application.id": "x", "bootstrap.servers": bootstrap,
                                       "commit.interval.msec": 100})


def test_the_gc_threshold_is_raised_while_the_instance_runs_and_given_back_at_close(bootstrap: str,
                                                                                   unique_name: str) -> None:
    source = f"{unique_name}-in"
    create_topics(bootstrap, {source: 1, f"{unique_name}-out": 1})
    builder = StreamsBuilder()
    builder.stream(source).to(f"{unique_name}-out")
    before = gc.get_threshold()
    app = KafkaStreams(builder.build(), streams_config(bootstrap, unique_name, **{"python.gc.threshold0": 123_457}))
    assert gc.get_threshold() == before  # construction changes nothing
    app.start()
    try:
        assert gc.get_threshold() == (max(before[0], 123_457), *before[1:])
    finally:
        assert app.close(30)
    assert gc.get_threshold() == before


class ReleasingProcessor:
    """Forwards counts; releases a resource in close() and forwards a marker there. A process() after
    close() is the bug of issue 6 item 1: it raises, which kills the stream thread."""

    def init(self, context) -> None:  # type: ignore[no-untyped-def]
        self.context = context
        self.released = False

    def process(self, record) -> None:  # type: ignore[no-untyped-def]
        if self.released:
            raise RuntimeError("process() called after close()")
        self.context.forward(record)

    def close(self) -> None:
        from streaming.processor import Record

        self.released = True
        self.context.forward(Record(f"closed-{self.context.task_id}", -1, 0))


def test_close_and_revoke_flush_caches_before_closing_processors(bootstrap: str, unique_name: str,
                                                                tmp_path: Path) -> None:
    """Issue 6, item 1: cached aggregation results reach a user processor before its close(), on a plain
    close() and when a second instance joins (revocation); what close() forwards is written out."""
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS})
    builder = StreamsBuilder()
    (builder.stream(source, key_serde=Serdes.String(), value_serde=Serdes.Json())
     .group_by_key().count(materialized="counts")  # cached: results wait for the commit
     .to_stream().process(ReleasingProcessor).to(sink, key_serde=Serdes.String(), value_serde=Serdes.Long()))
    topology = builder.build()
    records = sequenced(2_000, 50)
    ends = produce(bootstrap, source, records, Serdes.String(), Serdes.Json())
    config = streams_config(bootstrap, unique_name, **{"commit.interval.ms": 600_000})  # only close/revoke commit

    a = KafkaStreams(topology, {**config, "state.dir": str(tmp_path / "a")})  # one state.dir per instance
    a.start()
    try:
        wait_for(lambda: a.metrics()["records_processed"] == len(records), 60, "A to consume every record")
        b = KafkaStreams(topology, {**config, "state.dir": str(tmp_path / "b")})
        b.start()  # A's tasks are revoked: flushed and committed, then closed
        try:
            wait_for(lambda: a.metrics()["tasks"] and b.metrics()["tasks"]
                     and len(a.metrics()["tasks"]) + len(b.metrics()["tasks"]) == PARTITIONS, 60,
                     "both instances to own tasks")
            assert a.exception is None, a.exception
        finally:
            assert b.close(30)
        assert b.exception is None, b.exception
    finally:
        assert a.close(30)
    assert a.exception is None, a.exception
    out = read_topic(bootstrap, sink, Serdes.String(), Serdes.Long(), PARTITIONS)
    final = {}
    for record in out:
        if not record.key.startswith("closed-"):
            final[record.key] = record.value
    assert final == collections.Counter(r.key for r in records)  # every cached count reached the output
    markers = {r.key for r in out if r.key.startswith("closed-")}
    assert markers == {f"closed-0_{p}" for p in range(PARTITIONS)}  # each task's close() output was written
    assert committed_offsets(bootstrap, unique_name, source, PARTITIONS) == ends  # and its input committed


def test_outputs_changelogs_and_repartition_topics_keep_record_timestamps(bootstrap: str, unique_name: str) -> None:
    """Every record Brook produces carries its record's timestamp, not the producer's clock (the collector
    once passed the timestamp in confluent-kafka's on_delivery position)."""
    source, passthrough, counts = f"{unique_name}-in", f"{unique_name}-pass", f"{unique_name}-counts"
    create_topics(bootstrap, {source: 2, passthrough: 2, counts: 2})
    builder = StreamsBuilder()
    stream = builder.stream(source, key_serde=Serdes.String(), value_serde=Serdes.Long())
    stream.to(passthrough, value_serde=Serdes.Long())
    (stream.group_by(lambda k, v: f"g{v % 2}", key_serde=Serdes.String(), name="by-parity")
     .count(materialized="per-parity").to_stream().to(counts, value_serde=Serdes.Long()))
    records = [GeneratedRecord(f"k{i}", i, 5_000 + 1_000 * i) for i in range(10)]
    produce(bootstrap, source, records, Serdes.String(), Serdes.Long())
    app = KafkaStreams(builder.build(), streams_config(bootstrap, unique_name, **{"commit.interval.ms": 100}))
    app.start()
    try:
        wait_for(lambda: sorted(r.value for r in read_topic(bootstrap, counts, Serdes.String(), Serdes.Long(),
                                                              2))[-2:] == [5, 5], 60, "final counts")
    finally:
        assert app.close(30)
    sent = {r.key: r.timestamp for r in records}
    assert {r.key: r.timestamp for r in read_topic(bootstrap, passthrough, Serdes.String(), Serdes.Long(), 2)} == sent
    repartitioned = read_topic(bootstrap, f"{unique_name}-by-parity-repartition", Serdes.String(), Serdes.Long(), 2)
    assert sorted(r.timestamp for r in repartitioned) == sorted(sent.values())
    final = {r.key: r.timestamp for r in sorted(read_topic(bootstrap, counts, Serdes.String(), Serdes.Long(), 2),
                                                  key=lambda r: r.offset)}
    assert final == {"g0": 13_000, "g1": 14_000}  # the newest record of each group
    changelog = read_topic(bootstrap, f"{unique_name}-per-parity-changelog", Serdes.String(), Serdes.Long(), 2)
    assert max(r.timestamp for r in changelog) == 14_000
