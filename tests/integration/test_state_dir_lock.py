"""One process per state directory (issue 16, item 8): a second worker of an app on the same ``state.dir``
fails at start with one line naming the directory, the owner's pid and the fix, and never opens, wipes or
writes a store; the first keeps running with its state intact; a lock left by a SIGKILLed worker does not
block the next start. As Kafka Streams' ``StateDirectory.initializeProcessId``, which locks
``<state.dir>/<application.id>/.lock`` and refuses a second instance."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from streaming import KafkaStreams, Serdes
from streaming.admin import create_topics
from streaming.errors import StateDirectoryLockedError
from streaming.runtime.kafka_streams import State
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import committed_offsets, produce, wait_for
from tests.integration.workloads import counting

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 4
KEYS = 40


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def records(count: int, start: int = 0) -> list[GeneratedRecord]:
    return [GeneratedRecord(f"key-{i % KEYS:02d}", f"v{i}", 1_700_000_000_000 + i) for i in range(start, start + count)]


class Worker:
    """A ``brook worker run`` of the counting app with a standby replica, serving its store over HTTP."""

    def __init__(self, bootstrap: str, app_id: str, state_dir: Path, source: str, sink: str, log: Path) -> None:
        self.server = f"127.0.0.1:{free_port()}"
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "streaming.cli.main", "worker", "run",
             "tests.integration.workloads.counting:topology", "--set", f"bootstrap.servers={bootstrap}",
             "--set", f"application.id={app_id}", "--set", f"state.dir={state_dir}",
             "--set", "commit.interval.ms=300", "--set", "num.standby.replicas=1",
             "--set", f"application.server={self.server}"],
            cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "COUNT_INPUT": source, "COUNT_OUTPUT": sink})

    def count(self, key: str) -> int | None:
        """The worker's store's value for ``key`` (None while it cannot answer)."""
        try:
            with urllib.request.urlopen(f"http://{self.server}/stores/counts/{key}", timeout=5) as response:
                return json.loads(response.read())["value"]
        except (urllib.error.URLError, ConnectionError, TimeoutError, KeyError):
            return None

    def store(self) -> dict[str, int | None]:
        return {f"key-{k:02d}": self.count(f"key-{k:02d}") for k in range(KEYS)}

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        self.process.send_signal(sig)
        return self.process.wait(30)

    def kill_if_running(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@pytest.mark.slow
def test_a_second_worker_on_the_same_state_dir_is_refused_and_the_first_keeps_its_state(
        bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS})
    first_half = records(4_000)
    ends = produce(bootstrap, source, first_half, Serdes.String(), Serdes.String())
    state_dir = tmp_path / "state"  # shared, as two workers with the default state.dir on one host
    app_dir = state_dir / unique_name
    workers: list[Worker] = []
    try:
        first = Worker(bootstrap, unique_name, state_dir, source, sink, tmp_path / "first.log")
        workers.append(first)
        wait_for(lambda: committed_offsets(bootstrap, unique_name, source, PARTITIONS) == ends, 90,
                 "the first worker to commit all input")

        second = Worker(bootstrap, unique_name, state_dir, source, sink, tmp_path / "second.log")
        workers.append(second)
        assert second.process.wait(30) == 2
        output = second.log.read_text()
        errors = [line for line in output.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, output
        assert str(app_dir) in errors[0] and f"pid {first.process.pid}" in errors[0] and "state.dir" in errors[0]
        assert "created task" not in output and "standby" not in output and "restoring" not in output

        # The first worker never noticed: it keeps processing, and its store is the oracle's.
        all_input = first_half + records(2_000, start=4_000)
        ends = produce(bootstrap, source, all_input[4_000:], Serdes.String(), Serdes.String())
        wait_for(lambda: committed_offsets(bootstrap, unique_name, source, PARTITIONS) == ends, 90,
                 "the first worker to commit the new input")
        assert first.process.poll() is None
        oracle = dict(Counter(r.key for r in all_input))
        wait_for(lambda: first.store() == oracle, 30, "the first worker's store to equal the oracle")
        assert first.stop() == 0
        assert "Corruption" not in first.log.read_text() and "LOCK" not in first.log.read_text()

        # After both stopped, a single worker starts on the same directory, from the first one's checkpoints.
        third = Worker(bootstrap, unique_name, state_dir, source, sink, tmp_path / "third.log")
        workers.append(third)
        wait_for(lambda: third.store() == oracle, 60, "a single worker to start and serve the oracle's counts")
        assert "restored store 'counts'" in third.log.read_text()
        assert all(line.endswith(": 0 records") or " 0 records in" in line
                   for line in third.log.read_text().splitlines() if "restored store 'counts'" in line)

        # SIGKILL leaves the lock file with a dead pid in it: the kernel released the lock, so the next start works.
        assert third.stop(signal.SIGKILL) == -signal.SIGKILL
        assert (app_dir / ".lock").exists()
        fourth = Worker(bootstrap, unique_name, state_dir, source, sink, tmp_path / "fourth.log")
        workers.append(fourth)
        wait_for(lambda: fourth.store() == oracle, 60, "a worker to start after a SIGKILLed one")
        assert fourth.stop() == 0
    finally:
        for worker in workers:
            worker.kill_if_running()


def test_two_instances_in_one_process_never_share_a_state_dir(bootstrap: str, unique_name: str,
                                                               tmp_path: Path) -> None:
    """Kafka Streams refuses a second instance in one JVM too (its FileChannel lock overlaps): so does Brook.
    A topology without persistent stores keeps nothing on disk and takes no lock (as Kafka Streams)."""
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS})
    config = {"application.id": unique_name, "bootstrap.servers": bootstrap, "state.dir": str(tmp_path),
              "commit.interval.ms": 200}
    first = KafkaStreams(counting.topology(source, sink), config)
    first.start()
    try:
        wait_for(lambda: first.state is State.RUNNING, 60, "the first instance to run")
        second = KafkaStreams(counting.topology(source, sink), config)
        with pytest.raises(StateDirectoryLockedError) as refused:
            second.start()
        message = str(refused.value)
        assert "\n" not in message and str(tmp_path / unique_name) in message
        assert f"pid {os.getpid()}" in message and "this process" in message and "state.dir" in message
        assert second.state is State.NOT_RUNNING
        assert first.state is State.RUNNING and first.exception is None
    finally:
        assert first.close(30)
    again = KafkaStreams(counting.topology(source, sink), config)  # close() released the directory
    again.start()
    try:
        wait_for(lambda: again.state is State.RUNNING, 60, "an instance to start after the first closed")
    finally:
        assert again.close(30)
