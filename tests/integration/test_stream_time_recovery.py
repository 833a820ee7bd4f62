"""Stream time survives a crash: a worker SIGKILLed after committing, started again, drops a record that
is late relative to the stream time it had committed, even when that record is the first it processes.

Kafka Streams keeps each partition's time in the offset commit metadata; the embedded broker drops commit
metadata (docs/broker-limits.md), so on it this test exercises the stream-time topic
(``<application.id>-<subtopology>-stream-time``, :mod:`streaming.runtime.stream_time`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from streaming.admin import create_topics
from streaming.naming import stream_time_topic
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import committed_offsets, produce, read_topic, wait_for
from tests.integration.workloads.windowed_count import GRACE, SIZE, WINDOWED, Long, String

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 2
KEYS = [f"k{i}" for i in range(8)]  # both partitions get keys
START, STEP, COUNT = 1_000, 100, 200  # on-time records at 1000..20900 ms: stream time ~20.9 s per partition
LATE_AT = 2_000  # window [2000, 3000) closed at 3500 ms of stream time


def start_worker(bootstrap: str, app_id: str, inputs: list[str], output: str, late: str, state_dir: Path,
                 log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "streaming.cli.main", "worker", "run",
         "tests.integration.workloads.windowed_count:topology", "--set", f"bootstrap.servers={bootstrap}",
         "--set", f"application.id={app_id}", "--set", f"state.dir={state_dir}", "--set", "commit.interval.ms=200"],
        cwd=ROOT, stdout=log.open("ab"), stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "WCOUNT_INPUTS": ",".join(inputs), "WCOUNT_OUTPUT": output,
             "WCOUNT_LATE": late})


def produce_all(bootstrap: str, inputs: list[str], records: list[GeneratedRecord],
                ends: dict[str, dict[int, int]]) -> None:
    """``records`` spread over ``inputs`` in turn; ``ends`` (topic -> partition -> end offset) updated."""
    for index, topic in enumerate(inputs):
        ends[topic].update(produce(bootstrap, topic, records[index::len(inputs)], String, String))


def wait_committed(bootstrap: str, app_id: str, ends: dict[str, dict[int, int]], worker: subprocess.Popen[bytes],
                   log: Path) -> None:
    def done() -> bool:
        assert worker.poll() is None, log.read_text()[-3000:]
        return all(committed_offsets(bootstrap, app_id, topic, PARTITIONS) == {p: ends[topic].get(p, 0)
                                                                              for p in range(PARTITIONS)}
                   for topic in ends)
    wait_for(done, 120, "the worker to commit every input record")


@pytest.mark.parametrize("topics", [1, 2], ids=["one-partition-task", "two-partition-task"])
def test_a_late_record_first_after_a_sigkill_is_dropped_not_counted(bootstrap: str, unique_name: str,
                                                                     tmp_path: Path, topics: int) -> None:
    inputs = [f"{unique_name}-in-{i}" for i in range(topics)]
    output, late = f"{unique_name}-out", f"{unique_name}-late"
    create_topics(bootstrap, {**dict.fromkeys(inputs, PARTITIONS), output: PARTITIONS, late: PARTITIONS})
    on_time = [GeneratedRecord(KEYS[n % len(KEYS)], "v", START + STEP * n) for n in range(COUNT)]
    ends: dict[str, dict[int, int]] = {topic: {} for topic in inputs}
    produce_all(bootstrap, inputs, on_time, ends)
    state_dir, log = tmp_path / "state", tmp_path / "worker.log"

    first = start_worker(bootstrap, unique_name, inputs, output, late, state_dir, log)
    try:
        wait_committed(bootstrap, unique_name, ends, first, log)
    finally:
        first.send_signal(signal.SIGKILL)
        assert first.wait(10) == -signal.SIGKILL

    # After the crash: first a record per key for the window [2000, 3000), closed long ago; then on-time ones.
    late_records = [GeneratedRecord(key, "late", LATE_AT) for key in KEYS]
    produce_all(bootstrap, inputs[:1], late_records, ends)
    produce_all(bootstrap, inputs, [GeneratedRecord(key, "v", START + STEP * COUNT) for key in KEYS], ends)
    second = start_worker(bootstrap, unique_name, inputs, output, late, state_dir, log)
    try:
        wait_committed(bootstrap, unique_name, ends, second, log)
        second.send_signal(signal.SIGTERM)
        assert second.wait(60) == 0, log.read_text()[-3000:]
    finally:
        if second.poll() is None:
            second.kill()

    dropped = read_topic(bootstrap, late, String, String, PARTITIONS)
    assert sorted((r.key, r.timestamp) for r in dropped) == [(key, LATE_AT) for key in KEYS], \
        "every late record is dropped to the late-records topic, none counted"
    counts = read_topic(bootstrap, output, WINDOWED, Long, PARTITIONS)
    expected = Counter((r.key, r.timestamp - r.timestamp % SIZE) for r in on_time)
    highest: dict[tuple[str, int], int] = {}
    for r in counts:
        window = (r.key.key, r.key.window.start)
        highest[window] = max(highest.get(window, 0), r.value)
    reopened = {window: n for window, n in highest.items() if window[1] == LATE_AT and n != expected[window]}
    assert not reopened, f"closed windows counted late records after the restart: {reopened}"
    assert START + STEP * COUNT - LATE_AT > SIZE + GRACE
    assert "goes on from stream time" in log.read_text()
    stored = read_topic(bootstrap, stream_time_topic(unique_name, 0), String, String, PARTITIONS)
    assert {r.key for r in stored} == {"0_0", "0_1"}, "each task kept its stream time in the stream-time topic"


def test_the_counts_own_time_survives_a_sigkill_at_the_window_boundary(bootstrap: str, unique_name: str,
                                                                       tmp_path: Path) -> None:
    """Per key: 1000 and 2500 close [1000, 2000) exactly (2500 - grace 500), and a record at 50 s that a filter
    removes moves the task's time but not the count's. After a SIGKILL, 1999 is late and 2000 is on time: the
    restarted count goes on from its own committed time (not the task's 50 s, which would drop 2000 too, nor a
    time derived anew, which would reopen [1000, 2000) for 1999)."""
    inputs, output, late = [f"{unique_name}-in"], f"{unique_name}-out", f"{unique_name}-late"
    create_topics(bootstrap, {inputs[0]: PARTITIONS, output: PARTITIONS, late: PARTITIONS})
    ends: dict[str, dict[int, int]] = {inputs[0]: {}}
    produce_all(bootstrap, inputs, [GeneratedRecord(key, value, ts) for ts, value in
                                    ((1_000, "v"), (2_500, "v"), (50_000, "skip")) for key in KEYS], ends)
    state_dir, log = tmp_path / "state", tmp_path / "worker.log"
    first = start_worker(bootstrap, unique_name, inputs, output, late, state_dir, log)
    try:
        wait_committed(bootstrap, unique_name, ends, first, log)
    finally:
        first.send_signal(signal.SIGKILL)
        assert first.wait(10) == -signal.SIGKILL

    produce_all(bootstrap, inputs, [GeneratedRecord(key, "v", ts) for ts in (1_999, 2_000) for key in KEYS], ends)
    second = start_worker(bootstrap, unique_name, inputs, output, late, state_dir, log)
    try:
        wait_committed(bootstrap, unique_name, ends, second, log)
        second.send_signal(signal.SIGTERM)
        assert second.wait(60) == 0, log.read_text()[-3000:]
    finally:
        if second.poll() is None:
            second.kill()

    dropped = read_topic(bootstrap, late, String, String, PARTITIONS)
    assert sorted((r.key, r.timestamp) for r in dropped) == [(key, 1_999) for key in KEYS]
    counts = {(r.key.key, r.key.window.start, r.value) for r in read_topic(bootstrap, output, WINDOWED, Long,
                                                                             PARTITIONS)}
    assert counts == {(key, start, 1) for key in KEYS for start in (1_000, 2_000)} | \
        {(key, 2_000, 2) for key in KEYS}, "each key: [1000, 2000) counted once, [2000, 3000) twice"
    assert "node times {'wcounts': 2500}" in log.read_text()
