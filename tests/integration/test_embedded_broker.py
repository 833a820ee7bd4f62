"""The embedded broker, the topic helpers and ``brook broker start/status/stop``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from streaming.admin import TopicError, create_topics, delete_topics, partition_counts
from streaming.broker import EMBEDDED_CLIENT_DEFAULTS, BrokerError, EmbeddedBroker

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _pid_gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (a zombie awaiting its reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def test_broker_fixture_answers_metadata(broker: EmbeddedBroker) -> None:
    metadata = AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=10)
    assert broker.bootstrap_servers.startswith("127.0.0.1:")
    assert [b.port for b in metadata.brokers.values()] == [broker.port]
    assert broker.is_running() and broker.ping()
    state = EmbeddedBroker.read_state(broker.workdir)
    assert state is not None and (state.pid, state.port) == (broker.pid, broker.port)


def test_produce_and_consume_with_the_embedded_client_defaults(bootstrap: str, unique_name: str) -> None:
    topic = f"{unique_name}-rt"
    create_topics(bootstrap, {topic: 2})
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    sent = {f"k{i}": f"v{i}" for i in range(20)}
    for key, value in sent.items():
        producer.produce(topic, key=key, value=value)
    assert producer.flush(10) == 0

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": unique_name, "auto.offset.reset": "earliest",
         **EMBEDDED_CLIENT_DEFAULTS}
    )
    consumer.subscribe([topic])
    received: dict[str, str] = {}
    deadline = time.monotonic() + 30
    try:
        while len(received) < len(sent) and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                received[message.key().decode()] = message.value().decode()
    finally:
        consumer.close()
    assert received == sent


def test_create_topics_is_idempotent(bootstrap: str, unique_name: str) -> None:
    topics = {f"{unique_name}-a": 3, f"{unique_name}-b": 1}
    create_topics(bootstrap, topics, configs={f"{unique_name}-a": {"cleanup.policy": "compact"}})
    create_topics(bootstrap, topics)  # same counts: nothing to do, no error
    missing = f"{unique_name}-missing"
    assert partition_counts(bootstrap, [*topics, missing]) == {**topics, missing: None}


def test_a_wrong_partition_count_raises_naming_the_topic(bootstrap: str, unique_name: str) -> None:
    topic, other = f"{unique_name}-p", f"{unique_name}-other"
    create_topics(bootstrap, {topic: 2})
    with pytest.raises(TopicError, match=rf"topic '{topic}' has 2 partitions, expected 4"):
        create_topics(bootstrap, {topic: 4, other: 1})
    assert partition_counts(bootstrap, [other]) == {other: None}  # nothing created on a mismatch


def test_delete_topics_waits_until_gone(bootstrap: str, unique_name: str) -> None:
    topic = f"{unique_name}-d"
    create_topics(bootstrap, {topic: 1})
    delete_topics(bootstrap, [topic, f"{unique_name}-never-existed"])
    assert partition_counts(bootstrap, [topic]) == {topic: None}
    with pytest.raises(TopicError, match="do not exist"):
        delete_topics(bootstrap, [topic], missing_ok=False)


def test_a_second_broker_in_the_same_workdir_is_refused(tmp_path: Path) -> None:
    with EmbeddedBroker(workdir=tmp_path) as first:
        with pytest.raises(BrokerError, match="already running"):
            EmbeddedBroker(workdir=tmp_path).start()
        adopted = EmbeddedBroker.from_state(tmp_path)
        assert adopted is not None and adopted.is_running()
        assert adopted.bootstrap_servers == first.bootstrap_servers
        pid = first.pid
        assert pid is not None
    assert _pid_gone(pid)
    assert not first.state_path.exists() and not first.pid_path.exists()
    assert first.log_path.exists()


def test_a_taken_port_is_refused_before_starting(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        with pytest.raises(BrokerError, match=f"127.0.0.1:{port} is already in use"):
            EmbeddedBroker(port=port, workdir=tmp_path).start()


def _brook(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("brook")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "streaming.cli.main"]
    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": python_path}
    return subprocess.run([*command, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def test_cli_broker_start_status_stop(tmp_path: Path) -> None:
    workdir = str(tmp_path / "broker")
    try:
        started = _brook("broker", "start", "--workdir", workdir)
        assert started.returncode == 0, started.stderr
        bootstrap = started.stdout.strip()
        assert bootstrap.startswith("127.0.0.1:"), started.stdout

        # It outlives the CLI process and answers metadata.
        AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
        state = EmbeddedBroker.read_state(workdir)
        assert state is not None and state.bootstrap_servers == bootstrap
        assert Path(state.log).is_file()

        status = _brook("broker", "status", "--workdir", workdir)
        assert status.returncode == 0, status.stderr
        assert f"running at {bootstrap}" in status.stdout and "answering metadata" in status.stdout

        again = _brook("broker", "start", "--workdir", workdir)  # idempotent: reports the running one
        assert again.returncode == 0 and again.stdout.strip() == bootstrap
        assert "already running" in again.stderr

        stopped = _brook("broker", "stop", "--workdir", workdir)
        assert stopped.returncode == 0, stopped.stderr
        assert _pid_gone(state.pid)

        after = _brook("broker", "status", "--workdir", workdir)
        assert after.returncode == 1 and "not running" in after.stdout
    finally:
        _brook("broker", "stop", "--workdir", workdir)
