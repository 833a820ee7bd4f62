"""Punctuators: stream-time (driven by record timestamps) and wall-clock (driven by the driver's clock)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from streaming import Serdes, StreamsError, Topology
from streaming.processor import Cancellable, Processor, ProcessorContext, PunctuationType, Record
from streaming.testing import TopologyTestDriver

CONFIG = {"application.id": "punctuation-test"}


class Ticker(Processor):
    """Schedules one punctuator; records each firing and forwards ("tick", timestamp) downstream."""

    def __init__(self, interval: Any, kind: PunctuationType, cancel_after: int | None = None) -> None:
        self.interval = interval
        self.kind = kind
        self.cancel_after = cancel_after
        self.fired: list[int] = []
        self.topics_seen_in_punctuation: list[Any] = []
        self.handle: Cancellable | None = None

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.handle = context.schedule(self.interval, self.kind, self.punctuate)

    def punctuate(self, timestamp: int) -> None:
        self.fired.append(timestamp)
        self.topics_seen_in_punctuation.append(self.context.topic)
        self.context.forward(Record("tick", timestamp, timestamp))
        if self.cancel_after is not None and len(self.fired) >= self.cancel_after:
            assert self.handle is not None
            self.handle.cancel()

    def process(self, record: Record) -> None:
        pass


def driver_for(ticker: Ticker, **kwargs: Any) -> TopologyTestDriver:
    topology = (Topology().add_source("src", "in").add_processor("ticker", lambda: ticker, "src")
                .add_sink("sink", "ticks", "ticker", value_serde=Serdes.Long()))
    return TopologyTestDriver(topology, CONFIG, **kwargs)


# -- stream time ---------------------------------------------------------------------------------------------

def test_stream_time_punctuation_is_aligned_to_zero_and_fires_once_for_missed_intervals() -> None:
    ticker = Ticker(10, PunctuationType.STREAM_TIME)
    with driver_for(ticker, initial_wall_clock_time_ms=0) as driver:
        inp = driver.create_input_topic("in")
        steps = [(3, [3]),       # the first record: 0 is a multiple of the interval
                 (7, []),        # next due at 10
                 (12, [12]),     # crosses 10; next due at 20
                 (15, []),
                 (45, [45]),     # crosses 20, 30 and 40: fires once; next due at 50
                 (30, []),       # out of order: stream time stays 45
                 (49, []),
                 (50, [50]),     # exactly on the multiple
                 (51, [])]
        for timestamp, expected in steps:
            before = len(ticker.fired)
            inp.pipe_input("k", "v", timestamp=timestamp)
            assert ticker.fired[before:] == expected, f"at stream time {timestamp}"
        out = driver.create_output_topic("ticks", Serdes.String(), Serdes.Long())
        assert [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()] == [
            ("tick", 3, 3), ("tick", 12, 12), ("tick", 45, 45), ("tick", 50, 50)]
        # metadata describes no input record inside a punctuation
        assert ticker.topics_seen_in_punctuation == [None] * 4


def test_stream_time_punctuation_ignores_the_wall_clock() -> None:
    ticker = Ticker(10, PunctuationType.STREAM_TIME)
    with driver_for(ticker, initial_wall_clock_time_ms=0) as driver:
        driver.advance_wall_clock_time(1_000_000)
        assert ticker.fired == []
        driver.create_input_topic("in").pipe_input("k", "v", timestamp=25)
        assert ticker.fired == [25]
        driver.advance_wall_clock_time(1_000_000)
        assert ticker.fired == [25]


def test_stream_time_punctuation_cancel_stops_it() -> None:
    ticker = Ticker(10, PunctuationType.STREAM_TIME, cancel_after=2)
    with driver_for(ticker) as driver:
        inp = driver.create_input_topic("in")
        for timestamp in (0, 10, 20, 30, 40):
            inp.pipe_input("k", "v", timestamp=timestamp)
        assert ticker.fired == [0, 10]


def test_stream_time_punctuation_with_a_timedelta_interval() -> None:
    ticker = Ticker(timedelta(seconds=1), PunctuationType.STREAM_TIME)
    with driver_for(ticker) as driver:
        inp = driver.create_input_topic("in")
        for timestamp in (100, 999, 1000, 1999, 2500):
            inp.pipe_input("k", "v", timestamp=timestamp)
        assert ticker.fired == [100, 1000, 2500]


def test_cancel_from_outside_the_punctuator() -> None:
    ticker = Ticker(10, PunctuationType.STREAM_TIME)
    with driver_for(ticker) as driver:
        inp = driver.create_input_topic("in")
        inp.pipe_input("k", "v", timestamp=5)
        assert ticker.handle is not None
        ticker.handle.cancel()
        inp.pipe_input("k", "v", timestamp=100)
        assert ticker.fired == [5]


# -- wall-clock time -----------------------------------------------------------------------------------------

def test_wall_clock_punctuation_fires_on_advance_not_on_records() -> None:
    ticker = Ticker(100, PunctuationType.WALL_CLOCK_TIME)
    with driver_for(ticker, initial_wall_clock_time_ms=1_000) as driver:
        inp = driver.create_input_topic("in")
        for timestamp in (0, 5_000, 1_000_000):  # record time never drives wall-clock punctuation
            inp.pipe_input("k", "v", timestamp=timestamp)
        assert ticker.fired == []
        driver.advance_wall_clock_time(99)
        assert ticker.fired == []
        driver.advance_wall_clock_time(1)  # 1_100: first due one interval after scheduling
        assert ticker.fired == [1_100]
        driver.advance_wall_clock_time(250)  # 1_350: missed 1_200 and 1_300 fire once
        assert ticker.fired == [1_100, 1_350]
        driver.advance_wall_clock_time(49)  # 1_399: next is due at 1_400
        assert ticker.fired == [1_100, 1_350]
        driver.advance_wall_clock_time(timedelta(milliseconds=1))
        assert ticker.fired == [1_100, 1_350, 1_400]
        out = driver.create_output_topic("ticks", Serdes.String(), Serdes.Long())
        assert out.read_values_to_list() == [1_100, 1_350, 1_400]
        assert ticker.topics_seen_in_punctuation == [None] * 3


def test_wall_clock_punctuation_cancel_stops_it() -> None:
    ticker = Ticker(timedelta(seconds=1), PunctuationType.WALL_CLOCK_TIME, cancel_after=1)
    with driver_for(ticker, initial_wall_clock_time_ms=0) as driver:
        for _ in range(5):
            driver.advance_wall_clock_time(1_000)
        assert ticker.fired == [1_000]


def test_current_system_time_is_the_driver_clock() -> None:
    seen: list[int] = []

    class Clock(Processor):
        def process(self, record: Record) -> None:
            seen.append(self.context.current_system_time_ms)

    topology = Topology().add_source("src", "in").add_processor("p", Clock, "src")
    with TopologyTestDriver(topology, CONFIG, initial_wall_clock_time_ms=5_000) as driver:
        inp = driver.create_input_topic("in")
        inp.pipe_input("k", "v", timestamp=1)
        driver.advance_wall_clock_time(timedelta(seconds=2))
        inp.pipe_input("k", "v", timestamp=1)
    assert seen == [5_000, 7_000]


# -- errors --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("interval", [0, -5, 1.5, timedelta(0)])
def test_schedule_rejects_a_bad_interval(interval: Any) -> None:
    errors: list[Exception] = []

    class Bad(Processor):
        def init(self, context: ProcessorContext) -> None:
            try:
                context.schedule(interval, PunctuationType.STREAM_TIME, lambda ts: None)
            except ValueError as exc:
                errors.append(exc)

        def process(self, record: Record) -> None:
            pass

    with TopologyTestDriver(Topology().add_source("src", "in").add_processor("p", Bad, "src"), CONFIG):
        pass
    assert len(errors) == 1 and "punctuation interval" in str(errors[0])


def test_schedule_rejects_a_bad_type() -> None:
    errors: list[Exception] = []

    class Bad(Processor):
        def init(self, context: ProcessorContext) -> None:
            try:
                context.schedule(10, "stream_time", lambda ts: None)  # type: ignore[arg-type]
            except ValueError as exc:
                errors.append(exc)

        def process(self, record: Record) -> None:
            pass

    with TopologyTestDriver(Topology().add_source("src", "in").add_processor("p", Bad, "src"), CONFIG):
        pass
    assert len(errors) == 1 and "PunctuationType" in str(errors[0])


def test_a_failing_punctuator_names_its_processor() -> None:
    class Boom(Processor):
        def init(self, context: ProcessorContext) -> None:
            context.schedule(10, PunctuationType.WALL_CLOCK_TIME, self.boom)

        def boom(self, timestamp: int) -> None:
            raise RuntimeError("kaput")

        def process(self, record: Record) -> None:
            pass

    topology = Topology().add_source("src", "in").add_processor("boom-node", Boom, "src")
    with TopologyTestDriver(topology, CONFIG, initial_wall_clock_time_ms=0) as driver:
        with pytest.raises(StreamsError, match="punctuator of processor 'boom-node' failed at time 10.*kaput"):
            driver.advance_wall_clock_time(10)
