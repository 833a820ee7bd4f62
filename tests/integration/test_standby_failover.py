"""Standby replicas: when the active instance dies, the survivor takes over from its warm copy and
serves the key over HTTP with the right value."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from streaming.admin import create_topics
from streaming.serdes import Serdes
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import committed_offsets, produce, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 4


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(server: str, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://{server}{path}", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, {}


def test_survivor_takes_over_from_its_standby_and_serves_the_key(bootstrap: str, unique_name: str,
                                                                  tmp_path: Path) -> None:
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS})
    records = [GeneratedRecord(f"key-{i % 40:02d}", f"v{i}", 1_700_000_000_000 + i) for i in range(4_000)]
    ends = produce(bootstrap, source, records, Serdes.String(), Serdes.String())
    expected = Counter(r.key for r in records)

    servers = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    logs = [tmp_path / f"worker-{i}.log" for i in range(2)]
    workers = [subprocess.Popen(
        [sys.executable, "-m", "streaming.cli.main", "worker", "run", "tests.integration.workloads.counting:topology",
         "--set", f"bootstrap.servers={bootstrap}", "--set", f"application.id={unique_name}",
         "--set", f"state.dir={tmp_path / f'state-{i}'}", "--set", "commit.interval.ms=300",
         "--set", "num.standby.replicas=1", "--set", f"application.server={servers[i]}"],
        cwd=ROOT, stdout=logs[i].open("wb"), stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COUNT_INPUT": source, "COUNT_OUTPUT": sink})
        for i in range(2)]
    try:
        wait_for(lambda: committed_offsets(bootstrap, unique_name, source, PARTITIONS) == ends, 90,
                 "all input committed")
        key = "key-07"
        status, body = get(servers[0], f"/stores/counts/{key}")
        if status == 421:
            owner = servers.index(body["owner"])
        else:
            assert status == 200, (status, body)
            owner = 0
        survivor = 1 - owner
        wait_for(lambda: get(servers[owner], f"/stores/counts/{key}")[1].get("value") == expected[key], 30,
                 "the owner to serve the final count")
        assert "created standby task" in logs[survivor].read_text()

        workers[owner].send_signal(signal.SIGKILL)
        workers[owner].wait(10)
        wait_for(lambda: get(servers[survivor], f"/stores/counts/{key}")[0] == 200, 60,
                 "the survivor to own the key")
        status, body = get(servers[survivor], f"/stores/counts/{key}")
        assert (status, body["value"]) == (200, expected[key])
        for other in ("key-00", "key-13", "key-39"):
            assert get(servers[survivor], f"/stores/counts/{other}")[1]["value"] == expected[other]
        # The warm standby made the failover restore (almost) nothing: at most the last records.
        restored = [int(n) for n in re.findall(r"restored store 'counts' of task \S+: (\d+) records",
                                                logs[survivor].read_text())]
        assert restored and max(restored) < len(records) / 20, restored
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        for worker in workers:
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()


def test_several_stream_threads_with_standbys_never_share_a_task_directory(bootstrap: str, unique_name: str,
                                                                           tmp_path: Path) -> None:
    """Issue 6, item 2: with num.stream.threads=2 and a standby replica, no thread opens a standby of a task
    another thread of its instance runs (it crashed with "lock hold by current process"). A second such
    instance joins: tasks move, each instance keeps standby copies of exactly the tasks the other runs."""
    from streaming import KafkaStreams
    from streaming.testing.kafka import read_topic
    from tests.integration.workloads.counting import topology

    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS})
    records = [GeneratedRecord(f"key-{i % 40:02d}", f"v{i}", 1_700_000_000_000 + i) for i in range(4_000)]
    ends = produce(bootstrap, source, records, Serdes.String(), Serdes.String())

    def config(index: int) -> dict:
        return {"application.id": unique_name, "bootstrap.servers": bootstrap, "commit.interval.ms": 300,
                "state.dir": str(tmp_path / f"state-{index}"), "num.stream.threads": 2, "num.standby.replicas": 1}

    def standbys(app: KafkaStreams) -> set[str]:
        return {task for thread in app._threads for task in thread.tasks.standby}

    first = KafkaStreams(topology(source, sink), config(0))
    first.start()
    second = None
    try:
        wait_for(lambda: committed_offsets(bootstrap, unique_name, source, PARTITIONS) == ends, 90, "all input")
        assert first.exception is None and standbys(first) == set()  # every task is active on this instance
        second = KafkaStreams(topology(source, sink), config(1))
        second.start()
        wait_for(lambda: first.metrics()["tasks"] and second.metrics()["tasks"]
                 and len(first.metrics()["tasks"]) + len(second.metrics()["tasks"]) == PARTITIONS
                 and standbys(first) == set(second.metrics()["tasks"])
                 and standbys(second) == set(first.metrics()["tasks"]), 90,
                 "the tasks to be shared out, each instance keeping standbys of the other's")
        more = [GeneratedRecord(f"key-{i % 40:02d}", f"v{i}", 1_700_000_100_000 + i) for i in range(2_000)]
        ends = produce(bootstrap, source, more, Serdes.String(), Serdes.String())
        wait_for(lambda: committed_offsets(bootstrap, unique_name, source, PARTITIONS) == ends, 90, "the new input")
        assert first.exception is None and second.exception is None
    finally:
        assert first.close(30)
        if second is not None:
            assert second.close(30)
    assert first.exception is None and (second is None or second.exception is None)
    counts = {r.key: r.value["count"] for r in sorted(read_topic(bootstrap, sink, Serdes.String(), Serdes.Json(),
                                                                  PARTITIONS), key=lambda r: r.offset)}
    assert counts == Counter(r.key for r in records + more)
