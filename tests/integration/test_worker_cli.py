"""``brook worker run``: a worker process that processes, and stops cleanly on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import msgspec
import pytest

from apps.orders import (
    ITEMS_TOPIC,
    LINES_TOPIC,
    ORDERS_TOPIC,
    OUTPUT_TOPICS,
    USERS_TOPIC,
)
from apps.orders.records import Order
from apps.orders.validation import rejection_reason
from streaming.admin import create_topics
from streaming.serdes import Serdes
from streaming.testing import generators
from streaming.testing.kafka import committed_offsets, produce, read_topic, wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def worker(bootstrap: str, app_id: str, log: Path, *extra: str,
           env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "streaming.cli.main", "worker", "run", "apps.orders:topology",
         "--config", str(ROOT / "apps/orders/config.yaml"), "--set", f"bootstrap.servers={bootstrap}",
         "--set", f"application.id={app_id}", *extra],
        cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_worker_processes_then_stops_cleanly_on_sigterm(bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    create_topics(bootstrap, {topic: 4 for topic in (ORDERS_TOPIC, USERS_TOPIC, ITEMS_TOPIC, *OUTPUT_TOPICS)})
    before = {p: 0 for p in range(4)}
    existing = read_topic(bootstrap, ORDERS_TOPIC, Serdes.String(), Serdes.Json(), 4)
    for record in existing:  # the topic may hold another test's orders: count only ours
        before[record.partition] = max(before[record.partition], record.offset + 1)
    orders = generators.orders(2_000, seed=7, invalid=0.05)
    ends = produce(bootstrap, ORDERS_TOPIC, orders, Serdes.String(), Serdes.Json())
    process = worker(bootstrap, unique_name, tmp_path / "worker.log")
    try:
        deadline = time.monotonic() + 60
        while committed_offsets(bootstrap, unique_name, ORDERS_TOPIC, 4) != {p: ends.get(p, before[p]) for p in before}:
            assert process.poll() is None, (tmp_path / "worker.log").read_text()
            assert time.monotonic() < deadline, "worker did not commit all input in 60 s"
            time.sleep(0.3)
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0, (tmp_path / "worker.log").read_text()
    finally:
        if process.poll() is None:
            process.kill()
    log = (tmp_path / "worker.log").read_text()
    assert "received SIGTERM, closing" in log and "worker stopped" in log
    ours = {o.value["order_id"] for o in orders if rejection_reason(o.key, msgspec.convert(o.value, Order)) is None}
    lines = [r for r in read_topic(bootstrap, LINES_TOPIC, Serdes.String(), Serdes.Json(), 4)
             if r.value["order_id"] in ours]
    assert len(lines) == sum(len(o.value["items"]) for o in orders if o.value["order_id"] in ours)


def test_worker_rejects_an_unknown_config_key_before_starting(bootstrap: str, unique_name: str,
                                                            tmp_path: Path) -> None:
    process = worker(bootstrap, unique_name, tmp_path / "worker.log", "--set", "commit.intervall.ms=5")
    assert process.wait(60) == 2
    assert "unknown config key 'commit.intervall.ms'" in (tmp_path / "worker.log").read_text()


def test_worker_logs_json_lines_without_secrets_and_serves_metrics(bootstrap: str, unique_name: str,
                                                                   tmp_path: Path) -> None:
    create_topics(bootstrap, {topic: 4 for topic in (ORDERS_TOPIC, USERS_TOPIC, ITEMS_TOPIC, *OUTPUT_TOPICS)})
    metrics_port, query_port = free_port(), free_port()
    token = "s3cret-query-token-7731"
    log_path = tmp_path / "worker.log"
    process = worker(bootstrap, unique_name, log_path, "--log-format", "json", "--metrics-port", str(metrics_port),
                     "--set", f"application.server=127.0.0.1:{query_port}",
                     "--set", "application.server.token=${env:QUERY_TOKEN}", env={"QUERY_TOKEN": token})
    try:
        def running() -> bool:
            assert process.poll() is None, log_path.read_text()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2) as response:
                    text = response.read().decode()
            except OSError:
                return False
            return f'brook_state{{application_id="{unique_name}",state="RUNNING"}} 1.0' in text
        wait_for(running, 60, "the worker's /metrics to report RUNNING")
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0, log_path.read_text()
    finally:
        if process.poll() is None:
            process.kill()
    text = log_path.read_text()
    assert token not in text
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]  # every line is one JSON object
    assert {"time", "level", "logger", "message", "thread"} <= lines[0].keys()
    assert any(line["message"].startswith(f"worker {unique_name} started") for line in lines)
    assert any(line.get("application_id") == unique_name and line["message"].startswith("worker stopped")
               for line in lines)
    assert any(line["logger"].startswith("streaming.metrics") for line in lines)
