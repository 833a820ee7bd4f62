"""The whole orders pipeline on the embedded broker: two ``brook worker run`` processes, one killed with
SIGKILL mid-run and started again, over generated orders with duplicates, invalid, out-of-order and late
records; every output checked against the independent oracle (``apps.orders.oracle``).

The test runs its own broker: the pipeline's topic names are fixed, and other tests use them too.
At-least-once processing replays what the killed worker had not committed, so some results may be
emitted twice; the checks say what a replay may and may not change.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from apps.orders import oracle
from apps.orders.pipeline import (
    APPLICATION_ID,
    GRACE,
    HOURLY_TOPIC,
    ITEMS_TOPIC,
    LATE_LINES_TOPIC,
    LINES_TOPIC,
    ORDERS_TOPIC,
    OUTPUT_TOPICS,
    REJECTED_TOPIC,
    USERS_TOPIC,
    WINDOW,
)
from apps.orders.profiles import DATABASE_URL_VARIABLE, stored_profiles
from apps.orders.protection import LINE_FIELDS, REJECTED_FIELDS, load_encryption
from streaming.admin import create_topics
from streaming.broker import EmbeddedBroker
from streaming.encryption import is_encrypted
from streaming.serdes import Serdes
from streaming.testing import generators
from streaming.testing.kafka import group_lag, produce, produce_paced, read_topic, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 4
WINDOW_MS, GRACE_MS = int(WINDOW.total_seconds() * 1000), int(GRACE.total_seconds() * 1000)
String, Json = Serdes.String(), Serdes.Json()
KILL_AT_BATCH = 30  # of 50 orders each
REPARTITIONED = ("lines-by-item-left", "lines-by-region")  # the repartition topics: by item, by region


@pytest.fixture
def bootstrap_of_own_broker(tmp_path: Path) -> Iterator[str]:
    with EmbeddedBroker(workdir=tmp_path / "broker") as broker:
        yield broker.bootstrap_servers


def worker(bootstrap: str, index: int, tmp_path: Path) -> subprocess.Popen[bytes]:
    log = (tmp_path / f"worker-{index}.log").open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "streaming.cli.main", "worker", "run", "apps.orders:topology",
         "--config", str(ROOT / "apps/orders/config.yaml"), "--set", f"bootstrap.servers={bootstrap}",
         "--set", f"state.dir={tmp_path / f'state-{index}'}", "--set", "commit.interval.ms=200"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT), DATABASE_URL_VARIABLE: database_url(tmp_path)})


def database_url(tmp_path: Path) -> str:
    """The profile service's database of the test: a SQLite file both workers write."""
    return f"sqlite:///{tmp_path / 'profiles.db'}"


def test_two_workers_one_killed_mid_run_give_the_oracles_hourly_buyers(bootstrap_of_own_broker: str,
                                                                       tmp_path: Path) -> None:
    bootstrap = bootstrap_of_own_broker
    create_topics(bootstrap, {topic: PARTITIONS for topic in (ORDERS_TOPIC, USERS_TOPIC, ITEMS_TOPIC, *OUTPUT_TOPICS)})
    catalog_from = generators.ORDERS_START_MS - 24 * WINDOW_MS  # users and items exist before the orders
    users, items = generators.users(60, seed=5, start_ms=catalog_from), generators.items(40, seed=5, start_ms=catalog_from)
    orders = generators.orders(4000, seed=5, users=60, items=40, catalog_seed=5, step_ms=10_000,
                               out_of_order=0.1, max_disorder_ms=5 * 60_000, late=0.02, lateness_ms=2 * WINDOW_MS,
                               duplicates=0.05, invalid=0.05)
    # Late orders anywhere, also right around the kill: the restarted worker's tasks go on from the stream
    # time they committed (streaming.runtime.stream_time), so a late line arriving first is still dropped.
    late_near_kill = [index for index, order in enumerate(orders)
                      if order.late and abs(index // 50 - KILL_AT_BATCH) <= 3]
    assert late_near_kill, "the generated orders have late ones within 3 batches of the kill"
    produce(bootstrap, USERS_TOPIC, users, String, Json)
    produce(bootstrap, ITEMS_TOPIC, items, String, Json)

    workers = [worker(bootstrap, i, tmp_path) for i in range(2)]
    killed = []

    def kill_and_restart(batch: int) -> None:
        for index, process in enumerate(workers):
            assert process.poll() is None, (tmp_path / f"worker-{index}.log").read_text()[-3000:]
        if batch == KILL_AT_BATCH:
            workers[1].send_signal(signal.SIGKILL)
            killed.append(workers[1].wait(10))
            workers[1] = worker(bootstrap, 1, tmp_path)

    try:
        # 50 orders (~8 min of event time) a batch: the workers stay minutes, not hours, apart in event time
        produce_paced(bootstrap, ORDERS_TOPIC, orders, String, Json, APPLICATION_ID, PARTITIONS, batch_size=50,
                      timeout=180, on_batch=kill_and_restart)
        inputs = [ORDERS_TOPIC] + [f"{APPLICATION_ID}-{name}-repartition" for name in REPARTITIONED]
        wait_for(lambda: all(group_lag(bootstrap, APPLICATION_ID, topic, PARTITIONS) == 0 for topic in inputs),
                 120, "the workers to commit every order and every repartitioned line")
        outputs = {}
        for topic in (HOURLY_TOPIC, LATE_LINES_TOPIC, LINES_TOPIC, REJECTED_TOPIC):
            outputs[topic] = read_topic(bootstrap, topic, String, Json, PARTITIONS)
        for process in workers:
            process.send_signal(signal.SIGTERM)
        assert [process.wait(60) for process in workers] == [0, 0]
    finally:
        for process in workers:
            if process.poll() is None:
                process.kill()
    assert killed == [-signal.SIGKILL]

    on_time, late_lines = oracle.split_by_lateness(orders, users, items)
    buyers, lines = oracle.hourly_buyers(on_time, WINDOW_MS), oracle.hourly_lines(on_time, WINDOW_MS)

    finals = [record.value for record in outputs[HOURLY_TOPIC]]
    emitted = {(final["region"], final["window_start"]) for final in finals}
    for final in finals:  # a replayed final is emitted again: every copy must be right
        window = (final["region"], final["window_start"])
        assert final["users"] == len(buyers[window]), f"distinct buyers of {window}"
        assert final["lines"] >= lines[window], f"lines of {window} (replays may count a line twice)"
    last = max(order.timestamp for order in orders)
    closed = {window for window in buyers if window[1] + WINDOW_MS + GRACE_MS <= last - WINDOW_MS}
    assert len(closed) > 20 and closed <= emitted <= set(buyers)

    assert {(r.value["order_id"], r.value["item"]) for r in outputs[LATE_LINES_TOPIC]} == \
        {(line.order_id, line.item) for line in late_lines}
    first_copies = [order for order in orders if not order.duplicate]
    assert {(r.value["order_id"], r.value["item"]) for r in outputs[LINES_TOPIC]} == \
        {(o.value["order_id"], line["item"]) for o in first_copies if o.defect is None for line in o.value["items"]}
    # Every profile counted each of its user's orders once, although the killed worker's input was processed again.
    assert stored_profiles(database_url(tmp_path)) == oracle.profiles(orders, items)
    rejected = outputs[REJECTED_TOPIC]
    assert {r.value["order"]["order_id"] for r in rejected} == \
        {o.value["order_id"] for o in first_copies if o.defect is not None}
    assert all(r.value["reason"] and set(r.value["order"]["card_masked"][:-4]) == {"*"} for r in rejected)
    # Encrypted in what the workers wrote, and readable with the key (a replay re-encrypts: compared in clear).
    encryption, sent = load_encryption(), {o.value["order_id"]: o.value for o in first_copies}
    for record in rejected:
        assert all(is_encrypted(record.value["order"][f]) for f in ("card_number", "address", "phone"))
        clear = encryption.decrypt_fields(record.value, REJECTED_FIELDS)["order"]
        assert clear["card_number"] == sent[clear["order_id"]]["card_number"]
    for record in outputs[LINES_TOPIC]:
        clear = encryption.decrypt_fields(record.value, LINE_FIELDS)
        assert (clear["address"], clear["phone"]) == (sent[clear["order_id"]]["address"], sent[clear["order_id"]]["phone"])

