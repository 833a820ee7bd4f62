"""Processing errors of records no input record is being processed for (issue 16, item 6): what a cache flush
and a punctuator forward reaches ``processing.exception.handler``, through the test driver, against a model of
Kafka Streams' rules written here, record by record.

The model (Kafka Streams' source, KIP-1033): a cached store's flush forwards each updated key once, in the record
context of the entry's last write — ``LRUCacheEntry`` keeps its topic, partition, offset, timestamp and headers but
no raw key or value, and ``CachingKeyValueStore.putAndMaybeForward`` sets that context around the flush listener;
an exception in a processor downstream reaches the handler with it (``ProcessorNode.process``), and when the handler
continues the flush goes on with the next entry. A punctuation's record context has no topic, partition -1,
offset -1 and the punctuation's time (``StreamTask.punctuate``, ``ErrorHandlerContext``): a record a punctuator
forwards fails with it and the punctuator goes on; a punctuator's own exception reaches the handler with no record.
Every input ends in the store, and every forwarded record in the output, the dead-letter topic or a counted skip.

The driver commits (so flushes) after every piped record: a flushed entry's last write is the record just piped.
``tests/integration/test_flush_errors.py`` has several writes per entry per commit, on the broker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from streaming import ErrorContext, ProcessingError, Serdes, StreamsBuilder, TimeWindows
from streaming.naming import dead_letter_topic
from streaming.processor import Processor, ProcessorContext, PunctuationType, Record
from streaming.runtime.dead_letters import error_headers
from streaming.testing import TopologyTestDriver

APP = "errors-without-input"
DLQ = dead_letter_topic(APP)
SIZE = 100  # tumbling windows of the windowed count
# (key, timestamp) of the inputs, in offset order: keys starting with "bad" make the mapper downstream raise.
INPUTS = [("a", 10), ("bad", 20), ("a", 30), ("b", 140), ("bad", 150), ("bad", 160), ("a", 170), ("b", 250)]
HANDLER_KEY = "processing.exception.handler"


def label(key: Any, value: Any) -> str:
    """The mapper downstream of the cache: fails for every key starting with "bad"."""
    name = key if isinstance(key, str) else key.key
    if name.startswith("bad"):
        raise ValueError(f"no label for {name}")
    return f"{name}={value}"


@dataclass(frozen=True)
class Forwarded:
    """A record the model's flush forwards: its output key and value, and its record context (the source)."""

    key: str
    value: str
    offset: int  # of the input record that last wrote the entry
    timestamp: int  # that record's

    @property
    def bad(self) -> bool:
        return self.key.startswith("bad")


def windowed_count_model(inputs: list[tuple[str, int]]) -> list[Forwarded]:
    """A cached tumbling-window count, flushed after each input: the updated window's count, once."""
    counts: dict[tuple[str, int], int] = {}
    forwarded = []
    for offset, (key, timestamp) in enumerate(inputs):
        window = (key, timestamp - timestamp % SIZE)
        counts[window] = counts.get(window, 0) + 1
        forwarded.append(Forwarded(f"{key}@{window[1]}", f"{key}={counts[window]}", offset, timestamp))
    return forwarded


def table_sum_model(inputs: list[tuple[str, int]]) -> list[Forwarded]:
    """A cached aggregate table (sum of the timestamps per key), flushed after each input."""
    sums: dict[str, int] = {}
    forwarded = []
    for offset, (key, timestamp) in enumerate(inputs):
        sums[key] = sums.get(key, 0) + timestamp
        forwarded.append(Forwarded(key, f"{key}={sums[key]}", offset, timestamp))
    return forwarded


def windowed_count() -> StreamsBuilder:
    builder = StreamsBuilder()
    (builder.stream("in", key_serde=Serdes.String(), value_serde=Serdes.String()).group_by_key()
     .windowed_by(TimeWindows.of(SIZE, grace=1_000)).count(materialized="counts")
     .to_stream().map_values(label).map(lambda windowed, value: (f"{windowed.key}@{windowed.start}", value))
     .to("out", key_serde=Serdes.String(), value_serde=Serdes.String()))
    return builder


def table_sum() -> StreamsBuilder:
    builder = StreamsBuilder()
    (builder.stream("in", key_serde=Serdes.String(), value_serde=Serdes.String()).group_by_key()
     .aggregate(lambda: 0, lambda key, value, total: total + int(value), materialized="sums")
     .to_stream().map_values(label).to("out", key_serde=Serdes.String(), value_serde=Serdes.String()))
    return builder


CACHED = {"windowed count": (windowed_count, windowed_count_model, "counts"),
          "table aggregate": (table_sum, table_sum_model, "sums")}


def config(handler: Any) -> dict[str, Any]:
    return {"application.id": APP, HANDLER_KEY: handler}


def pipe_all(driver: TopologyTestDriver, inputs: list[tuple[str, int]] = INPUTS) -> None:
    source = driver.create_input_topic("in", Serdes.String(), Serdes.String())
    for key, timestamp in inputs:
        source.pipe_input(key, str(timestamp), timestamp)


@pytest.mark.parametrize("case", sorted(CACHED))
def test_dead_letter_keeps_each_failed_flush_record_with_its_source_and_the_flush_goes_on(case: str) -> None:
    build, model, store = CACHED[case]
    forwarded = model(INPUTS)
    with TopologyTestDriver(build().build(), config("dead_letter")) as driver:
        out = driver.create_output_topic("out", Serdes.String(), Serdes.String())
        dlq = driver.create_output_topic(DLQ, Serdes.Bytes(), Serdes.Bytes())
        pipe_all(driver)
        assert out.read_key_values() == [(f.key, f.value) for f in forwarded if not f.bad]
        letters = dlq.read_records_to_list()
        bad = [f for f in forwarded if f.bad]
        assert len(letters) == len(bad) == 3
        for letter, expected in zip(letters, bad, strict=True):
            assert (letter.key, letter.value, letter.timestamp) == (None, None, expected.timestamp)
            error = error_headers(letter.headers)
            assert (error["stage"], error["type"], error["record"], error["task"]) == \
                ("processing", "builtins.ValueError", "none", "0_0")
            assert (error["source.topic"], error["source.partition"], error["source.offset"],
                    error["source.timestamp"]) == ("in", "0", str(expected.offset), str(expected.timestamp))
            assert f"the cache of store '{store}' forwarded when it flushed" in error["message"]
            assert "no label for bad" in error["message"]
            assert f"(topic=in, partition=0, offset={expected.offset})" in error["message"]
        # Every forwarded record is in the output or the dead-letter topic; every input is in the store.
        assert driver.metrics()["dead_letter_records"] == 3 and driver.metrics()["skipped_records"] == 0
        assert driver.metrics()["record_errors"] == {"deserialization": 0, "processing": 3, "production": 0}
        assert driver.committed_offsets == {("in", 0): len(INPUTS)}


@pytest.mark.parametrize("case", sorted(CACHED))
def test_log_and_continue_skips_each_failed_flush_record_naming_its_source(
        case: str, caplog: pytest.LogCaptureFixture) -> None:
    build, model, _ = CACHED[case]
    forwarded = model(INPUTS)
    with TopologyTestDriver(build().build(), config("log_and_continue")) as driver:
        out = driver.create_output_topic("out", Serdes.String(), Serdes.String())
        with caplog.at_level(logging.WARNING, logger="streaming.runtime.error_handlers"):
            pipe_all(driver)
        assert out.read_key_values() == [(f.key, f.value) for f in forwarded if not f.bad]
        lines = [r.getMessage() for r in caplog.records]
        assert [line.split(" skipped")[0] for line in lines] == \
            [f"processing error at topic in partition 0 offset {f.offset}" for f in forwarded if f.bad]
        assert all("no label for bad" in line for line in lines)
        assert driver.metrics()["skipped_records"] == 3 and driver.metrics()["dead_letter_records"] == 0
        assert DLQ not in driver.produced_topic_names


@pytest.mark.parametrize("case", sorted(CACHED))
def test_fail_stops_at_the_first_failed_flush_record_naming_its_source(case: str) -> None:
    build, model, store = CACHED[case]
    first_bad = next(f for f in model(INPUTS) if f.bad)
    with TopologyTestDriver(build().build(), config("fail")) as driver:
        out = driver.create_output_topic("out", Serdes.String(), Serdes.String())
        with pytest.raises(ProcessingError) as raised:
            pipe_all(driver)
        assert f"the cache of store '{store}' forwarded when it flushed" in str(raised.value)
        assert f"(topic=in, partition=0, offset={first_bad.offset})" in str(raised.value)
        assert isinstance(raised.value.__cause__, ValueError)
        assert (raised.value.topic, raised.value.partition, raised.value.offset) == ("in", 0, first_bad.offset)
        # The commit that flushed failed: the offsets stay where the previous commit left them.
        assert driver.committed_offsets == {("in", 0): first_bad.offset}
        assert out.read_values_to_list() == [f.value for f in model(INPUTS)[:first_bad.offset]]


@pytest.mark.parametrize("case", sorted(CACHED))
def test_a_user_handler_gets_the_flush_records_context_and_decides(case: str) -> None:
    build, model, _ = CACHED[case]
    bad = [f for f in model(INPUTS) if f.bad]
    seen: list[ErrorContext] = []

    def skip_then_fail(context: ErrorContext, error: Exception) -> str:
        seen.append(context)
        return "continue" if len(seen) < 3 else "fail"

    with TopologyTestDriver(build().build(), config(skip_then_fail)) as driver:
        out = driver.create_output_topic("out", Serdes.String(), Serdes.String())
        with pytest.raises(ProcessingError, match=f"offset={bad[2].offset}"):
            pipe_all(driver)
        assert [(c.stage, c.task_id, c.topic, c.partition, c.offset, c.timestamp) for c in seen] == \
            [("processing", "0_0", "in", 0, f.offset, f.timestamp) for f in bad]
        assert all(not c.has_input and c.key is None and c.value is None for c in seen)  # no raw bytes kept
        assert out.read_values_to_list() == [f.value for f in model(INPUTS)[:bad[2].offset] if not f.bad]
        assert driver.metrics()["skipped_records"] == 2
        assert driver.committed_offsets == {("in", 0): bad[2].offset}


# -- punctuators ---------------------------------------------------------------------------------------------

PUNCTUATION_MS = 10


class Batcher(Processor):
    """Buffers what it reads; its wall-clock punctuator forwards the buffered records, in order, at its time."""

    def __init__(self) -> None:
        self.buffer: list[tuple[Any, Any]] = []

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        context.schedule(PUNCTUATION_MS, PunctuationType.WALL_CLOCK_TIME, self.punctuate)

    def process(self, record: Record) -> None:
        self.buffer.append((record.key, record.value))

    def punctuate(self, timestamp: int) -> None:
        buffered, self.buffer = self.buffer, []
        for key, value in buffered:
            self.context.forward(Record(key, value, timestamp))


def batched(processor: Callable[[], Processor] = Batcher) -> StreamsBuilder:
    builder = StreamsBuilder()
    (builder.stream("in", key_serde=Serdes.String(), value_serde=Serdes.String())
     .process(processor, name="batcher").map_values(label).to("out", key_serde=Serdes.String(),
                                                              value_serde=Serdes.String()))
    return builder


# Two punctuations: the records piped before each, forwarded at its time.
BATCHES = [[("a", "1"), ("bad1", "2"), ("b", "3")], [("bad2", "4"), ("c", "5")]]


def punctuate_batches(driver: TopologyTestDriver) -> list[int]:
    """Pipe each batch, then move the wall clock to the next punctuation; the punctuation times."""
    source = driver.create_input_topic("in", Serdes.String(), Serdes.String())
    times = []
    for batch in BATCHES:
        for key, value in batch:
            source.pipe_input(key, value, 1_000)
        driver.advance_wall_clock_time(PUNCTUATION_MS)
        times.append(driver.wall_clock_ms)
    return times


def test_dead_letter_keeps_each_failed_record_a_punctuator_forwards_with_no_source_and_it_goes_on() -> None:
    with TopologyTestDriver(batched().build(), config("dead_letter"), initial_wall_clock_time_ms=0) as driver:
        out = driver.create_output_topic("out", Serdes.String(), Serdes.String())
        dlq = driver.create_output_topic(DLQ, Serdes.Bytes(), Serdes.Bytes())
        times = punctuate_batches(driver)
        # Model: every buffered record forwarded at its punctuation; the failing ones to the dead-letter topic
        # (no key, no value, no source: a punctuation has no input record), the others on, in order.
        assert out.read_key_values() == [(k, f"{k}={v}") for batch in BATCHES for k, v in batch if k[:3] != "bad"]
        letters = dlq.read_records_to_list()
        assert [(r.key, r.value, r.timestamp) for r in letters] == [(None, None, times[0]), (None, None, times[1])]
        for letter, name, time in zip(letters, ["bad1", "bad2"], times, strict=True):
            error = error_headers(letter.headers)
            assert (error["stage"], error["type"], error["record"]) == ("processing", "builtins.ValueError", "none")
            assert not any(key.startswith("source.") for key in error)
            assert f"the punctuator of processor 'batcher' forwarded at time {time}" in error["message"]
            assert f"no label for {name}" in error["message"] and "(no input record)" in error["message"]
        assert driver.metrics()["dead_letter_records"] == 2


def test_log_and_continue_skips_each_failed_record_a_punctuator_forwards(caplog: pytest.LogCaptureFixture) -> None:
    with TopologyTestDriver(batched().build(), config("log_and_continue"), initial_wall_clock_time_ms=0) as driver:
        out = driver.create_output_topic("out", Serdes.String(), Serdes.String())
        with caplog.at_level(logging.WARNING, logger="streaming.runtime.error_handlers"):
            times = punctuate_batches(driver)
        assert out.read_values_to_list() == ["a=1", "b=3", "c=5"]
        assert [r.getMessage().split(" skipped")[0] for r in caplog.records] == \
            [f"processing error at time {time} (no input record)" for time in times]
        assert driver.metrics()["skipped_records"] == 2


def test_fail_stops_at_the_first_failed_record_a_punctuator_forwards() -> None:
    with TopologyTestDriver(batched().build(), config("fail"), initial_wall_clock_time_ms=0) as driver:
        out = driver.create_output_topic("out", Serdes.String(), Serdes.String())
        with pytest.raises(ProcessingError, match=r"punctuator of processor 'batcher' forwarded at time 10: "
                                                  r"ValueError\('no label for bad1'\) \(no input record\)"):
            punctuate_batches(driver)
        assert out.read_values_to_list() == ["a=1"]


def test_a_user_handler_gets_a_punctuation_context_with_no_input_record() -> None:
    seen: list[ErrorContext] = []

    def skip(context: ErrorContext, error: Exception) -> str:
        seen.append(context)
        return "continue"

    with TopologyTestDriver(batched().build(), config(skip), initial_wall_clock_time_ms=0) as driver:
        out = driver.create_output_topic("out", Serdes.String(), Serdes.String())
        times = punctuate_batches(driver)
        assert out.read_values_to_list() == ["a=1", "b=3", "c=5"]
    assert [(c.stage, c.task_id, c.topic, c.partition, c.offset, c.timestamp, c.has_input) for c in seen] == \
        [("processing", "0_0", None, None, None, time, False) for time in times]


class Flaky(Batcher):
    """A punctuator that fails on its first punctuation, before forwarding anything (its buffer stays)."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    def punctuate(self, timestamp: int) -> None:
        if not self.failed:
            self.failed = True
            raise RuntimeError("punctuator out of order")
        super().punctuate(timestamp)


def test_a_punctuators_own_failure_goes_to_the_handler_with_no_record_and_it_fires_again() -> None:
    with TopologyTestDriver(batched(Flaky).build(), config("dead_letter"), initial_wall_clock_time_ms=0) as driver:
        out = driver.create_output_topic("out", Serdes.String(), Serdes.String())
        dlq = driver.create_output_topic(DLQ, Serdes.Bytes(), Serdes.Bytes())
        times = punctuate_batches(driver)
        [failed_punctuation, *bad] = dlq.read_records_to_list()
        assert (failed_punctuation.key, failed_punctuation.value, failed_punctuation.timestamp) == (None, None, times[0])
        error = error_headers(failed_punctuation.headers)
        assert (error["stage"], error["type"], error["record"]) == ("processing", "builtins.RuntimeError", "none")
        assert not any(key.startswith("source.") for key in error)
        assert f"punctuator of processor 'batcher' failed at time {times[0]}: RuntimeError('punctuator out of " \
               f"order') (no input record)" in error["message"]
        # The second punctuation forwards both batches (the first stayed buffered): bad1 and bad2 fail there.
        assert out.read_values_to_list() == ["a=1", "b=3", "c=5"]
        assert [(r.timestamp, error_headers(r.headers)["message"].split(": ")[-1]) for r in bad] == \
            [(times[1], "ValueError('no label for bad1') (no input record)"),
             (times[1], "ValueError('no label for bad2') (no input record)")]
        assert driver.metrics()["dead_letter_records"] == 3
