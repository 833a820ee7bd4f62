"""The data commands of the ``brook`` CLI against the embedded broker: topics, produce, consume, status."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from streaming import KafkaStreams, Serdes
from streaming.runtime.kafka_streams import State
from streaming.testing.kafka import read_topic, wait_for
from tests.integration.workloads.counting import topology

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def brook(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "streaming.cli.main", *args], cwd=ROOT, input=stdin,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result


def test_topics_produce_and_consume(bootstrap: str, unique_name: str) -> None:
    topic = f"{unique_name}-t"
    assert "ready with 3 partitions" in brook("topics", "create", topic, "-p", "3", "-b", bootstrap).stdout
    listed = brook("topics", "list", "-b", bootstrap).stdout
    assert any(line.split() == [topic, "3"] for line in listed.splitlines())
    brook("produce", topic, "-b", bootstrap, stdin='u1\t{"n": 1}\nu2\t{"n": 2}\n{"no": "key"}\n')
    records = [{"key": "u1", "value": {"n": 3}, "timestamp": 1_700_000_000_000, "headers": {"trace": "t-1"}}]
    brook("produce", topic, "-b", bootstrap, "--format", "json", stdin="\n".join(json.dumps(r) for r in records))
    stored = read_topic(bootstrap, topic, Serdes.String(), Serdes.Json(), 3)
    assert sorted((r.key or "", json.dumps(r.value)) for r in stored) == [
        ("", '{"no": "key"}'), ("u1", '{"n": 1}'), ("u1", '{"n": 3}'), ("u2", '{"n": 2}')]
    assert len({r.partition for r in stored if r.key == "u1"}) == 1  # the Java partitioner: one key, one partition
    assert [r for r in stored if r.value == {"n": 3}][0].headers == [("trace", b"t-1")]

    shown = brook("consume", topic, "-b", bootstrap, "--from-beginning", "--format", "json").stdout.splitlines()
    assert sorted(json.loads(line)["value"]["n"] for line in shown if "n" in json.loads(line)["value"]) == [1, 2, 3]
    assert len(brook("consume", topic, "-b", bootstrap, "--from-beginning", "--max", "2").stdout.splitlines()) == 2
    assert brook("consume", topic, "-b", bootstrap).stdout == ""  # from the end, not following: nothing new
    described = brook("topics", "describe", topic, "-b", bootstrap).stdout
    assert f"topic {topic}: 3 partitions, 4 records" in described


def test_status_shows_instances_tasks_owners_and_lag(bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    brook("topics", "create", source, "-p", "2", "-b", bootstrap)
    brook("topics", "create", sink, "-p", "2", "-b", bootstrap)
    brook("produce", source, "-b", bootstrap, "--value-serde", "String", stdin="a\tx\nb\ty\nc\tz\n")
    app = KafkaStreams(topology(source, sink), {"application.id": unique_name, "bootstrap.servers": bootstrap,
                                                "commit.interval.ms": 100, "state.dir": str(tmp_path),
                                                "application.server": "127.0.0.1:7391"})
    app.start()
    try:
        wait_for(lambda: app.state is State.RUNNING and len(read_topic(bootstrap, sink, Serdes.String(),
                                                                       Serdes.Json(), 2)) == 3, 60, "outputs")
        wait_for(lambda: "total lag: 0 records" in brook("status", unique_name, "-b", bootstrap).stdout, 30,
                 "the lag to reach 0")
        shown = brook("status", unique_name, "-b", bootstrap).stdout
    finally:
        assert app.close(30)
    assert f"127.0.0.1:7391 (host {socket.gethostname()}, pid {os.getpid()})  RUNNING" in shown
    assert "active tasks 0_0, 0_1" in shown and "last seen" in shown
    assert f"{source}[0]" in shown and f"{source}[1]" in shown
    assert shown.count("127.0.0.1:7391") >= 3  # the instance line and the owner of both partitions
