"""The orders pipeline, whole: dedupe, validate, mask, split, join users and items, count per hour.

``orders`` (keyed by user) -> deduplicated by order id (a window store kept ``dedupe_ttl``) -> invalid
orders, masked and with the reason, to ``orders-rejected``; valid ones masked and split into one record per item
line -> ``order-lines`` -> joined with the ``users`` table (stream-table, same key) -> re-keyed by item,
repartitioned and joined with the ``items`` table -> only lines whose item is made in the buyer's own
region -> grouped by that region into hourly windows (``grace`` for late orders) -> distinct buyers and
lines per region and hour, one suppressed final per window -> ``local-buyers-hourly``. Lines arriving
after their window closed go to ``order-lines-late`` (and are counted), so every valid line ends in a
final or there.
"""

from __future__ import annotations

import bisect
from datetime import timedelta
from typing import Any

from apps.orders.validation import item_lines, mask, rejection_reason
from streaming import Materialized, Serdes, Stores, StreamsBuilder, Suppressed, TimeWindows, Topology
from streaming.processor import Processor, ProcessorContext, Record
from streaming.windows.window import Windowed

APPLICATION_ID = "orders"
ORDERS_TOPIC = "orders"
USERS_TOPIC = "users"
ITEMS_TOPIC = "items"
REJECTED_TOPIC = "orders-rejected"
LINES_TOPIC = "order-lines"
LATE_LINES_TOPIC = "order-lines-late"
HOURLY_TOPIC = "local-buyers-hourly"

DEDUPE_STORE = "order-ids"
USERS_STORE = "users"
ITEMS_STORE = "items"
HOURLY_STORE = "local-buyers"
FINALS_NAME = "local-buyers-finals"  # the suppression buffer is its store, "<name>-store"

WINDOW = timedelta(hours=1)
GRACE = timedelta(minutes=30)
DEDUPE_TTL = timedelta(hours=1)


class DeduplicateOrders(Processor[str, Any]):
    """Forward an order unless an order with the same ``order_id`` came within ``ttl`` of it (event time).

    Orders are keyed by user, so every copy of an order reaches the same task. Seen ids are kept in a
    window store whose retention is the TTL: RocksDB segments older than stream time minus the TTL are
    dropped, as in Kafka Streams' event-deduplication example. The store keeps the input offset of the
    first copy, so the same record processed again after a crash (at-least-once replays it from the last
    commit, and the store may already hold its id) is forwarded again, not taken for its own duplicate.
    Values without an ``order_id`` pass through (validation rejects them); a duplicate is a counted skip
    (``dropped_records``).
    """

    def __init__(self, ttl: timedelta = DEDUPE_TTL) -> None:
        self.ttl_ms = int(ttl.total_seconds() * 1000)

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.seen = context.get_state_store(DEDUPE_STORE)

    def process(self, record: Record[str, Any]) -> None:
        order_id = record.value.get("order_id") if isinstance(record.value, dict) else None
        if isinstance(order_id, str):
            ts, offset = record.timestamp, self.context.offset
            first = next(iter(self.seen.fetch(order_id, ts - self.ttl_ms, ts + self.ttl_ms)), None)
            if first is None:
                self.seen.put(order_id, offset, ts)
            elif first[1] != offset:
                self.context.record_dropped(f"duplicate of order {order_id!r} (first at offset {first[1]})")
                return
        self.context.forward(record)


def add_buyer(region: str, line: dict[str, Any], hourly: dict[str, Any]) -> dict[str, Any]:
    """Fold one line into a region's hour: the sorted distinct buyers and the number of lines."""
    buyers = hourly["users"]
    at = bisect.bisect_left(buyers, line["user"])
    if at == len(buyers) or buyers[at] != line["user"]:
        buyers.insert(at, line["user"])
    hourly["lines"] += 1
    return hourly


def hourly_result(windowed: Windowed, hourly: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The output record of a closed window: keyed by region."""
    return windowed.key, {"region": windowed.key, "window_start": windowed.window.start,
                          "window_end": windowed.window.end, "users": len(hourly["users"]), "lines": hourly["lines"]}


def topology(grace: timedelta = GRACE, dedupe_ttl: timedelta = DEDUPE_TTL) -> Topology:
    """The whole pipeline (module docstring).

    ``grace`` is how far behind the hourly task's stream time a line may be and still count. It must cover
    both how late orders arrive and how unevenly the order partitions are read: a worker catching up on a
    backlog reads some partitions hours ahead of others, and lines of the slower ones then look late (the
    demo feeds orders as they would arrive, so its partitions stay within minutes of each other).
    """
    builder = StreamsBuilder()
    string, json = Serdes.String(), Serdes.Json()
    builder.add_state_store(Stores.window_store_builder(
        Stores.persistent_window_store(DEDUPE_STORE, retention=dedupe_ttl, window_size=dedupe_ttl,
                                       retain_duplicates=False), string, Serdes.Long()))
    users = builder.table(USERS_TOPIC, key_serde=string, value_serde=json, materialized=USERS_STORE)
    items = builder.table(ITEMS_TOPIC, key_serde=string, value_serde=json, materialized=ITEMS_STORE)

    orders = (builder.stream(ORDERS_TOPIC, key_serde=string, value_serde=json)
              .process_values(lambda: DeduplicateOrders(dedupe_ttl), DEDUPE_STORE, name="dedupe"))
    branches = (orders.split(name="orders-")
                .branch(lambda user, order: rejection_reason(user, order) is None, name="valid")
                .default_branch(name="invalid"))
    branches["orders-invalid"].map_values(
        lambda user, order: {"order": mask(order) if isinstance(order, dict) else order,
                             "reason": rejection_reason(user, order)}).to(REJECTED_TOPIC, value_serde=json)
    lines = branches["orders-valid"].map_values(mask).flat_map_values(item_lines)
    lines.to(LINES_TOPIC, value_serde=json)

    local_lines = (
        lines.join(users, lambda line, user: {**line, "user_region": user["region"]}, name="join-users")
        .select_key(lambda user, line: line["item"], name="by-item")
        .join(items, lambda line, item: {**line, "item_region": item["region"]}, name="lines-by-item")
        .filter(lambda item, line: line["user_region"] == line["item_region"], name="made-in-own-region"))
    (local_lines
     .group_by(lambda item, line: line["user_region"], key_serde=string, name="lines-by-region")
     .windowed_by(TimeWindows.of(WINDOW, grace=grace), late_records_topic=LATE_LINES_TOPIC)
     .aggregate(lambda: {"users": [], "lines": 0}, add_buyer, materialized=Materialized.as_(HOURLY_STORE))
     .suppress(Suppressed.until_window_closes().with_name(FINALS_NAME))
     .to_stream()
     .map(hourly_result, name="hourly-result")
     .to(HOURLY_TOPIC, key_serde=string, value_serde=json))
    return builder.build()
