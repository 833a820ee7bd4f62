"""streaming.sinks.DatabaseSink on real databases (a SQLite file, and throwaway MariaDB and PostgreSQL servers):
rows equal to the table, only newer (epoch, version) rows written, one round trip per flush, rejected rows to the
dead-letter topic, an unreachable database retried with backoff, and start-up errors naming what is wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import BigInteger, Column, Integer, MetaData, String, Table, Text, create_engine, event, select
from sqlalchemy.types import TypeDecorator

from streaming import ConfigError, Serdes
from streaming.naming import dead_letter_topic
from streaming.runtime.dead_letters import error_headers
from streaming.sinks import DatabaseSink
from streaming.sinks.database import TaskDatabaseWriter
from streaming.testing import TopologyTestDriver
from tests.integration.workloads.profiles import oracle, profile_row, profile_table, profiles_topology

BACKENDS = ["sqlite", "mariadb", "postgres"]
APP = "profiles-app"


def stored(url: str, table: Table) -> dict[str, dict[str, Any]]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(select(table)).mappings().all()
    finally:
        engine.dispose()
    return {row["user_id"]: {k: v for k, v in row.items() if k != "user_id"} for row in rows}


def expected(orders: list[tuple[str, dict[str, int]]], epoch: int = 0) -> dict[str, dict[str, Any]]:
    return {user: {**profile, "reset_epoch": epoch} for user, profile in oracle(orders).items()}


def orders_of(users: int, per_user: int) -> list[tuple[str, dict[str, int]]]:
    return [(f"u{u}", {"seq": n, "cents": 100 * u + n}) for n in range(1, per_user + 1) for u in range(users)]


def writer(sink: DatabaseSink, epoch: int = 0) -> tuple[TaskDatabaseWriter, list[tuple[Any, ...]]]:
    rejected: list[tuple[Any, ...]] = []
    return TaskDatabaseWriter(sink, epoch, lambda *args: rejected.append(args)), rejected


def row(user: str, version: int, orders: int | None = None) -> dict[str, Any]:
    n = version if orders is None else orders
    return {"user_id": user, "orders": n, "total_cents": 10 * n, "last_seq": n, "version": version}


def put(task: TaskDatabaseWriter, written: dict[str, Any]) -> None:
    """Buffer a row as the sink's node does: with the writer's epoch."""
    task.add({**written, "reset_epoch": task.epoch}, None)


def as_stored(written: dict[str, Any], epoch: int) -> dict[str, Any]:
    """What ``stored`` shows of a row the sink wrote at ``epoch``."""
    return {**{k: v for k, v in written.items() if k != "user_id"}, "reset_epoch": epoch}


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
def test_profiles_through_the_test_driver_equal_the_oracle(database_url: str) -> None:
    sink = DatabaseSink(database_url, profile_table(), profile_row, create_table=True)
    orders = orders_of(users=5, per_user=4)
    try:
        with TopologyTestDriver(profiles_topology("orders", sink), {"application.id": APP}) as driver:
            source = driver.create_input_topic("orders", Serdes.String(), Serdes.Json())
            for user, order in orders:
                source.pipe_input(user, order)
            source.pipe_input("u0", orders[0][1])  # a replayed order changes nothing
        assert stored(database_url, sink.table) == expected(orders)
    finally:
        sink.dispose()


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
def test_only_a_newer_epoch_and_version_overwrites_a_row(database_url: str) -> None:
    sink = DatabaseSink(database_url, profile_table(), profile_row, create_table=True)
    try:
        at_epoch_0, _ = writer(sink, epoch=0)
        for version in (5, 3):  # two flushes: the replayed, older row does not win
            put(at_epoch_0, row("a", version))
            put(at_epoch_0, row("b", version))
            assert at_epoch_0.flush()
        put(at_epoch_0, row("a", 5, orders=99))  # an equal version is not newer
        assert at_epoch_0.flush()
        assert stored(database_url, sink.table)["a"] == as_stored(row("a", 5), 0)
        # After a reset the versions start again, and the new epoch wins: every column, the version and the
        # epoch too (MySQL assigns left to right: the version and epoch columns go last).
        at_epoch_1, _ = writer(sink, epoch=1)
        put(at_epoch_1, row("a", 1))
        assert at_epoch_1.flush()
        put(at_epoch_0, row("a", 7))  # a straggler of the old epoch: older than anything of epoch 1
        assert at_epoch_0.flush()
        rows = stored(database_url, sink.table)
        assert rows["a"] == as_stored(row("a", 1), 1)
        assert rows["b"] == as_stored(row("b", 5), 0)
    finally:
        sink.dispose()


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
def test_a_flush_keeps_the_newest_row_per_key_in_one_round_trip(database_url: str) -> None:
    sink = DatabaseSink(database_url, profile_table(), profile_row, create_table=True)
    try:
        task, _ = writer(sink)
        put(task, row("warm-up", 1))
        assert task.flush()  # creates the table
        round_trips = sink.count_round_trips()
        for version in (3, 1, 4, 2):  # out of order: the buffer keeps version 4 of each key
            for user in range(500):
                put(task, row(f"u{user}", version))
        assert task.buffered == 500
        assert task.flush()
        assert round_trips() == 1
        rows = stored(database_url, sink.table)
        assert {user: r["version"] for user, r in rows.items() if user != "warm-up"} == \
            {f"u{user}": 4 for user in range(500)}
    finally:
        sink.dispose()


def statements_sent(sink: DatabaseSink) -> list[bool]:
    """Per statement the sink sends from now on: whether SQLAlchemy compiled it and processed its parameters (False:
    the driver got the sink's SQL and the rows' values as they are)."""
    sent: list[bool] = []
    event.listen(sink.engine, "before_cursor_execute",
                 lambda connection, cursor, statement, parameters, context, many: sent.append(bool(context.compiled)))
    return sent


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
def test_a_flush_hands_the_rows_to_the_driver_without_a_copy_per_row(database_url: str) -> None:
    """SQLAlchemy's ``connection.execute(statement, rows)`` builds a new parameter dict per row (~2 us a row: the
    most of a flush's Python time on SQLite); the sink sends its compiled statement with the rows' values."""
    sink = DatabaseSink(database_url, profile_table(), profile_row, create_table=True)
    try:
        task, _ = writer(sink)
        put(task, row("warm-up", 1))
        assert task.flush()  # creates the table
        sent = statements_sent(sink)
        for user in range(300):
            put(task, row(f"u{user}", 2))
        assert task.flush()
        put(task, row("u7", 3, orders=70))
        assert task.flush()  # one row: an execute, not an executemany
        assert sent == [False, False]
        rows = stored(database_url, sink.table)
        assert rows["u7"] == as_stored(row("u7", 3, orders=70), 0)
        assert {user: r for user, r in rows.items() if user not in ("warm-up", "u7")} == \
            {f"u{user}": as_stored(row(f"u{user}", 2), 0) for user in range(300) if user != 7}
    finally:
        sink.dispose()


class JsonText(TypeDecorator[Any]):
    """A value stored as JSON text: SQLAlchemy converts it (a bind processor) before the driver sees it."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> str | None:
        return None if value is None else json.dumps(value, sort_keys=True)

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        return None if value is None else json.loads(value)


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
def test_a_column_whose_type_converts_values_is_written_through_sqlalchemy(database_url: str) -> None:
    table = Table("tagged", MetaData(), Column("user_id", String(64), primary_key=True),
                  Column("tags", JsonText, nullable=False), Column("reset_epoch", Integer, nullable=False),
                  Column("version", BigInteger, nullable=False))
    sink = DatabaseSink(database_url, table, lambda user, value: {"user_id": user, **value}, create_table=True)
    try:
        task, rejected = writer(sink)
        put(task, {"user_id": "warm-up", "tags": {}, "version": 1})
        assert task.flush()
        sent = statements_sent(sink)
        for user in ("a", "b"):
            put(task, {"user_id": user, "tags": {"home": 2, "user": user}, "version": 1})
        assert task.flush() and not rejected
        assert sent == [True]  # compiled by SQLAlchemy, which converted the dicts
        rows = stored(database_url, table)
        assert {user: r["tags"] for user, r in rows.items()} == \
            {"warm-up": {}, "a": {"home": 2, "user": "a"}, "b": {"home": 2, "user": "b"}}
    finally:
        sink.dispose()


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
def test_a_row_the_database_rejects_goes_to_the_dead_letter_topic_and_the_rest_are_written(database_url: str) -> None:
    sink = DatabaseSink(database_url, profile_table(), profile_row, create_table=True)
    good = orders_of(users=3, per_user=2)
    config = {"application.id": APP, "production.exception.handler": "dead_letter"}
    try:
        with TopologyTestDriver(profiles_topology("orders", sink), config) as driver:
            source = driver.create_input_topic("orders", Serdes.String(), Serdes.Json())
            dlq = driver.create_output_topic(dead_letter_topic(APP), Serdes.Json(), Serdes.Json())
            source.pipe_input("bad", {"seq": 1, "cents": -5})  # breaks the table's CHECK (total_cents >= 0)
            for user, order in good:
                source.pipe_input(user, order)
            letter = dlq.read_record()
            assert dlq.is_empty()
        assert stored(database_url, sink.table) == expected(good)
        headers = error_headers(letter.headers)
        assert headers["stage"] == "production"
        assert headers["record"] == "output"
        assert headers["output.topic"] == "database:user_profiles"
        assert headers["source.topic"] == "orders" and headers["source.offset"] == "0"
        assert "rejected the row with key {'user_id': 'bad'}" in headers["message"]
        assert "total_not_negative" in headers["message"].lower() or "check" in headers["message"].lower()
        assert letter.key == {"user_id": "bad"}
        assert letter.value["total_cents"] == -5 and letter.value["version"] == 1
    finally:
        sink.dispose()


def test_an_unreachable_database_keeps_the_rows_and_backs_off(tmp_path: Path) -> None:
    missing_dir = tmp_path / "not-yet"
    sink = DatabaseSink(f"sqlite:///{missing_dir / 'sink.db'}", profile_table(), profile_row, create_table=True,
                        retry_backoff_ms=50, retry_backoff_max_ms=120)
    try:
        task, rejected = writer(sink)
        put(task, row("a", 1))
        waits = []
        for _ in range(4):
            assert not task.flush()
            waits.append(task.retry_at)
            assert not task.flush()  # before retry_at: not even tried
            task.retry_at = 0.0  # as if the wait had passed
        assert task.buffered == 1 and not rejected
        missing_dir.mkdir()
        assert task.flush()
        assert task.retry_at == 0.0 and task.buffered == 0
        assert stored(f"sqlite:///{missing_dir / 'sink.db'}", sink.table)["a"]["version"] == 1
    finally:
        sink.dispose()


def table_without(column: str) -> Table:
    columns = [Column("user_id", String(64), primary_key=True), Column("orders", Integer, nullable=False),
               Column("reset_epoch", Integer, nullable=False), Column("version", BigInteger, nullable=False)]
    return Table("t", MetaData(), *[c for c in columns if c.name != column])


@pytest.mark.parametrize(("url", "table", "message"), [
    ("oracle://u:secret@h/db", profile_table(), "unsupported database 'oracle'"),
    ("not a url", profile_table(), "not a SQLAlchemy URL"),
    ("sqlite://", table_without("version"), "has no version_column 'version'"),
    ("sqlite://", table_without("reset_epoch"), "has no epoch_column 'reset_epoch'"),
    ("sqlite://", table_without("user_id"), "has no primary key"),
    ("sqlite://", Table("n", MetaData(), Column("k", String(5), primary_key=True), Column("reset_epoch", Integer),
                        Column("version", BigInteger, nullable=False)), "must be NOT NULL"),
])
def test_invalid_configuration_fails_at_construction_naming_what(url: str, table: Table, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as failure:
        DatabaseSink(url, table, profile_row)
    assert "secret" not in str(failure.value)


def test_a_row_without_every_column_is_a_processing_error_naming_them(tmp_path: Path) -> None:
    sink = DatabaseSink(f"sqlite:///{tmp_path / 'sink.db'}", profile_table(), lambda k, v: {"user_id": k, "x": 1})
    try:
        with TopologyTestDriver(profiles_topology("orders", sink), {"application.id": APP}) as driver:
            source = driver.create_input_topic("orders", Serdes.String(), Serdes.Json())
            with pytest.raises(Exception, match=r"missing \['last_seq', 'orders', 'total_cents', 'version'\], "
                                                r"unknown \['x'\]"):
                source.pipe_input("u1", {"seq": 1, "cents": 1})
    finally:
        sink.dispose()


def test_a_batch_run_writes_nothing_to_the_database_unless_asked(tmp_path: Path) -> None:
    """Batch reprocessing runs the topology with ``external.sinks.enabled`` false: a recomputed day never touches
    the live database; ``batch_config(..., external_sinks=True)`` (the sink benchmark) writes."""
    from streaming.batch import BatchPlan, batch_config, run_task
    from streaming.batch.records import BatchRecord

    url = f"sqlite:///{tmp_path / 'profiles.db'}"
    sink = DatabaseSink(url, profile_table(), profile_row, create_table=True)
    plan = BatchPlan(profiles_topology("orders", sink), APP, {"orders": 1})
    orders = orders_of(users=3, per_user=2)
    records = [BatchRecord("orders", 0, offset, 1_000 + offset, Serdes.String().serialize(user),
                           Serdes.Json().serialize(order), None) for offset, (user, order) in enumerate(orders)]
    try:
        for external, want in ((False, {}), (True, expected(orders))):
            spec = plan.tasks[0][0]
            run_task(plan, batch_config({"application.id": APP}, external_sinks=external), spec,
                     {("orders", 0): records}, None, {}, chunk=100)
            assert _rows_if_any(url, sink.table) == want
    finally:
        sink.dispose()


def _rows_if_any(url: str, table: Table) -> dict[str, dict[str, Any]]:
    from sqlalchemy import inspect

    engine = create_engine(url)
    try:
        exists = inspect(engine).has_table(table.name)
    finally:
        engine.dispose()
    return stored(url, table) if exists else {}
