"""The orders pipeline, whole: dedupe, validate, encrypt, split, route by category, join users and items, count
per hour.

``orders`` (keyed by user; typed :class:`~apps.orders.records.Order` records) -> deduplicated by order id (a
window store kept ``dedupe_ttl``) -> invalid orders, with the reason, their card number, address and phone
encrypted (and the card masked for people), to ``orders-rejected``; valid ones split into one record per item line
carrying the delivery address and phone, encrypted -> ``order-lines``, and each line to the topic of its item's
category, ``order-lines-<category>`` (a topic name extractor; the topics are declared in platform.yaml) -> joined
with the ``users`` table (stream-table, same key) -> re-keyed by item, repartitioned and joined with the ``items``
table -> only lines whose item is made in the buyer's own region -> grouped by that region into hourly windows
(``grace`` for late orders) -> distinct buyers and lines per region and hour, one suppressed final per window ->
``local-buyers-hourly``. Lines arriving after their window closed go to ``order-lines-late`` (and are counted),
so every valid line ends in a final or there. Each valid order also updates its user's profile (orders, total
spent, latest order time, items per category, and a ``version`` counter) written to ``user-profiles`` and upserted
into the profile service's database (:mod:`apps.orders.profiles`).
What is encrypted where: :mod:`apps.orders.protection`.
"""

from __future__ import annotations

import bisect
from datetime import timedelta
from typing import Any

from apps.orders.profiles import UpdateProfile, profiles_sink
from apps.orders.protection import LINE_FIELDS, REJECTED_FIELDS, EncryptFields
from apps.orders.records import Item, Order, OrderUser
from apps.orders.validation import delivery, item_lines, rejected, rejection_reason
from streaming import Materialized, Serdes, Stores, StreamsBuilder, Suppressed, TimeWindows, Topology
from streaming.processor import Processor, ProcessorContext, Record, RecordContext
from streaming.windows.window import Windowed

APPLICATION_ID = "orders"
ORDERS_TOPIC = "orders"
USERS_TOPIC = "users"
ITEMS_TOPIC = "items"
REJECTED_TOPIC = "orders-rejected"
LINES_TOPIC = "order-lines"
LATE_LINES_TOPIC = "order-lines-late"
HOURLY_TOPIC = "local-buyers-hourly"
PROFILES_TOPIC = "user-profiles"
CATEGORY_TOPIC_PREFIX = "order-lines-"
"""A line of category ``c`` also goes to ``order-lines-<c>`` (platform.yaml declares one per category)."""
CATEGORIES = ("electronics", "fashion", "home", "outdoor")
CATEGORY_TOPICS = tuple(CATEGORY_TOPIC_PREFIX + category for category in CATEGORIES)
"""The topics the lines are routed to: each must exist (a line of another category goes down the production error
path, naming the topic)."""
OUTPUT_TOPICS = (LINES_TOPIC, REJECTED_TOPIC, LATE_LINES_TOPIC, HOURLY_TOPIC, PROFILES_TOPIC, *CATEGORY_TOPICS)

DEDUPE_STORE = "order-ids"
USERS_STORE = "users"
ITEMS_STORE = "items"
HOURLY_STORE = "local-buyers"
PROFILES_STORE = "user-profiles"
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
    A null value passes through (validation rejects it); a duplicate is a counted skip (``dropped_records``).
    """

    def __init__(self, ttl: timedelta = DEDUPE_TTL) -> None:
        self.ttl_ms = int(ttl.total_seconds() * 1000)

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.seen = context.get_state_store(DEDUPE_STORE)

    def process(self, record: Record[str, Order | None]) -> None:
        if record.value is not None:
            order_id = record.value.order_id
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


def category_topic(user: str, line: dict[str, Any], context: RecordContext) -> str:
    """The topic of a line's item category (a topic name extractor)."""
    return f"{CATEGORY_TOPIC_PREFIX}{line['category']}"


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
    builder.add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store(PROFILES_STORE), string,
                                                           json))
    builder.add_state_store(Stores.window_store_builder(
        Stores.persistent_window_store(DEDUPE_STORE, retention=dedupe_ttl, window_size=dedupe_ttl,
                                       retain_duplicates=False), string, Serdes.Long()))
    users = builder.table(USERS_TOPIC, key_serde=string, value_serde=Serdes.Json(OrderUser), materialized=USERS_STORE)
    items = builder.table(ITEMS_TOPIC, key_serde=string, value_serde=Serdes.Json(Item), materialized=ITEMS_STORE)

    orders = (builder.stream(ORDERS_TOPIC, key_serde=string, value_serde=Serdes.Json(Order))
              .process_values(lambda: DeduplicateOrders(dedupe_ttl), DEDUPE_STORE, name="dedupe"))
    branches = (orders.split(name="orders-")
                .branch(lambda user, order: rejection_reason(user, order) is None, name="valid")
                .default_branch(name="invalid"))
    (branches["orders-invalid"].map_values(rejected, name="rejected")
     .process_values(lambda: EncryptFields(REJECTED_FIELDS), name="encrypt-rejected")
     .to(REJECTED_TOPIC, value_serde=json))
    profiles = branches["orders-valid"].process(lambda: UpdateProfile(PROFILES_STORE), PROFILES_STORE,
                                                name="update-profile")
    profiles.to(PROFILES_TOPIC, key_serde=string, value_serde=json)
    profiles.to_database(profiles_sink(), name="profiles-to-database")
    lines = (branches["orders-valid"].map_values(delivery, name="delivery")
             .process_values(lambda: EncryptFields(LINE_FIELDS), name="encrypt-delivery")
             .flat_map_values(item_lines, name="item-lines"))
    lines.to(LINES_TOPIC, value_serde=json)
    lines.to(category_topic, key_serde=string, value_serde=json, name="lines-by-category")

    local_lines = (
        lines.join(users, lambda line, user: {**line, "user_region": user.region}, name="join-users")
        .select_key(lambda user, line: line["item"], name="by-item")
        .join(items, lambda line, item: {**line, "item_region": item.region}, name="lines-by-item")
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
