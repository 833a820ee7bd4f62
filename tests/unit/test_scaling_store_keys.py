"""Re-sharding's key mapping (issue 18): for every kind of store, the record key a changelog key belongs to.

Each test runs a real topology through the test driver (the real stores, serdes and change logging), reads every
store's changelog as bytes, and checks that the mapped keys are exactly the serialized keys of the records that
made them (the foreign-key subscriptions: the serialized foreign keys) — so each changelog record lands, after a
re-shard into N partitions, where murmur2 puts its record key. Then the new tasks' stream-time records, from the
real stream-time record codec.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from streaming import (
    BufferConfig,
    JoinWindows,
    Materialized,
    Serdes,
    SessionWindows,
    StreamsBuilder,
    Suppressed,
    TimeWindows,
    Topology,
)
from streaming.dsl.foreign_key_join import decode_subscription
from streaming.naming import changelog_topic
from streaming.runtime.partitioning import partition_for_key
from streaming.runtime.stream_time import decode_record, encode_record
from streaming.scaling import StoreKind, partition_key_function, store_layouts
from streaming.scaling.store_keys import subscription_with_left_partition
from streaming.scaling.stream_time import new_stream_time_records, old_stream_times
from streaming.testing import TopologyTestDriver

APP = "scaling-keys"
String, Json, Bytes = Serdes.String(), Serdes.Json(), Serdes.Bytes()
# Keys of several lengths (shorter and longer than the 8-16 byte suffixes), non-ASCII included.
KEYS = ["a", "bb", "user-0000000000042", "ümlaut-key", "k" * 40]


def uncached(name: str) -> Materialized:
    return Materialized.as_(name).with_caching_disabled()


def changelogs(driver: TopologyTestDriver, topology: Topology) -> dict[str, list[tuple[bytes, bytes | None]]]:
    """Every logged store's changelog records ``(key, value)``, as the real change logging wrote them."""
    return {store: [(r.key, r.value) for r in driver.create_output_topic(changelog_topic(APP, store), Bytes, Bytes)
                    .read_records_to_list()] for store in store_layouts(topology)}


def mapped(store: str, kind: StoreKind, records: Iterable[tuple[bytes, bytes | None]]) -> set[bytes]:
    function = partition_key_function(kind)
    result = {function(key) for key, _ in records}
    assert result, f"store {store} logged nothing"
    return result


def test_aggregations_windows_sessions_and_their_suppressions_map_to_the_input_key() -> None:
    builder = StreamsBuilder()
    stream = builder.stream("in", key_serde=String, value_serde=String)
    grouped = stream.group_by_key()
    grouped.count(uncached("counts"))
    grouped.windowed_by(TimeWindows.of(10)).count(uncached("windows")) \
        .suppress(Suppressed.until_window_closes().with_name("window-final")).to_stream().to("w-out")
    grouped.windowed_by(SessionWindows.with_inactivity_gap(5)).count(uncached("sessions")) \
        .suppress(Suppressed.until_window_closes().with_name("session-final")).to_stream().to("s-out")
    topology = builder.build()
    kinds = {name: layout.kind for name, layout in store_layouts(topology).items()}
    assert kinds == {"counts": StoreKind.KEY_VALUE, "windows": StoreKind.WINDOW, "sessions": StoreKind.SESSION,
                     "window-final-store": StoreKind.SUPPRESS_TIME_WINDOWED,
                     "session-final-store": StoreKind.SUPPRESS_SESSION_WINDOWED}
    with TopologyTestDriver(topology, {"application.id": APP}) as driver:
        source = driver.create_input_topic("in", String, String)
        for ts in (1, 3, 12, 40):
            for key in KEYS:
                source.pipe_input(key, "v", timestamp=ts)
        logged = changelogs(driver, topology)
    expected = {key.encode() for key in KEYS}
    for store, keys in logged.items():
        assert mapped(store, kinds[store], keys) == expected, store
    # the suffixes really are there: a window key is not its record key
    assert all(len(k) > 12 for k, _ in logged["windows"]) and not {k for k, _ in logged["windows"]} & expected


def test_a_stream_stream_outer_joins_buffers_map_to_the_join_key() -> None:
    builder = StreamsBuilder()
    left = builder.stream("left", key_serde=String, value_serde=String)
    right = builder.stream("right", key_serde=String, value_serde=String)
    left.outer_join(right, lambda a, b: f"{a}+{b}", JoinWindows.of(10)).to("out", value_serde=String)
    topology = builder.build()
    kinds = {name: layout.kind for name, layout in store_layouts(topology).items()}
    assert sorted(kinds.values()) == sorted([StoreKind.WINDOW, StoreKind.WINDOW, StoreKind.JOIN_OUTER])
    assert all(store_layouts(topology)[s].note == "a stream-stream join's buffer"
               for s, k in kinds.items() if k == StoreKind.WINDOW)
    with TopologyTestDriver(topology, {"application.id": APP}) as driver:
        lefts, rights = driver.create_input_topic("left", String, String), driver.create_input_topic("right", String,
                                                                                                     String)
        for i, key in enumerate(KEYS):
            lefts.pipe_input(key, "l", timestamp=100 + i)  # unmatched until the window closes: the outer store
            if i % 2:
                rights.pipe_input(key, "r", timestamp=100 + i)
        logged = changelogs(driver, topology)
    expected = {key.encode() for key in KEYS}
    for store, keys in logged.items():
        # the right buffer holds only the odd keys
        assert mapped(store, kinds[store], keys) <= expected and len(mapped(store, kinds[store], keys)) >= 2, store
    outer = next(s for s, k in kinds.items() if k == StoreKind.JOIN_OUTER)
    # every left record waited there (a match deletes it again: the tombstone has the same key)
    assert mapped(outer, StoreKind.JOIN_OUTER, logged[outer]) == expected


def test_a_time_limited_suppression_of_a_plain_table_maps_to_its_key() -> None:
    builder = StreamsBuilder()
    builder.table("in", key_serde=String, value_serde=Json, materialized=uncached("t")) \
        .suppress(Suppressed.until_time_limit(1_000, BufferConfig.unbounded()).with_name("limit")) \
        .to_stream().to("out", value_serde=Json)
    topology = builder.build()
    kinds = {name: layout.kind for name, layout in store_layouts(topology).items()}
    assert kinds == {"t": StoreKind.KEY_VALUE, "limit-store": StoreKind.SUPPRESS}
    with TopologyTestDriver(topology, {"application.id": APP}) as driver:
        source = driver.create_input_topic("in", String, Json)
        for key in KEYS:
            source.pipe_input(key, {"n": 1}, timestamp=5)
        logged = changelogs(driver, topology)
    for store, keys in logged.items():
        assert mapped(store, kinds[store], keys) == {key.encode() for key in KEYS}


def fk_topology() -> Topology:
    builder = StreamsBuilder()
    orders = builder.table("orders", key_serde=String, value_serde=Json, materialized=uncached("orders"))
    items = builder.table("items", key_serde=String, value_serde=Json, materialized=uncached("items"))
    orders.left_join(items, lambda order: order["item"], lambda order, item: [order, item],
                     materialized=uncached("lines")).to_stream().to("out")
    return builder.build()


def test_foreign_key_subscriptions_map_to_the_foreign_key_and_carry_the_left_partition() -> None:
    topology = fk_topology()
    layouts = store_layouts(topology)
    subscriptions = next(s for s, layout in layouts.items() if layout.kind == StoreKind.FK_SUBSCRIPTION)
    assert {s: layout.kind for s, layout in layouts.items() if s != subscriptions} == {
        "orders": StoreKind.KEY_VALUE, "items": StoreKind.KEY_VALUE, "lines": StoreKind.KEY_VALUE}
    assert layouts[subscriptions].subtopology == layouts["items"].subtopology != layouts["orders"].subtopology
    items = {f"item-{i}": {"price": i} for i in range(3)}
    orders = {key: {"item": f"item-{i % 3}"} for i, key in enumerate(KEYS)}
    with TopologyTestDriver(topology, {"application.id": APP}) as driver:
        for key, value in items.items():
            driver.create_input_topic("items", String, Json).pipe_input(key, value, timestamp=1)
        for key, value in orders.items():
            driver.create_input_topic("orders", String, Json).pipe_input(key, value, timestamp=2)
        logged = changelogs(driver, topology)
    assert mapped(subscriptions, StoreKind.FK_SUBSCRIPTION, logged[subscriptions]) == {k.encode() for k in items}
    for store in ("orders", "lines"):
        assert mapped(store, StoreKind.KEY_VALUE, logged[store]) == {k.encode() for k in KEYS}
    # each subscription names its left row's partition; re-sharding the left side to 4 rewrites it
    for key, value in logged[subscriptions]:
        assert value is not None
        instruction, partition, hash_, left_key = decode_subscription(value)
        assert partition == 0 and left_key.decode() in orders
        assert orders[left_key.decode()]["item"].encode() == partition_key_function(StoreKind.FK_SUBSCRIPTION)(key)
        rewritten = subscription_with_left_partition(value, partition_for_key(left_key, 4))
        assert decode_subscription(rewritten) == (instruction, partition_for_key(left_key, 4), hash_, left_key)


def test_a_processor_api_store_is_marked_and_unlogged_stores_are_not_resharded() -> None:
    from streaming import Stores
    topology = Topology().add_source("src", "in")
    topology.add_processor("p", lambda: None, "src")
    topology.add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store("kept")), "p")
    topology.add_state_store(Stores.key_value_store_builder(Stores.in_memory_key_value_store("lost"))
                             .with_logging_disabled(), "p")
    assert {s: (layout.kind, layout.processor_api) for s, layout in store_layouts(topology).items()} == {
        "kept": (StoreKind.KEY_VALUE, ("p",))}


def test_the_orders_pipelines_dedupe_and_profile_stores_are_marked_as_written_by_the_processor_api() -> None:
    """The dedupe store's keys are order ids, its records partitioned by user (the profiles': user ids): only the
    operator can say how each re-shards."""
    from apps.orders import topology as orders_topology
    layouts = store_layouts(orders_topology())
    assert (layouts["order-ids"].kind, layouts["order-ids"].processor_api) == (StoreKind.WINDOW, ("dedupe",))
    assert layouts["user-profiles"].processor_api == ("update-profile",)
    assert all(not layout.processor_api for name, layout in layouts.items() if name not in ("order-ids",
                                                                                          "user-profiles"))


@pytest.mark.parametrize(("kind", "key"), [(StoreKind.WINDOW, b"x" * 11), (StoreKind.SESSION, b"x" * 15),
                                           (StoreKind.JOIN_OUTER, b"x" * 8),
                                           (StoreKind.FK_SUBSCRIPTION, b"\x00\x00\x00\x09abc")])
def test_a_key_too_short_for_its_layout_is_an_error_naming_it(kind: StoreKind, key: bytes) -> None:
    with pytest.raises(ValueError, match="changelog key"):
        partition_key_function(kind)(key)


# -- stream time ----------------------------------------------------------------------------------------------------
def test_every_new_task_starts_from_the_highest_time_of_the_old_tasks() -> None:
    old: list[tuple[bytes, Any]] = [
        (b"1_0", encode_record({("in", 0): (100, 7)}, {"window-final-store": 90})),
        (b"1_1", encode_record({("in", 1): (250, 3)}, {"window-final-store": 240, "join": 10})),
        (b"1_0", encode_record({("in", 0): (180, 9)}, {"window-final-store": 170})),  # the latest of task 1_0
        (b"1_2", encode_record({("in", 2): (999, 1)})),
        (b"1_2", None),  # a tombstone forgets task 1_2
    ]
    topic_times, node_times = old_stream_times(old, "app-1-stream-time")
    assert (topic_times, node_times) == ({"in": 250}, {"window-final-store": 240, "join": 10})
    committed = {("in.v2", p): 10 * p for p in range(4)}
    records = new_stream_time_records(1, topic_times, node_times, {"in": "in.v2"}, committed, 4)
    assert sorted(records) == [0, 1, 2, 3]
    for p, (key, value) in records.items():
        assert key == f"1_{p}".encode()
        decoded = decode_record(value, "test")
        assert decoded.partitions == {("in.v2", p): (250, 10 * p)}
        assert decoded.observed == {"window-final-store": 240, "join": 10}
