"""The processing span the benchmarks read (bench/harness.py): recorded per processing round, never per record."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from streaming.metrics.histogram import Histogram
from streaming.runtime.kafka_streams import KafkaStreams
from streaming.runtime.stream_thread import StreamThread


class FakeTask:
    def __init__(self, records: int) -> None:
        self.buffered_records = records
        self.last_processed = None

    def process_next(self, chunk: int, caught_up: Any) -> int:
        count = min(chunk, self.buffered_records)
        self.buffered_records -= count
        return count


def thread_with(*tasks: FakeTask) -> StreamThread:
    thread = object.__new__(StreamThread)
    thread.tasks = SimpleNamespace(tasks={i: task for i, task in enumerate(tasks)})
    thread.config = SimpleNamespace(max_poll_records=10)
    thread._processing_budget, thread._chunk, thread.processed = float("inf"), 10, 0
    thread.first_processed_at = thread.last_processed_at = None
    thread.first_processed = 0
    thread.process_latency, thread.e2e_latency = Histogram(), Histogram()
    return thread


def test_the_first_and_last_round_are_recorded() -> None:
    thread = thread_with(FakeTask(25), FakeTask(5))
    before = time.perf_counter()
    assert thread._process_buffered() == (30, False)
    first = thread.first_processed_at
    assert first is not None and first >= before and thread.first_processed == 30
    assert thread.last_processed_at == first
    assert thread._process_buffered() == (0, False)  # nothing buffered: the span stays
    assert thread.last_processed_at == first
    thread.tasks.tasks[0].buffered_records = 3
    assert thread._process_buffered() == (3, False)
    assert thread.last_processed_at > first and thread.first_processed_at == first and thread.first_processed == 30


def test_the_app_combines_its_threads() -> None:
    app = object.__new__(KafkaStreams)
    idle = SimpleNamespace(processed=0, first_processed_at=None, first_processed=0, last_processed_at=None)
    app._threads = [idle]
    assert app.processing_span() == (0, 0, None, None)
    a = SimpleNamespace(processed=100, first_processed_at=2.0, first_processed=10, last_processed_at=9.0)
    b = SimpleNamespace(processed=50, first_processed_at=1.0, first_processed=5, last_processed_at=7.0)
    app._threads = [a, b, idle]
    assert app.processing_span() == (150, 5, 1.0, 9.0)
