"""DatabaseSink: a stream's (or a table's) records upserted into a relational table, at each commit.

One sink serves MySQL/MariaDB, PostgreSQL and SQLite through SQLAlchemy 2 Core (``pip install brook[sinks]``)::

    from sqlalchemy import BigInteger, Column, Integer, MetaData, Numeric, String, Table
    from streaming.sinks import DatabaseSink

    profiles = Table("user_profiles", MetaData(),
                     Column("user_id", String(64), primary_key=True),
                     Column("orders", Integer, nullable=False),
                     Column("total", Numeric(14, 2), nullable=False),
                     Column("reset_epoch", Integer, nullable=False),
                     Column("version", BigInteger, nullable=False))
    sink = DatabaseSink("mysql+pymysql://app:${env:DB_PASSWORD}@db/shop", profiles,
                        row=lambda user, p: {"user_id": user, "orders": p["orders"], "total": p["total"],
                                             "version": p["version"]},
                        create_table=True)
    builder.table("user-profiles").to_database(sink)

Semantics:

* **Batched, at the commit.** Each task buffers its rows, newest per key (the highest version; the last one at
  equal versions), and writes them when it commits, after its stores are flushed and before its offsets are
  committed: one transaction and one executemany per flush (PyMySQL sends it as multi-row INSERTs, psycopg as one
  pipeline), the rows' values handed to the driver as they are (:func:`~streaming.sinks.upserts.upsert_writer`).
  An offset is committed only after what its records wrote is in the database (at-least-once).
* **Idempotent replay.** Each row carries the application's reset epoch (``epoch_column``: ``none`` is 0) and
  the version the ``row`` function gives (``version_column``: a counter the user keeps in the table's value,
  incremented on each update). A row is written only if ``(epoch, version)`` is greater than the stored row's
  (:mod:`streaming.sinks.upserts`), so a replay after a crash, a rebalance or a restart never puts an old
  value over a newer one, and after an application reset (a higher epoch) the new run's rows win even though
  their versions start again from 1. Offsets and timestamps cannot order updates across a reset or a
  re-partitioning; the version can.
* **A database that is down** (no connection, or a connection lost mid-flush) makes the flush retry with
  exponential backoff (``retry_backoff_ms`` doubling up to ``retry_backoff_max_ms``, forever): meanwhile the
  task commits no offsets, the stream thread pauses the task's input partitions and keeps polling (it stays in
  its group), and nothing buffered is dropped. When a flush succeeds the offsets are committed and the input
  resumes (:mod:`streaming.runtime.external_sinks`).
* **A row the database rejects** (a constraint, a value too long: any error while the database still answers)
  is isolated by writing that flush's rows one by one; the rejected row goes to ``production.exception.handler``
  with the database's reason — with ``dead_letter``, to ``<application.id>-dlq`` as an ``output`` dead letter
  whose key and value are the row's key columns and the row as JSON, ``brook.error.output.topic`` is
  ``database:<table>`` and ``brook.error.source.*`` name the input record that produced the row. The other rows
  are written. (With the default ``fail`` handler the thread stops, as for any production error.)
* **Deletes** (a ``None`` value: a table's tombstone) are not written; they are counted as dropped records.
* Under ``exactly_once_v2`` the database write is still at-least-once (it is not part of the Kafka
  transaction); the (epoch, version) rule makes the replay harmless.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from operator import itemgetter
from typing import Any

from sqlalchemy import Column, Table, create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError

from streaming.config_sources import resolve_references
from streaming.errors import ConfigError, ProductionError
from streaming.sinks.upserts import DIALECTS, UpsertWriter, upsert_statement, upsert_writer
from streaming.topology.nodes import Emit

log = logging.getLogger(__name__)

#: A row as the ``row`` function returns it: column name -> value.
Row = dict[str, Any]
RowFunction = Callable[[Any, Any], Row]


def epoch_number(epoch: str) -> int:
    """The reset epoch as the integer stored in the epoch column: ``none`` (never reset) is 0."""
    return 0 if epoch == "none" else int(epoch)


class DatabaseSink:
    """Upserts records into ``table`` at each commit; see the module doc for the semantics.

    Args:
        url: a SQLAlchemy URL (``mysql+pymysql://``, ``mariadb+pymysql://``, ``postgresql+psycopg://``,
            ``sqlite:///path.db``); ``${env:NAME}`` / ``${file:/path}`` references are resolved, so a password
            never has to be written in code or config files. Never logged with its password.
        table: the table, declared in code (``sqlalchemy.Table``): a primary key (the row's key), plus the
            ``version_column`` and ``epoch_column`` (NOT NULL, outside the key).
        row: ``row(key, value) -> {column: value}``, a NEW dict per call (the sink adds the epoch column to it):
            every column of the table but the epoch column (checked by name on the first row, by number on the
            others; a row naming another column fails when written).
        version_column, epoch_column: the columns holding the version (from ``row``) and the reset epoch (set by
            the sink).
        create_table: create the table if it does not exist, before the first write.
        retry_backoff_ms, retry_backoff_max_ms: the first wait after a failed flush, and the longest.
        engine_options: more ``sqlalchemy.create_engine`` arguments (pool size, connect_args, ...).

    Raises:
        ConfigError: at construction, naming what is wrong — an unsupported URL scheme, a missing driver, a
            table without a primary key or without the version or epoch column.
    """

    def __init__(self, url: str, table: Table, row: RowFunction, *, version_column: str = "version",
                 epoch_column: str = "reset_epoch", create_table: bool = False, retry_backoff_ms: int = 100,
                 retry_backoff_max_ms: int = 30_000, engine_options: Mapping[str, Any] | None = None) -> None:
        self.table = table
        self.row = row
        self.destination = f"database:{table.fullname}"
        self.key_columns = [column.name for column in table.primary_key.columns]
        self.version = _column(table, version_column, "version_column", self.key_columns)
        self.epoch = _column(table, epoch_column, "epoch_column", self.key_columns)
        if not self.key_columns:
            raise ConfigError(f"database sink: table {table.fullname!r} has no primary key; the sink upserts by it "
                              f"(declare the key columns with primary_key=True)")
        self.row_columns = frozenset(column.name for column in table.columns) - {epoch_column}
        if retry_backoff_ms <= 0 or retry_backoff_max_ms < retry_backoff_ms:
            raise ConfigError(f"database sink for {table.fullname!r}: retry_backoff_ms={retry_backoff_ms} must be "
                              f"positive and at most retry_backoff_max_ms={retry_backoff_max_ms}")
        self.retry_backoff = retry_backoff_ms / 1000
        self.retry_backoff_max = retry_backoff_max_ms / 1000
        self.engine = _engine(url, table, dict(engine_options or {}))
        self.dialect = self.engine.dialect.name
        self.statement = upsert_statement(self.dialect, table, self.epoch, self.version)
        self._writer: UpsertWriter | None = None  # compiled at the first write, once the dialect knows its server
        self._table_ready = not create_table
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"DatabaseSink({self.engine.url.render_as_string(hide_password=True)!r}, {self.table.fullname!r})"

    def operator(self) -> ToDatabase:
        """The DSL operator writing into this sink (what ``KStream.to_database`` adds to the topology)."""
        return ToDatabase(self)

    def ensure_table(self) -> None:
        """Create the table if ``create_table`` asked for it and it does not exist yet (once per sink)."""
        if not self._table_ready:
            with self._lock:
                if not self._table_ready:
                    self.table.create(self.engine, checkfirst=True)
                    self._table_ready = True

    def write(self, rows: list[Row]) -> None:
        """Upsert ``rows`` in one transaction, one executemany (creating the table first if asked, once; see
        :func:`~streaming.sinks.upserts.upsert_writer` for how the rows reach the driver). Raises SQLAlchemy's errors
        as they are."""
        self.ensure_table()
        if not rows:
            return
        with self.engine.begin() as connection:
            if self._writer is None:
                self._writer = upsert_writer(self.statement, connection.dialect, self.row_columns | {self.epoch.name})
            self._writer(connection, rows)

    def reachable(self) -> bool:
        """Whether the database answers a trivial query now (tells a rejected row from a database that is down)."""
        try:
            with self.engine.connect() as connection:
                connection.exec_driver_sql("SELECT 1")
        except SQLAlchemyError:
            return False
        return True

    def count_round_trips(self) -> Callable[[], int]:
        """Count the statements sent to the database from now on (a ``before_cursor_execute`` listener: an
        executemany counts once); returns a function reading the count. For tests and benchmarks."""
        count = [0]

        def counted(*_: Any) -> None:
            count[0] += 1
        event.listen(self.engine, "before_cursor_execute", counted)
        return lambda: count[0]

    def dispose(self) -> None:
        """Close the connection pool (after the application closed)."""
        self.engine.dispose()


def _column(table: Table, name: str, what: str, keys: list[str]) -> Column[Any]:
    if name not in table.c:
        raise ConfigError(f"database sink: table {table.fullname!r} has no {what} {name!r} (its columns: "
                          f"{', '.join(table.c.keys())}); the sink needs it to write only newer rows")
    column = table.c[name]
    if name in keys or column.nullable:
        raise ConfigError(f"database sink: the {what} {name!r} of table {table.fullname!r} must be NOT NULL and not "
                          f"part of the primary key")
    return column


def _engine(url: str, table: Table, options: dict[str, Any]) -> Engine:
    resolved = resolve_references({"url": url})["url"]
    try:
        parsed = make_url(resolved)
    except ArgumentError:
        raise ConfigError(f"database sink for {table.fullname!r}: not a SQLAlchemy URL (e.g. "
                          f"'postgresql+psycopg://user:password@host/db'; the URL is not shown: it may hold a "
                          f"password)") from None
    shown = parsed.render_as_string(hide_password=True)
    if parsed.get_backend_name() not in DIALECTS:
        raise ConfigError(f"database sink for {table.fullname!r}: unsupported database {parsed.get_backend_name()!r} "
                          f"in URL {shown!r}; supported: {', '.join(DIALECTS)}")
    try:
        return create_engine(parsed, **options)
    except (ImportError, ArgumentError, TypeError) as exc:
        raise ConfigError(f"database sink for {table.fullname!r}: cannot use URL {shown!r}: {exc} (the drivers "
                          f"come with `pip install brook[sinks]`)") from None


class ToDatabase:
    """The DSL operator of :meth:`KStream.to_database`: each task gets its own :class:`TaskDatabaseWriter`,
    flushed at the task's commit. A terminal node: it forwards nothing."""

    def __init__(self, sink: DatabaseSink) -> None:
        self.sink = sink

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        sink = self.sink
        if not context.external_sinks_enabled:  # external.sinks.enabled=false: batch reprocessing
            return _write_nothing
        writer = TaskDatabaseWriter(sink, epoch_number(context.reset_epoch), context.reject_output)
        context.add_external_sink(writer)
        row_of, current_input, key_of, version = sink.row, context.current_input, writer.key_of, sink.version.name
        buffer, sources = writer.buffer, writer.sources
        columns, width, epoch_column, epoch = sink.row_columns, len(sink.row_columns), sink.epoch.name, writer.epoch
        checked = False  # the first row's column names are checked; later rows' number of columns

        def to_database(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            nonlocal checked
            if value is None:
                context.record_dropped(f"a delete (None value) is not written to {sink.destination}")
                return
            row = row_of(key, value)
            if len(row) != width or not checked:
                if row.keys() != columns:
                    raise ValueError(_columns_mismatch(sink, row))
                checked = True
            row[epoch_column] = epoch  # the row function returns a new dict (a copy per record costs ~15%)
            row_key = key_of(row)  # as TaskDatabaseWriter.add, inlined: the per-record path
            held = buffer.get(row_key)
            if held is None or held[version] <= row[version]:
                buffer[row_key] = row
                sources[row_key] = current_input()
        return to_database


def _write_nothing(key: Any, value: Any, timestamp: int, headers: Any) -> None:
    """A database sink with ``external.sinks.enabled`` false."""


def _columns_mismatch(sink: DatabaseSink, row: Mapping[str, Any]) -> str:
    missing, unknown = sorted(sink.row_columns - row.keys()), sorted(row.keys() - sink.row_columns)
    return (f"{sink.destination}: the row function must return every column but {sink.epoch.name!r}; "
            f"missing {missing}, unknown {unknown}")


Reject = Callable[[str, Any, bytes | None, bytes | None, Exception], None]


class TaskDatabaseWriter:
    """One task's buffer of rows for a :class:`DatabaseSink` (a :class:`~streaming.runtime.external_sinks
    .ExternalSink`): the newest row per key, with the input record that produced it."""

    def __init__(self, sink: DatabaseSink, epoch: int, reject: Reject) -> None:
        self.sink = sink
        self.epoch = epoch
        self._reject = reject
        #: key (a value, or a tuple of a composite key) -> the newest row, and the input record it came from
        self.buffer: dict[Any, Row] = {}
        self.sources: dict[Any, Any] = {}
        self.key_of = itemgetter(*sink.key_columns)
        self._version = sink.version.name
        self._failures = 0
        self.retry_at = 0.0
        self.written = 0  # rows written
        self.rejected = 0  # rows the database refused

    @property
    def buffered(self) -> int:
        """Rows waiting for the next flush."""
        return len(self.buffer)

    def add(self, row: Row, source: Any) -> None:
        """Buffer ``row`` (with its epoch column set) unless a newer row of its key is buffered already; ``source``
        is the input record it came from (``NodeContext.current_input``)."""
        key = self.key_of(row)
        held = self.buffer.get(key)
        if held is None or held[self._version] <= row[self._version]:
            self.buffer[key] = row
            self.sources[key] = source

    def flush(self) -> bool:
        """Write the buffer (see the module doc); False if the database is unreachable (retry at ``retry_at``)."""
        if not self.buffer:
            return True
        if time.monotonic() < self.retry_at:
            return False
        try:
            self.sink.write(list(self.buffer.values()))
        except SQLAlchemyError as exc:
            if _disconnected(exc) or not self.sink.reachable():
                return self._unreachable(exc)
            log.info("%s refused a batch of %d rows (%s); writing them one by one to find the rejected ones",
                     self.sink.destination, len(self.buffer), _reason(exc))
            try:
                self._write_one_by_one()
            except SQLAlchemyError as lost:
                return self._unreachable(lost)
        self.written += len(self.buffer)
        self.buffer.clear()
        self.sources.clear()
        if self._failures:
            log.info("%s: the database is writable again after %d failed flushes", self.sink.destination,
                     self._failures)
        self._failures, self.retry_at = 0, 0.0
        return True

    def _write_one_by_one(self) -> None:
        """Each buffered row in its own transaction: the rejected ones go to the production error handler (and
        leave the buffer); raises the error of a row that failed because the database went away."""
        for key, row in list(self.buffer.items()):
            try:
                self.sink.write([row])
            except SQLAlchemyError as exc:
                if _disconnected(exc) or not self.sink.reachable():
                    raise
                del self.buffer[key]
                self.rejected += 1
                self._reject_row(row, self.sources.pop(key), exc)
            else:
                del self.buffer[key]
                del self.sources[key]
                self.written += 1

    def _reject_row(self, row: Row, source: Any, exc: SQLAlchemyError) -> None:
        sink = self.sink
        key = {name: row[name] for name in sink.key_columns}
        error = ProductionError(f"{sink.destination} rejected the row with key {key}: {_reason(exc)}")
        error.__cause__ = getattr(exc, "orig", None) or exc
        key_bytes = json.dumps(key, default=str).encode()
        value_bytes = json.dumps(row, default=str).encode()
        self._reject(sink.destination, source, key_bytes, value_bytes, error)

    def _unreachable(self, exc: SQLAlchemyError) -> bool:
        self._failures += 1
        wait = min(self.sink.retry_backoff * 2 ** (self._failures - 1), self.sink.retry_backoff_max)
        self.retry_at = time.monotonic() + wait
        log.warning("%s: the database is unreachable (%s); %d rows stay buffered, the task's offsets wait and its "
                    "input is paused; retry %d in %.1f s", self.sink.destination, _reason(exc), len(self.buffer),
                    self._failures + 1, wait)
        return False

    def close(self) -> None:
        """Drop the buffer: the task closes, and its input is re-read from its last commit."""
        if self.buffer:
            log.warning("%s: %d rows not written when the task closed (the database could not be written); whoever "
                        "owns the task next processes their input again from the last commit", self.sink.destination,
                        len(self.buffer))
        self.buffer.clear()
        self.sources.clear()


def _disconnected(exc: SQLAlchemyError) -> bool:
    return isinstance(exc, DBAPIError) and exc.connection_invalidated


def _reason(exc: SQLAlchemyError) -> str:
    """The database's own message (without SQLAlchemy's statement and parameters)."""
    orig = getattr(exc, "orig", None)
    return f"{type(orig).__name__}: {orig}" if orig is not None else str(exc).split("\n")[0]
