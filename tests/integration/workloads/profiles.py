"""A profile app for the database sink's tests: per user, orders counted and summed into a KTable whose value keeps
a version counter, upserted into a database table through :class:`streaming.sinks.DatabaseSink`.

Each order is ``{"seq": n, "cents": c}``: ``seq`` numbers a user's orders from 1 (the generator's). The aggregate
skips an order whose ``seq`` it has applied already, so a replay of input after a crash (at-least-once: the
restored store may hold updates of records whose offsets were not committed) does not count it twice: the table
stays exact and the test can compare the database with an oracle. (That is the app's concern, not the sink's: the
sink's is that a replayed, older row never overwrites a newer one.)

Topics and database come from the environment: ``PROFILE_INPUT``, ``PROFILE_DB_URL``. The table has a CHECK that
a total is not negative: an order with negative cents makes its user's rows rejected by the database.
"""

from __future__ import annotations

import os
from typing import Any

from sqlalchemy import BigInteger, CheckConstraint, Column, Integer, MetaData, String, Table

from streaming import Materialized, Serdes, StreamsBuilder, Topology
from streaming.sinks import DatabaseSink

TABLE = "user_profiles"


def profile_table(name: str = TABLE) -> Table:
    """The profiles table: one row per user, with the sink's epoch and version columns."""
    return Table(name, MetaData(),
                 Column("user_id", String(64), primary_key=True),
                 Column("orders", Integer, nullable=False),
                 Column("total_cents", BigInteger, nullable=False),
                 Column("last_seq", BigInteger, nullable=False),
                 Column("reset_epoch", Integer, nullable=False),
                 Column("version", BigInteger, nullable=False),
                 CheckConstraint("total_cents >= 0", name=f"{name}_total_not_negative"))


def empty() -> dict[str, int]:
    return {"orders": 0, "total_cents": 0, "last_seq": 0, "version": 0}


def add_order(user: str, order: dict[str, int], profile: dict[str, int]) -> dict[str, int]:
    """Apply one order to a profile (once: an order already applied leaves it unchanged)."""
    if order["seq"] <= profile["last_seq"]:
        return profile
    return {"orders": profile["orders"] + 1, "total_cents": profile["total_cents"] + order["cents"],
            "last_seq": order["seq"], "version": profile["version"] + 1}


def profile_row(user: str, profile: dict[str, int]) -> dict[str, Any]:
    return {"user_id": user, **profile}


def oracle(orders: list[tuple[str, dict[str, int]]]) -> dict[str, dict[str, int]]:
    """The profiles the input should leave in the database, per user."""
    profiles: dict[str, dict[str, int]] = {}
    for user, order in orders:
        profiles[user] = add_order(user, order, profiles.get(user) or empty())
    return profiles


def profiles_topology(input_topic: str, sink: DatabaseSink) -> Topology:
    builder = StreamsBuilder()
    table = builder.stream(input_topic, key_serde=Serdes.String(), value_serde=Serdes.Json()).group_by_key() \
        .aggregate(empty, add_order, materialized=Materialized.as_("profiles").with_value_serde(Serdes.Json()))
    table.to_database(sink)
    return builder.build()


def topology() -> Topology:
    """The worker's topology (``brook worker run tests.integration.workloads.profiles:topology``)."""
    sink = DatabaseSink(os.environ["PROFILE_DB_URL"], profile_table(), profile_row, create_table=True,
                        retry_backoff_max_ms=2000)
    return profiles_topology(os.environ["PROFILE_INPUT"], sink)
