"""Processing errors of records a cache flush or a punctuator forwards, on the embedded broker through
KafkaStreams (issue 16, item 6), against a model of Kafka Streams' rules written here.

The app counts per key and 1 s window (a cached store, flushed at each 1 s commit, so an entry collects several
writes between flushes; its cache holds ~6 entries, so the first window's entries are evicted — forwarded — while
the second window's records are processed) and labels each count (the label fails for keys starting with "bad");
beside it a
Processor API batcher forwards what it read from a wall-clock punctuator, labelled the same way. The model
(Kafka Streams' source, see tests/unit/test_errors_without_input.py): a flushed record fails in the context of
the input record that last wrote its entry (LRUCacheEntry, CachingKeyValueStore.putAndMaybeForward,
ProcessorNode.process); a punctuator's record has no input record (StreamTask.punctuate).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from streaming import KafkaStreams, ProcessingError, Serdes, StreamsBuilder, TimeWindows
from streaming.admin import create_topics
from streaming.naming import dead_letter_topic
from streaming.processor import Processor, ProcessorContext, PunctuationType, Record
from streaming.runtime.dead_letters import error_headers
from streaming.runtime.kafka_streams import State
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import ConsumedRecord, committed_offsets, produce, read_topic, wait_for

pytestmark = pytest.mark.integration
PARTITIONS = 2
SIZE = 1_000  # window size, ms
KEYS = ["a", "b", "c", "bad1", "bad2"]
STRING = Serdes.String()


def label(key: Any, value: Any) -> str:
    name = key if isinstance(key, str) else key.key
    if name.startswith("bad"):
        raise ValueError(f"no label for {name}")
    return f"{name}={value}"


class Batcher(Processor):
    """Buffers what it reads; its wall-clock punctuator (every 100 ms) forwards the buffer, in order."""

    def __init__(self) -> None:
        self.buffer: list[tuple[Any, Any]] = []

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        context.schedule(100, PunctuationType.WALL_CLOCK_TIME, self.punctuate)

    def process(self, record: Record) -> None:
        self.buffer.append((record.key, record.value))

    def punctuate(self, timestamp: int) -> None:
        buffered, self.buffer = self.buffer, []
        for key, value in buffered:
            self.context.forward(Record(key, value, timestamp))


def topology(source: str, counted: str, batched: str | None) -> Any:
    builder = StreamsBuilder()
    stream = builder.stream(source, key_serde=STRING, value_serde=STRING)
    (stream.group_by_key().windowed_by(TimeWindows.of(SIZE, grace=60_000)).count(materialized="counts")
     .to_stream().map_values(label).map(lambda windowed, value: (f"{windowed.key}@{windowed.start}", value))
     .to(counted, key_serde=STRING, value_serde=STRING))
    if batched is not None:
        stream.process(Batcher, name="batcher").map_values(label).to(batched, key_serde=STRING, value_serde=STRING)
    return builder.build()


def inputs() -> list[GeneratedRecord]:
    """200 records, 40 per key over 2 s: 20 per key and window (from 10,000 s: a zero timestamp is no timestamp)."""
    return [GeneratedRecord(KEYS[i % len(KEYS)], str(i), 10_000_000 + i * 10) for i in range(200)]


def windows(records: list[ConsumedRecord]) -> dict[str, list[ConsumedRecord]]:
    """The model's entries: each (key, window)'s input records, in offset order (a key is in one partition)."""
    entries: dict[str, list[ConsumedRecord]] = defaultdict(list)
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        entries[f"{record.key}@{record.timestamp - record.timestamp % SIZE}"].append(record)
    return entries


def test_failed_flush_and_punctuator_records_are_dead_lettered_with_their_source(
        bootstrap: str, unique_name: str) -> None:
    source, counted, batched = f"{unique_name}-in", f"{unique_name}-counted", f"{unique_name}-batched"
    create_topics(bootstrap, {source: PARTITIONS, counted: PARTITIONS, batched: PARTITIONS})
    produce(bootstrap, source, inputs(), STRING, STRING)
    records = read_topic(bootstrap, source, STRING, STRING, PARTITIONS)
    entries = windows(records)
    by_place = {(r.partition, r.offset): r for r in records}
    good = {entry: rs for entry, rs in entries.items() if not entry.startswith("bad")}
    bad = {entry: rs for entry, rs in entries.items() if entry.startswith("bad")}
    dlq = dead_letter_topic(unique_name)

    def letters() -> list[ConsumedRecord]:
        return read_topic(bootstrap, dlq, Serdes.Bytes(), Serdes.Bytes(), 1)

    def flush_letters_by_entry() -> dict[str, list[ConsumedRecord]]:
        found: dict[str, list[ConsumedRecord]] = defaultdict(list)
        for letter in letters():
            error = error_headers(letter.headers)
            if "source.offset" in error:
                record = by_place[(int(error["source.partition"]), int(error["source.offset"]))]
                found[f"{record.key}@{record.timestamp - record.timestamp % SIZE}"].append(letter)
        return found

    def final_counts() -> dict[str, str]:
        return {r.key: r.value for r in read_topic(bootstrap, counted, STRING, STRING, PARTITIONS)}

    def done() -> bool:
        last = {entry: max(int(error_headers(letter.headers)["source.offset"]) for letter in found)
                for entry, found in flush_letters_by_entry().items()}
        return (final_counts() == {entry: f"{entry.split('@')[0]}={len(rs)}" for entry, rs in good.items()}
                and last == {entry: rs[-1].offset for entry, rs in bad.items()}
                and len(read_topic(bootstrap, batched, STRING, STRING, PARTITIONS)) == 120
                and sum("punctuator" in error_headers(r.headers)["message"] for r in letters()) == 80)

    app = KafkaStreams(topology(source, counted, batched), {
        "application.id": unique_name, "bootstrap.servers": bootstrap, "commit.interval.ms": 1_000,
        "statestore.cache.max.bytes": 900, "processing.exception.handler": "dead_letter"})
    app.start()
    try:
        wait_for(lambda: done() or app.state is State.ERROR, 90, "the final counts and dead letters")
        assert app.state is not State.ERROR, app.exception
        metrics = app.metrics()
    finally:
        app.close(30)

    # Model, count branch: each good (key, window) ends with its count in the output; each bad one's last flush
    # fails in the context of the input record that last wrote it (the done() condition), and every dead letter
    # names an input record of its (key, window): a flush's (or an eviction's) record context is one of its writes,
    # never the record being processed when a later record's write evicts it.
    all_letters = letters()
    flushed = [letter for letter in all_letters if "the cache of store 'counts'" in error_headers(letter.headers)["message"]]
    for entry, found in flush_letters_by_entry().items():
        assert entry in bad
        for letter in found:
            error = error_headers(letter.headers)
            record = by_place[(int(error["source.partition"]), int(error["source.offset"]))]
            assert record in bad[entry]
            assert (letter.key, letter.value, error["record"], error["stage"], error["type"], error["source.topic"]) \
                == (None, None, "none", "processing", "builtins.ValueError", source)
            assert f"(topic={source}, partition={record.partition}, offset={record.offset})" in error["message"]
    # The cache collapsed writes: fewer flushed records than inputs of bad keys (so "the last write" is a choice).
    assert len(bad) <= len(flushed) < sum(len(rs) for rs in bad.values())
    # Punctuator branch: every input ends in the output or a dead letter with no input record.
    punctuated = [letter for letter in all_letters if letter not in flushed]
    assert len(punctuated) == sum(r.key.startswith("bad") for r in records)
    assert all(not any(k.startswith("source.") for k in error_headers(r.headers)) for r in punctuated)
    assert all("(no input record)" in error_headers(r.headers)["message"] for r in punctuated)
    assert metrics["dead_letter_records"] == len(all_letters) == metrics["record_errors"]["processing"]


def test_fail_stops_at_a_failed_flush_record_naming_its_source(bootstrap: str, unique_name: str) -> None:
    source, counted = f"{unique_name}-in", f"{unique_name}-counted"
    create_topics(bootstrap, {source: PARTITIONS, counted: PARTITIONS})
    produce(bootstrap, source, inputs(), STRING, STRING)
    by_place = {(r.partition, r.offset): r for r in read_topic(bootstrap, source, STRING, STRING, PARTITIONS)}
    app = KafkaStreams(topology(source, counted, None), {
        "application.id": unique_name, "bootstrap.servers": bootstrap, "commit.interval.ms": 1_000})
    app.start()
    try:
        wait_for(lambda: app.state is State.ERROR, 60, "the app to stop")
    finally:
        app.close(30)
    error = app.exception
    assert isinstance(error, ProcessingError), error
    assert "the cache of store 'counts' forwarded when it flushed" in str(error) and "no label for bad" in str(error)
    record = by_place[(error.partition, error.offset)]
    assert error.topic == source and record.key.startswith("bad")
    # The commit that flushed failed: nothing is committed past the record.
    assert committed_offsets(bootstrap, unique_name, source, PARTITIONS)[record.partition] <= record.offset
