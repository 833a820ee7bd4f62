"""The word count (``apps.wordcount``): counts per emit interval of stream time, emitted once stream time passes
the interval, whatever the punctuator's timing — so a batch run gives what the live app gives."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from apps.wordcount import INPUT_TOPIC, OUTPUT_TOPIC, WORDS_TOPIC, topology
from apps.wordcount.topology import EMIT_INTERVAL_MS, words_of
from streaming import Serdes
from streaming.batch import BatchPlan
from streaming.testing import GeneratedRecord, TopologyTestDriver, generators
from tests.unit.batch_inputs import as_partitions, per_key, run_days

String, Long = Serdes.String(), Serdes.Long()
CONFIG = {"application.id": "wordcount"}


def expected_emissions(lines: list[GeneratedRecord]) -> tuple[list[tuple[str, int, int]], dict[str, int]]:
    """Model of one task reading every word in line order: each word counted in its interval, or in stream time's
    when its own interval is over; an interval emitted (word, new total, interval end - 1) once stream time reaches
    its end. Returns what is emitted before the end, and what is still pending then."""
    pending: dict[int, Counter[str]] = defaultdict(Counter)
    totals: Counter[str] = Counter()
    emitted: list[tuple[str, int, int]] = []
    stream_time = -1
    for line in lines:
        for word in words_of(line.value):
            stream_time = max(stream_time, line.timestamp)
            start = line.timestamp - line.timestamp % EMIT_INTERVAL_MS
            if start + EMIT_INTERVAL_MS <= stream_time:
                start = stream_time - stream_time % EMIT_INTERVAL_MS
            pending[start][word] += 1
            for interval in sorted(s for s in pending if s + EMIT_INTERVAL_MS <= stream_time):
                for counted in sorted(pending[interval]):
                    totals[counted] += pending[interval][counted]
                    emitted.append((counted, totals[counted], interval + EMIT_INTERVAL_MS - 1))
                del pending[interval]
    left = Counter(totals)
    for interval in pending.values():
        left.update(interval)
    return emitted, dict(left)


def lines() -> list[GeneratedRecord]:
    """Lines a quarter second apart, 10% up to 3 s out of order (behind intervals that are over)."""
    return generators.words(400, seed=3, step_ms=250, out_of_order=0.1, max_disorder_ms=3_000,
                            vocabulary=["to", "be", "or", "not", "river", "stone"])


def test_counts_are_emitted_per_interval_of_stream_time_and_a_clean_stop_emits_the_rest() -> None:
    records = lines()
    emitted, totals = expected_emissions(records)
    assert any(r.out_of_order for r in records) and len(emitted) > 500
    driver = TopologyTestDriver(topology(), CONFIG)
    out = driver.create_output_topic(OUTPUT_TOPIC, String, Long)
    source = driver.create_input_topic(INPUT_TOPIC, String, String)
    for record in records:
        source.pipe_input(record.key, record.value, timestamp=record.timestamp)
    before = [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()]
    assert before == emitted
    driver.close()  # a clean stop emits what is pending
    after = out.read_key_values()
    assert after and dict([*((w, n) for w, n, _ in before), *after]) == totals
    assert totals == Counter(w for r in records for w in words_of(r.value))


def _batch(partitions: int, chunk: int, records: list[GeneratedRecord]) -> dict[str, list[Any]]:
    plan = BatchPlan(topology(), "wordcount", dict.fromkeys((INPUT_TOPIC, WORDS_TOPIC, OUTPUT_TOPIC), partitions))
    inputs = as_partitions(INPUT_TOPIC, records, partitions, String, String)
    return run_days(plan, CONFIG, inputs, [records[200].timestamp, 2**62], chunk=chunk)


def test_a_batch_run_gives_the_same_counts_whether_it_punctuates_after_every_record_or_every_thousand() -> None:
    records = lines()
    for partitions in (1, 4):
        each, chunked = _batch(partitions, 1, records), _batch(partitions, 1000, records)
        assert per_key(chunked[OUTPUT_TOPIC], String, Long) == per_key(each[OUTPUT_TOPIC], String, Long)
        assert per_key(chunked[WORDS_TOPIC], String, String) == per_key(each[WORDS_TOPIC], String, String)
    emitted, _ = expected_emissions(records)
    one_partition = [(String.deserialize(r.key), Long.deserialize(r.value), r.timestamp)
                     for r in _batch(1, 1000, records)[OUTPUT_TOPIC]]
    assert sorted(one_partition, key=lambda e: (e[2], e[0])) == emitted
