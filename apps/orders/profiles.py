"""User profiles: each valid order updates its user's profile, kept in a state store, written to ``user-profiles``
and upserted into a relational table (``user_profiles``) through :class:`streaming.sinks.DatabaseSink`, where the
profile service reads it.

A profile holds the user's orders, total spent (rounded to cents at each step, so any order of the same orders
gives the same total), latest order time, item quantities per category, and ``version``: a counter of its updates,
which with the app's reset epoch orders the database's upserts (a replayed, older row never overwrites a newer
one: docs/database-sink.md).

Under at-least-once a worker that crashed replays the input since its last commit, and its restored store may
already hold updates of those orders (its changelog got them before the crash). The store therefore also keeps
the ids of the user's last :data:`RECENT_ORDERS` orders, and an order already among them is skipped (a counted
drop), so a profile counts each order once. The deduplication before it (``DeduplicateOrders``) drops copies of an
order sent again; this drops the same record processed again.

The database is ``BROOK_ORDERS_DATABASE_URL`` if set, else ``url`` in ``apps/orders/database.yaml`` (a SQLite file
unless changed; ``make demo`` and the tests point the variable at their own file). A password goes in the URL as
``${env:NAME}`` / ``${file:/path}``. Batch reprocessing writes no rows (``external.sinks.enabled``).
"""

from __future__ import annotations

import os
import pkgutil
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import BigInteger, Column, Float, Integer, MetaData, String, Table, Text, create_engine, select

from apps.orders.records import Order
from streaming.processor import Processor, ProcessorContext, Record
from streaming.sinks import DatabaseSink
from streaming.yaml_files import load_yaml

DATABASE_FILE = Path(__file__).with_name("database.yaml")
DATABASE_URL_VARIABLE = "BROOK_ORDERS_DATABASE_URL"
#: Order ids kept per user to recognize a record processed again after a crash.
RECENT_ORDERS = 32


def profiles_table(name: str = "user_profiles") -> Table:
    """The profile service's table: one row per user, with the sink's reset epoch and version columns."""
    return Table(name, MetaData(),
                 Column("user_id", String(64), primary_key=True),
                 Column("orders", Integer, nullable=False),
                 Column("total_spent", Float, nullable=False),
                 Column("last_order_ts", BigInteger, nullable=False),
                 Column("items_per_category", Text, nullable=False),  # JSON: {"home": 3, ...}
                 Column("reset_epoch", Integer, nullable=False),
                 Column("version", BigInteger, nullable=False))


def profile_row(user: str, profile: dict[str, Any]) -> dict[str, Any]:
    """The table's row of a profile (every column but the epoch, which the sink sets)."""
    return {"user_id": user, "orders": profile["orders"], "total_spent": profile["total_spent"],
            "last_order_ts": profile["last_order_ts"],
            "items_per_category": orjson.dumps(profile["items_per_category"], option=orjson.OPT_SORT_KEYS).decode(),
            "version": profile["version"]}


def database_url() -> str:
    """``BROOK_ORDERS_DATABASE_URL``, else ``url`` in ``apps/orders/database.yaml``."""
    if os.environ.get(DATABASE_URL_VARIABLE):
        return os.environ[DATABASE_URL_VARIABLE]
    data = pkgutil.get_data(__package__ or "apps.orders", DATABASE_FILE.name)  # package data: also from a zip
    return str((load_yaml(data.decode() if data else "") or {})["url"])


def profiles_sink() -> DatabaseSink:
    """The sink of the profiles into :func:`database_url`'s ``user_profiles`` (created if missing; for a SQLite file,
    its folder too, such as ``.brook`` in a fresh clone)."""
    url = database_url()
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    return DatabaseSink(url, profiles_table(), profile_row, create_table=True)


def stored_profiles(url: str) -> dict[str, dict[str, Any]]:
    """The profiles in the table at ``url``, as the pipeline's values (for checks against the oracle)."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(select(profiles_table())).mappings().all()
    finally:
        engine.dispose()
    return {row["user_id"]: {"orders": row["orders"], "total_spent": row["total_spent"],
                             "last_order_ts": row["last_order_ts"],
                             "items_per_category": orjson.loads(row["items_per_category"]), "version": row["version"]}
            for row in rows}


def new_profile() -> dict[str, Any]:
    """A user's profile before their first valid order."""
    return {"orders": 0, "total_spent": 0.0, "last_order_ts": None, "items_per_category": {}, "version": 0}


def add_order(profile: dict[str, Any], order: Order) -> dict[str, Any]:
    """``profile`` with ``order`` applied (a new dict)."""
    per_category = dict(profile["items_per_category"])
    for line in order.items:
        category = line.category or "unknown"
        per_category[category] = per_category.get(category, 0) + line.qty
    last = profile["last_order_ts"]
    return {"orders": profile["orders"] + 1, "total_spent": round(profile["total_spent"] + order.amount, 2),
            "last_order_ts": order.ts if last is None else max(last, order.ts), "items_per_category": per_category,
            "version": profile["version"] + 1}


class UpdateProfile(Processor[str, Order]):
    """Apply each valid order to its user's profile in ``store`` once (module doc) and forward the new profile."""

    def __init__(self, store: str) -> None:
        self.store_name = store

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store(self.store_name)

    def process(self, record: Record[str, Order]) -> None:
        order = record.value
        held = self.store.get(record.key) or {"profile": new_profile(), "recent": []}
        if order.order_id in held["recent"]:
            self.context.record_dropped(f"order {order.order_id!r} is already in the profile of user {record.key!r} "
                                        f"(processed again after a restart, or sent again after the dedupe window)")
            return
        profile = add_order(held["profile"], order)
        self.store.put(record.key, {"profile": profile, "recent": [*held["recent"][1 - RECENT_ORDERS:], order.order_id]})
        self.context.forward(record.with_value(profile))
