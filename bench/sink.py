"""Profile upserts/s through Brook's database sink into SQLite, MariaDB and PostgreSQL, beside a hand-written
SQLAlchemy batch loop of the same run, and the database round trips per 1,000 orders.

Workload: ``--orders`` orders over ``--users`` users, each turned into its user's profile update (orders, total,
last order time, version: the KTable's update stream without a cache, one update per order), serialized as JSON
record values. Both sides take the same updates in the same batches — ``--rate`` orders/s times a 5 s commit
interval per batch — and upsert the newest profile per user of each batch, only if its (reset epoch, version) is
newer than the stored row's:

- **brook**: the production ``StreamTask`` (``streaming.batch.task_runner.run_task``, which commits after every
  ``chunk`` records as a worker commits every ``commit.interval.ms``) running
  ``builder.stream(updates).to_database(DatabaseSink(...))``: JSON deserialization, the sink's per-task buffer,
  its flush at each commit (the compiled upsert and the rows' values handed to the driver:
  ``streaming.sinks.upserts.upsert_writer``).
- **ceiling**: a hand-written loop over the same consumed messages (each batch's ``as_message`` list, as the
  task gets them): orjson decode, a dict of the newest row per user, one
  ``connection.execute(upsert, rows)`` (executemany, SQLAlchemy building each row's parameters) in one
  transaction per batch, the upsert written by hand with SQLAlchemy's dialect inserts. The target is brook /
  ceiling >= 0.8.
- **driver loop** (for comparison, no target): the same loop sending the upsert as Brook's flush does, compiled
  once, with ``exec_driver_sql`` and the rows' values as the driver takes them — so brook / driver loop is what
  the task and the sink's buffer cost per record beyond the loop's own work.

Each side writes into its own fresh table; the sides alternate ``--repeat`` times (3), each after a ``gc.collect()``
(neither starts with the other's garbage), and the best time of each is kept. Round trips are
``before_cursor_execute`` events (an executemany counts once per statement the driver sends), "in database" the
time from each to its ``after_cursor_execute``, and "cpu" this process's CPU time over the run (Python and the
driver, not the database server's: on a shared machine, the part least moved by other jobs). Both tables are
checked equal at the end. Throwaway MariaDB and PostgreSQL servers are started (streaming.testing.mariadb /
.postgres); a database whose server binaries are missing is skipped and says so.

Run: ``.venv/bin/python bench/sink.py`` (about a minute), ``--only sqlite,postgres``, ``--orders 50000``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from operator import itemgetter
from pathlib import Path
from typing import Any, NamedTuple

import orjson
from sqlalchemy import BigInteger, Column, Integer, MetaData, String, Table, create_engine, event, func, select, tuple_
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import Connection, Engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import fmt_table, write_results
from streaming import Serdes, StreamsBuilder
from streaming.batch.plan import BatchPlan
from streaming.batch.records import BatchRecord, as_message
from streaming.batch.task_runner import batch_config, run_task
from streaming.sinks import DatabaseSink

TOPIC = "profile-updates"
COMMIT_SECONDS = 5
TARGET = 0.8


def profile_table(name: str) -> Table:
    return Table(name, MetaData(),
                 Column("user_id", String(32), primary_key=True),
                 Column("orders", Integer, nullable=False),
                 Column("total_cents", BigInteger, nullable=False),
                 Column("last_order_ms", BigInteger, nullable=False),
                 Column("reset_epoch", Integer, nullable=False),
                 Column("version", BigInteger, nullable=False))


def profile_row(user: str, profile: dict[str, Any]) -> dict[str, Any]:
    return {"user_id": user, "orders": profile["orders"], "total_cents": profile["total_cents"],
            "last_order_ms": profile["last_order_ms"], "version": profile["version"]}


def updates(orders: int, users: int, seed: int = 7) -> list[tuple[bytes, bytes]]:
    """One profile update per order: (user key, JSON profile) as the KTable's update stream carries them."""
    rng = random.Random(seed)
    profiles: dict[str, dict[str, int]] = {}
    out = []
    for n in range(orders):
        user = f"u{rng.randrange(users):06d}"
        old = profiles.get(user) or {"orders": 0, "total_cents": 0, "last_order_ms": 0, "version": 0}
        new = {"orders": old["orders"] + 1, "total_cents": old["total_cents"] + rng.randrange(100, 50_000),
               "last_order_ms": 1_760_000_000_000 + n, "version": old["version"] + 1}
        profiles[user] = new
        out.append((user.encode(), orjson.dumps(new)))
    return out


class Timed(NamedTuple):
    """One side's run: wall-clock and this process's CPU seconds, and what the database saw."""

    seconds: float
    cpu_seconds: float
    meter: DatabaseMeter


class DatabaseMeter:
    """Statements sent to the database (``before_cursor_execute``: an executemany counts once per statement the
    driver sends) and the time spent in them (to ``after_cursor_execute``)."""

    def __init__(self, engine: Engine) -> None:
        self.round_trips = 0
        self.seconds = 0.0
        self._started = 0.0
        event.listen(engine, "before_cursor_execute", self._before)
        event.listen(engine, "after_cursor_execute", self._after)

    def _before(self, *_: Any) -> None:
        self.round_trips += 1
        self._started = time.perf_counter()

    def _after(self, *_: Any) -> None:
        self.seconds += time.perf_counter() - self._started


def hand_upsert(dialect: str, table: Table) -> Any:
    """The conditional upsert as one would write it by hand."""
    if dialect in ("mysql", "mariadb"):
        insert = mysql.insert(table)
        newer = tuple_(table.c.reset_epoch, table.c.version) < tuple_(insert.inserted.reset_epoch,
                                                                      insert.inserted.version)
        names = ["orders", "total_cents", "last_order_ms", "version", "reset_epoch"]  # version, epoch last
        return insert.on_duplicate_key_update([(n, func.IF(newer, insert.inserted[n], table.c[n])) for n in names])
    insert = (postgresql if dialect == "postgresql" else sqlite).insert(table)
    newer = tuple_(table.c.reset_epoch, table.c.version) < tuple_(insert.excluded.reset_epoch, insert.excluded.version)
    return insert.on_conflict_do_update(
        index_elements=["user_id"], where=newer,
        set_={n: insert.excluded[n] for n in ("orders", "total_cents", "last_order_ms", "reset_epoch", "version")})


Write = Callable[[Connection, list[dict[str, Any]]], Any]


def sqlalchemy_execute(statement: Any, engine: Engine) -> Write:
    """``connection.execute(upsert, rows)``: the minimal loop's executemany."""
    return lambda connection, rows: connection.execute(statement, rows)


def driver_executemany(statement: Any, engine: Engine) -> Write:
    """The upsert compiled once, sent with ``exec_driver_sql``: tuples in the statement's order for a positional
    driver (SQLite, PyMySQL), the row dicts for psycopg."""
    compiled = statement.compile(dialect=engine.dialect)  # after table.create: the dialect knows its server
    if not compiled.positional:
        return lambda connection, rows: connection.exec_driver_sql(compiled.string, rows)
    values = itemgetter(*compiled.positiontup)
    return lambda connection, rows: connection.exec_driver_sql(compiled.string, list(map(values, rows)))


def run_ceiling(url: str, table: Table, batches: list[list[BatchRecord]]) -> Timed:
    return hand_loop(url, table, batches, sqlalchemy_execute)


def run_driver_loop(url: str, table: Table, batches: list[list[BatchRecord]]) -> Timed:
    return hand_loop(url, table, batches, driver_executemany)


def hand_loop(url: str, table: Table, batches: list[list[BatchRecord]],
              writer: Callable[[Any, Engine], Write]) -> Timed:
    engine = create_engine(url)
    try:
        table.create(engine, checkfirst=True)
        meter = DatabaseMeter(engine)
        write = writer(hand_upsert(engine.dialect.name, table), engine)
        started, cpu = time.perf_counter(), time.process_time()
        for batch in batches:
            newest: dict[str, dict[str, Any]] = {}
            for message in [as_message(record) for record in batch]:  # the batch's messages, as the task gets them
                user = message.key().decode()
                row = profile_row(user, orjson.loads(message.value()))
                row["reset_epoch"] = 0
                held = newest.get(user)
                if held is None or held["version"] <= row["version"]:
                    newest[user] = row
            with engine.begin() as connection:
                write(connection, list(newest.values()))
        return Timed(time.perf_counter() - started, time.process_time() - cpu, meter)
    finally:
        engine.dispose()


def run_brook(url: str, table: Table, batches: list[list[BatchRecord]]) -> Timed:
    sink = DatabaseSink(url, table, profile_row, create_table=True)
    try:
        sink.ensure_table()  # both sides start with an empty, existing table
        meter = DatabaseMeter(sink.engine)
        builder = StreamsBuilder()
        builder.stream(TOPIC, key_serde=Serdes.String(), value_serde=Serdes.Json()).to_database(sink)
        plan = BatchPlan(builder.build(), "bench-sink", {TOPIC: 1})
        [[spec]] = plan.tasks.values()
        records = [record for batch in batches for record in batch]
        config = batch_config({"application.id": "bench-sink"}, external_sinks=True)
        started, cpu = time.perf_counter(), time.process_time()
        run_task(plan, config, spec, {(TOPIC, 0): records}, chunk=len(batches[0]))
        return Timed(time.perf_counter() - started, time.process_time() - cpu, meter)
    finally:
        sink.dispose()


SIDES = (("ceiling", run_ceiling), ("driver", run_driver_loop), ("brook", run_brook))
LABELS = {"ceiling": "ceiling", "driver": "driver loop", "brook": "brook"}


def rows_of(url: str, table: Table) -> list[Any]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return [tuple(r)[1:] for r in connection.execute(select(table).order_by(table.c.user_id))]
    finally:
        engine.dispose()


@contextlib.contextmanager
def database(name: str, workdir: Path) -> Iterator[str | None]:
    """The URL of an empty database of kind ``name`` (a throwaway server), or None when it cannot run here."""
    if name == "sqlite":
        yield f"sqlite:///{workdir / 'bench.db'}"
    elif name == "mariadb":
        from streaming.testing.mariadb import MariaDBServer, mariadb_missing
        if mariadb_missing():
            print(f"mariadb skipped: {mariadb_missing()}")
            yield None
            return
        with MariaDBServer() as server:
            yield server.url()
    elif name == "postgres":
        from streaming.testing.postgres import PostgresServer, postgres_missing
        if postgres_missing():
            print(f"postgres skipped: {postgres_missing()}")
            yield None
            return
        with PostgresServer() as server:
            server.client("createdb", "bench")
            yield server.url("bench").replace("+psycopg2", "+psycopg")
    else:
        raise SystemExit(f"unknown database {name!r}: sqlite, mariadb or postgres")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--orders", type=int, default=200_000)
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--rate", type=int, default=10_000, help="orders/s: a batch is rate x the 5 s commit")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each side, alternating; the best is kept")
    parser.add_argument("--only", default="sqlite,mariadb,postgres")
    parser.add_argument("--strict", action="store_true", help=f"exit 3 when a ratio is below {TARGET}")
    args = parser.parse_args()
    data = [BatchRecord(TOPIC, 0, offset, 0, key, value)
            for offset, (key, value) in enumerate(updates(args.orders, args.users))]
    per_batch = args.rate * COMMIT_SECONDS
    batches = [data[i:i + per_batch] for i in range(0, len(data), per_batch)]
    print(f"{args.orders:,} orders over {args.users:,} users: {len(batches)} batches of {per_batch:,} "
          f"(--rate {args.rate:,}/s x {COMMIT_SECONDS} s commits)")
    rows, results, below = [], {}, False
    with tempfile.TemporaryDirectory(prefix="bench-sink-") as workdir:
        for name in args.only.split(","):
            with database(name, Path(workdir)) as url:
                if url is None:
                    continue
                best: dict[str, Timed] = {}
                for round_ in range(args.repeat):
                    for side, run in SIDES:
                        gc.collect()
                        timed = run(url, profile_table(f"{side}_{round_}"), batches)
                        if side not in best or timed.seconds < best[side].seconds:
                            best[side] = timed
                brook_rows = rows_of(url, profile_table("brook_0"))
                for side, _ in SIDES:
                    if rows_of(url, profile_table(f"{side}_0")) != brook_rows:
                        print(f"{name}: Brook's table differs from the {side}'s")
                        return 1
                ratio = best["ceiling"].seconds / best["brook"].seconds
                below |= ratio < TARGET
                results[name] = {side: {"seconds": t.seconds, "cpu_seconds": t.cpu_seconds,
                                        "orders_per_s": args.orders / t.seconds, "round_trips": t.meter.round_trips,
                                        "database_seconds": t.meter.seconds} for side, t in best.items()}
                results[name]["ratio"] = ratio
                results[name]["ratio_to_driver_loop"] = best["driver"].seconds / best["brook"].seconds
                for side, t in best.items():
                    rows.append([name, LABELS[side], f"{t.seconds:.2f}", f"{args.orders / t.seconds:,.0f}",
                                 f"{t.cpu_seconds:.2f}", f"{t.meter.seconds:.2f}",
                                 f"{t.meter.round_trips * 1000 / args.orders:.2f}",
                                 f"{ratio:.2f}" if side == "brook" else "",
                                 f"{results[name]['ratio_to_driver_loop']:.2f}" if side == "brook" else ""])
    print(fmt_table(["database", "side", "seconds", "orders/s", "cpu s", "in database s",
                     "round trips / 1k orders", "brook / ceiling", "brook / driver loop"], rows))
    print(f"target: brook / ceiling >= {TARGET}")
    write_results("sink", {"orders": args.orders, "users": args.users, "batch": per_batch, "results": results})
    return 3 if args.strict and below else 0


if __name__ == "__main__":
    raise SystemExit(main())
