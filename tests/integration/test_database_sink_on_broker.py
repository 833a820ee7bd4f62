"""The database sink in a running app on the embedded broker: profiles in the database equal the oracle and the
offsets are committed (SQLite file, MariaDB, PostgreSQL); a database that goes down pauses the input, holds back
the offsets (under exactly_once_v2 the whole transaction) and keeps the thread in its group, then the app
completes when it is back; a row the database
rejects goes to the dead-letter topic with the database's reason while the others are written."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import create_engine, event, select

from streaming import KafkaStreams, Serdes
from streaming.admin import create_topics
from streaming.naming import dead_letter_topic
from streaming.runtime.dead_letters import error_headers
from streaming.runtime.kafka_streams import State
from streaming.sinks import DatabaseSink
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import committed_offsets, produce, read_topic, wait_for
from tests.integration.workloads.profiles import oracle, profile_row, profile_table, profiles_topology

pytestmark = pytest.mark.integration
PARTITIONS = 2
SESSION = {"consumer.session.timeout.ms": 6000, "consumer.heartbeat.interval.ms": 500}


def orders_of(users: int, per_user: int, first: int = 1) -> list[tuple[str, dict[str, int]]]:
    return [(f"u{u}", {"seq": n, "cents": 7 * u + n}) for n in range(first, first + per_user) for u in range(users)]


def send(bootstrap: str, topic: str, orders: list[tuple[str, dict[str, int]]]) -> dict[int, int]:
    now = int(time.time() * 1000)
    return produce(bootstrap, topic, [GeneratedRecord(user, order, now) for user, order in orders], Serdes.String(),
                   Serdes.Json())


def stored(sink: DatabaseSink) -> dict[str, dict[str, Any]]:
    engine = create_engine(sink.engine.url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(select(sink.table)).mappings().all()
    except Exception:  # noqa: BLE001 - the table may not exist yet, or the database be down: nothing stored
        return {}
    finally:
        engine.dispose()
    return {row["user_id"]: {k: v for k, v in row.items() if k not in ("user_id", "reset_epoch")} for row in rows}


def committed(bootstrap: str, app_id: str, topic: str) -> int:
    return sum(committed_offsets(bootstrap, app_id, topic, PARTITIONS).values())


def start(bootstrap: str, app_id: str, source: str, sink: DatabaseSink, **extra: Any) -> KafkaStreams:
    app = KafkaStreams(profiles_topology(source, sink), {
        "application.id": app_id, "bootstrap.servers": bootstrap, "commit.interval.ms": 300, **SESSION, **extra})
    app.start()
    return app


@pytest.mark.parametrize("database_url", ["sqlite", "mariadb", "postgres"], indirect=True)
def test_profiles_in_the_database_equal_the_oracle_and_offsets_follow(bootstrap: str, unique_name: str,
                                                                       database_url: str) -> None:
    source = f"{unique_name}-orders"
    create_topics(bootstrap, {source: PARTITIONS})
    orders = orders_of(users=20, per_user=15)
    sink = DatabaseSink(database_url, profile_table(), profile_row, create_table=True)
    app = start(bootstrap, unique_name, source, sink)
    try:
        # Statements that completed: a flush SQLite refused while this test's reads held the file ("database is
        # locked") is retried, and only its attempt that wrote counts. The table is made first, so that its DDL (on
        # SQLite, PRAGMA table_info and CREATE TABLE) is not counted as flushes.
        sink.ensure_table()
        completed = [0]
        event.listen(sink.engine, "after_cursor_execute", lambda *_: completed.__setitem__(0, completed[0] + 1))
        ends = send(bootstrap, source, orders)
        wait_for(lambda: stored(sink) == oracle(orders) or app.state is State.ERROR, 60, "the oracle's profiles")
        assert app.state is not State.ERROR, app.exception
        wait_for(lambda: committed(bootstrap, unique_name, source) == sum(ends.values()), 30, "offsets at the end")
        trips, commits = completed[0], app.metrics()["commits"]
        # At most one upsert per task and commit (each flush is one executemany), however many orders; a commit may
        # have flushed when its count is read, before it counts itself.
        assert trips <= PARTITIONS * (commits + 1)
    finally:
        app.close(30)
        sink.dispose()


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_database_outage_pauses_the_input_then_the_app_completes(bootstrap: str, unique_name: str,
                                                                 database_url: str, postgres: Any,
                                                                 guarantee: str) -> None:
    source = f"{unique_name}-orders"
    create_topics(bootstrap, {source: PARTITIONS})
    before, during = orders_of(users=10, per_user=5), orders_of(users=10, per_user=5, first=6)
    sink = DatabaseSink(database_url, profile_table(), profile_row, create_table=True, retry_backoff_ms=100,
                        retry_backoff_max_ms=1000)
    app = start(bootstrap, unique_name, source, sink, **{"processing.guarantee": guarantee})
    try:
        first_ends = sum(send(bootstrap, source, before).values())
        wait_for(lambda: stored(sink) == oracle(before), 60, "the first orders in the database")
        wait_for(lambda: committed(bootstrap, unique_name, source) == first_ends, 30, "the first offsets")
        rebalances = app.metrics()["rebalances"]
        postgres.stop_server()
        try:
            ends = sum(send(bootstrap, source, during).values())
            wait_for(lambda: app.metrics()["sink_paused_partitions"] > 0 or app.state is State.ERROR, 30,
                     "the input paused")
            # Longer than the session timeout, many commit intervals and retries with the database down: the thread
            # polls on, so it stays in its group (no rebalance) and does not fail.
            time.sleep(SESSION["consumer.session.timeout.ms"] / 1000 + 2)
            assert app.state is State.RUNNING, app.exception
            assert app.metrics()["rebalances"] == rebalances
            assert committed(bootstrap, unique_name, source) < ends  # offsets wait for the database
        finally:
            postgres.start_server()
        wait_for(lambda: stored(sink) == oracle(before + during), 60, "every profile after the outage")
        wait_for(lambda: committed(bootstrap, unique_name, source) == ends, 30, "offsets at the end")
        metrics = app.metrics()
        assert metrics["sink_pauses"] >= 1 and metrics["sink_paused_partitions"] == 0
        assert app.state is State.RUNNING
    finally:
        app.close(30)
        sink.dispose()


@pytest.mark.parametrize("database_url", ["mariadb"], indirect=True)
def test_a_rejected_row_goes_to_the_dead_letter_topic_with_the_reason(bootstrap: str, unique_name: str,
                                                                     database_url: str) -> None:
    source = f"{unique_name}-orders"
    create_topics(bootstrap, {source: PARTITIONS})
    good = orders_of(users=8, per_user=3)
    sink = DatabaseSink(database_url, profile_table(), profile_row, create_table=True)
    app = start(bootstrap, unique_name, source, sink, **{"production.exception.handler": "dead_letter"})
    try:
        ends = send(bootstrap, source, [("bad", {"seq": 1, "cents": -1}), *good])
        wait_for(lambda: stored(sink) == oracle(good) or app.state is State.ERROR, 60, "the good profiles")
        assert app.state is not State.ERROR, app.exception
        wait_for(lambda: committed(bootstrap, unique_name, source) == sum(ends.values()), 30, "offsets at the end")
        [letter] = read_topic(bootstrap, dead_letter_topic(unique_name), Serdes.Json(), Serdes.Json(), 1)
        headers = error_headers(letter.headers)
        assert headers["stage"] == "production" and headers["output.topic"] == "database:user_profiles"
        assert headers["source.topic"] == source
        assert headers["type"].endswith(("OperationalError", "IntegrityError"))
        assert "CONSTRAINT" in headers["message"] and "user_profiles_total_not_negative" in headers["message"]
        assert letter.key == {"user_id": "bad"} and letter.value["total_cents"] == -1
    finally:
        app.close(30)
        sink.dispose()
