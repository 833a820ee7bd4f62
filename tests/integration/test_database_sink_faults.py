"""The database sink survives a SIGKILL of the worker and a restart of the database in the middle of a run.

A ``brook worker run`` of the profile app (tests/integration/workloads/profiles.py: per user, orders counted and
summed with a version counter in the KTable's value, upserted into ``user_profiles``) takes orders in batches;
after a third of them the worker is SIGKILLed mid-run and started again at once (it restores its store from the
changelog and re-reads the input from the last committed offsets, so the database gets replayed, older rows), and
after two thirds the database server is stopped for a few seconds and started again (the worker pauses its input
and retries). Afterwards every row in the database equals the oracle computed from the generated orders: no lost
update (every flush before the commit of its offsets) and no stale value (a replayed row never overwrites a newer
one). Run on MariaDB and PostgreSQL (both the worker kill and the database restart) and on a SQLite file (the
worker kill; an embedded database has no server to restart).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Table, create_engine, select

from streaming.admin import create_topics
from streaming.testing.kafka import committed_offsets, wait_for
from tests.integration.test_database_sink_on_broker import send
from tests.integration.workloads.profiles import oracle, profile_table

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 2
USERS, PER_USER, BATCHES = 40, 30, 10  # 1,200 orders
KILL_AFTER, DB_RESTART_AFTER = 3, 6  # batches


def stored(url: str, table: Table) -> dict[str, dict[str, Any]]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(select(table)).mappings().all()
    except Exception:  # noqa: BLE001 - no table yet, or the database is down: nothing to compare
        return {}
    finally:
        engine.dispose()
    return {row["user_id"]: {k: v for k, v in row.items() if k not in ("user_id", "reset_epoch")} for row in rows}


class Worker:
    """One ``brook worker run`` of the profile app: start, SIGKILL, stop with SIGTERM."""

    def __init__(self, bootstrap: str, app_id: str, source: str, url: str, directory: Path) -> None:
        self.args = [sys.executable, "-m", "streaming.cli.main", "worker", "run",
                     "tests.integration.workloads.profiles:topology", "--set", f"bootstrap.servers={bootstrap}",
                     "--set", f"application.id={app_id}", "--set", f"state.dir={directory / 'state'}",
                     "--set", "commit.interval.ms=300", "--set", "consumer.session.timeout.ms=2000",
                     "--set", "consumer.heartbeat.interval.ms=250"]
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "PROFILE_INPUT": source, "PROFILE_DB_URL": url}
        self.log = directory / "worker.log"
        self.process = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        with self.log.open("ab") as log:
            return subprocess.Popen(self.args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=self.env)

    def kill_and_restart(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        assert self.process.wait(10) == -signal.SIGKILL
        self.process = self._start()

    def assert_alive(self) -> None:
        assert self.process.poll() is None, f"the worker exited by itself:\n{self.log.read_text()[-4000:]}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


@pytest.mark.parametrize("database_url", ["mariadb", "postgres", "sqlite"], indirect=True)
def test_profiles_equal_the_oracle_after_a_worker_kill_and_a_database_restart(
        bootstrap: str, unique_name: str, database_url: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    server = None if database_url.startswith("sqlite") else \
        request.getfixturevalue("mariadb" if database_url.startswith("mysql") else "postgres")
    source = f"{unique_name}-orders"
    create_topics(bootstrap, {source: PARTITIONS})
    rng = random.Random(2026)
    orders = [(f"u{u}", {"seq": n, "cents": rng.randrange(1, 10_000)}) for n in range(1, PER_USER + 1)
              for u in range(USERS)]
    batches = [orders[i::BATCHES] for i in range(BATCHES)]  # each keeps every user's orders in seq order
    batches = [sorted(batch, key=lambda order: (order[1]["seq"], order[0])) for batch in batches]
    worker = Worker(bootstrap, unique_name, source, database_url, tmp_path)
    sent: list[tuple[str, dict[str, int]]] = []
    try:
        for number, batch in enumerate(batches, 1):
            outage = number == DB_RESTART_AFTER and server is not None
            if outage:
                server.stop_server()
            send(bootstrap, source, batch)
            sent += batch
            if number == KILL_AFTER:  # while it processes the batch, before it commits all of it
                time.sleep(rng.uniform(0.05, 0.3))
                worker.kill_and_restart()
            time.sleep(0.7)  # the worker processes part of it, commits part of it
            if outage:  # its flushes fail meanwhile (input paused, offsets held back): waited for, not timed, as a
                # worker restarted just before can take over 4 s to rejoin on a loaded machine
                wait_for(lambda: "an external sink (database) cannot write" in worker.log.read_text(), 60,
                         "the worker to notice the database outage")
                server.start_server()
            worker.assert_alive()
        assert sorted(sent, key=str) == sorted(orders, key=str)
        expected = oracle(sorted(orders, key=lambda order: order[1]["seq"]))
        wait_for(lambda: stored(database_url, profile_table()) == expected, 120, "the oracle's profiles in the database")
        end = len(orders)
        wait_for(lambda: sum(committed_offsets(bootstrap, unique_name, source, PARTITIONS).values()) == end, 60,
                 "every offset committed")
        worker.assert_alive()
    finally:
        worker.stop()
