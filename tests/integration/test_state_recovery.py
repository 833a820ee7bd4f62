"""State survives crashes and restarts: changelog restore, checkpoints, at-least-once accounting."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streaming import KafkaStreams, Serdes
from streaming.admin import create_topics
from streaming.runtime.kafka_streams import State
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import committed_offsets, produce, read_topic, wait_for
from tests.integration.workloads import counting

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 4


def keyed_records(count: int, keys: int) -> list[GeneratedRecord]:
    return [GeneratedRecord(f"key-{i % keys:03d}", f"v{i}", 1_700_000_000_000 + i) for i in range(count)]


def start_worker(bootstrap: str, app_id: str, state_dir: Path, source: str, sink: str, log: Path,
                 slow_ms: int = 0) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "streaming.cli.main", "worker", "run", "tests.integration.workloads.counting:topology",
         "--set", f"bootstrap.servers={bootstrap}", "--set", f"application.id={app_id}",
         "--set", f"state.dir={state_dir}", "--set", "commit.interval.ms=300"],
        cwd=ROOT, stdout=log.open("ab"), stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COUNT_INPUT": source, "COUNT_OUTPUT": sink,
             "COUNT_SLOW_MS": str(slow_ms)})


@pytest.mark.slow
def test_sigkilled_worker_restarts_and_only_uncommitted_records_may_count_twice(
        bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS})
    records = keyed_records(4_000, 50)
    ends = produce(bootstrap, source, records, Serdes.String(), Serdes.String())
    state_dir, log = tmp_path / "state", tmp_path / "worker.log"

    first = start_worker(bootstrap, unique_name, state_dir, source, sink, log, slow_ms=2)
    try:
        wait_for(lambda: sum(committed_offsets(bootstrap, unique_name, source, PARTITIONS).values()) > 1_000,
                 60, "the first worker to commit part of the input")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    committed_at_kill = committed_offsets(bootstrap, unique_name, source, PARTITIONS)
    assert sum(committed_at_kill.values()) < len(records), "the worker finished before it was killed"

    second = start_worker(bootstrap, unique_name, state_dir, source, sink, log)
    try:
        wait_for(lambda: committed_offsets(bootstrap, unique_name, source, PARTITIONS) == ends, 90,
                 "the restarted worker to commit all input")
        second.send_signal(signal.SIGTERM)
        assert second.wait(30) == 0, log.read_text()
    finally:
        if second.poll() is None:
            second.kill()
    assert "wiping local state" in log.read_text() or "restoring store" in log.read_text()

    output = read_topic(bootstrap, sink, Serdes.String(), Serdes.Json(), PARTITIONS)
    processed = collections.Counter((r.value["partition"], r.value["offset"]) for r in output)
    partition_of = {}  # input (partition, offset) -> key, from the output itself
    for r in output:
        partition_of[(r.value["partition"], r.value["offset"])] = r.key
    assert len(processed) == len(records), "an input record never reached the output"
    uncommitted = {po for po in processed if po[1] >= committed_at_kill.get(po[0], 0)}
    twice = {po for po, n in processed.items() if n > 1}
    assert twice <= uncommitted, "a committed record was processed twice"

    true_counts = collections.Counter(r.key for r in records)
    extra_allowed = collections.Counter(partition_of[po] for po in uncommitted)
    final = {r.key: r.value["count"] for r in sorted(output, key=lambda r: (r.partition, r.offset))}
    for key, count in true_counts.items():
        assert count <= final[key] <= count + extra_allowed[key], (key, final[key], count, extra_allowed[key])
    for key in set(true_counts) - set(extra_allowed):
        assert final[key] == true_counts[key], f"{key} has no uncommitted records but its count is off"


class RestoreRecorder:
    def __init__(self) -> None:
        self.starts: dict[tuple[str, int], tuple[int, int]] = {}
        self.restored: dict[tuple[str, int], int] = collections.defaultdict(int)
        self.ends: dict[tuple[str, int], int] = {}

    def on_restore_start(self, tp: tuple[str, int], store: str, start: int, end: int) -> None:
        self.starts[tp] = (start, end)

    def on_batch_restored(self, tp: tuple[str, int], store: str, batch_end: int, count: int) -> None:
        self.restored[tp] += count

    def on_restore_end(self, tp: tuple[str, int], store: str, total: int) -> None:
        self.ends[tp] = total


def run_until_committed(bootstrap: str, app_id: str, state_dir: Path, source: str, sink: str,
                        ends: dict[int, int], listener: Any = None) -> KafkaStreams:
    app = KafkaStreams(counting.topology(source, sink), {
        "application.id": app_id, "bootstrap.servers": bootstrap, "state.dir": str(state_dir),
        "commit.interval.ms": 300})
    if listener is not None:
        app.set_global_state_restore_listener(listener)
    app.start()
    try:
        wait_for(lambda: app.state is State.RUNNING and len(app.metrics()["tasks"]) == PARTITIONS
                 and committed_offsets(bootstrap, app_id, source, PARTITIONS) == ends, 60,
                 "restored and all input committed")
    finally:
        assert app.close(30)
    assert app.exception is None
    return app


def test_clean_restart_restores_from_the_checkpoint_not_from_zero(bootstrap: str, unique_name: str,
                                                                   tmp_path: Path) -> None:
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    changelog = f"{unique_name}-{counting.STORE}-changelog"
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS})
    ends = produce(bootstrap, source, keyed_records(3_000, 300), Serdes.String(), Serdes.String())

    first = RestoreRecorder()
    run_until_committed(bootstrap, unique_name, tmp_path / "state", source, sink, ends, first)
    assert sum(first.restored.values()) == 0  # a fresh application has an empty changelog
    changelog_records = len(read_topic(bootstrap, changelog, Serdes.Bytes(), Serdes.Bytes(), PARTITIONS))
    # No caching: every update went downstream, but the changelog holds each key's latest value per
    # commit (write-behind logging), which restores the same state: at least one record per key.
    assert 300 <= changelog_records <= 3_000
    assert all((tmp_path / "state" / unique_name / f"0_{p}" / ".checkpoint").exists() for p in range(PARTITIONS))

    again = RestoreRecorder()
    run_until_committed(bootstrap, unique_name, tmp_path / "state", source, sink, ends, again)
    assert set(again.starts) == {(changelog, p) for p in range(PARTITIONS)}
    assert all(0 < start == end for start, end in again.starts.values()), again.starts
    # The checkpoint is the changelog's exact end: a clean restart re-reads nothing.
    assert sum(again.restored.values()) == 0, dict(again.restored)

    fresh = RestoreRecorder()
    run_until_committed(bootstrap, unique_name, tmp_path / "other-machine", source, sink, ends, fresh)
    assert all(start == 0 for start, _ in fresh.starts.values())
    assert sum(fresh.restored.values()) == changelog_records
