"""The pure steps of a migration (issue 18): copying records into N partitions in key order, re-sharding real
stores' changelogs (a windowed count, a stream-stream join's buffers, a foreign-key join's subscriptions) as a
2-partition app would have written them, and verifying the result (digest, placement)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from streaming import JoinWindows, Materialized, Serdes, Stores, StreamsBuilder, TimeWindows, Topology
from streaming.dsl.foreign_key_join import decode_subscription
from streaming.naming import changelog_topic
from streaming.processor import Processor, ProcessorContext
from streaming.processor import Record as ProcRecord
from streaming.runtime.partitioning import partition_for_key
from streaming.scaling import StoreKind, partition_key_function, store_layouts
from streaming.scaling.reshard import (
    Record,
    digest,
    interleave,
    misplaced,
    partition_targets,
    repartition,
    replicate_store,
    reshard_store,
)
from streaming.serdes import Serde
from streaming.testing import TopologyTestDriver

APP = "reshard"
String, Json, Bytes = Serdes.String(), Serdes.Json(), Serdes.Bytes()


# -- copy -------------------------------------------------------------------------------------------------------------
def test_interleave_takes_the_lowest_timestamp_next_and_keeps_each_partitions_order() -> None:
    p0 = [Record(b"a", b"1", 5), Record(b"a", b"2", 1), Record(b"a", b"3", 9)]  # out of order within the partition
    p1 = [Record(b"b", b"1", 3), Record(b"b", b"2", 7)]
    order = [(p, r.value) for p, r in interleave([p0, p1])]
    assert order == [(1, b"1"), (0, b"1"), (0, b"2"), (1, b"2"), (0, b"3")]


@pytest.mark.parametrize(("old", "new"), [(2, 4), (4, 2), (3, 8)])
def test_repartition_puts_each_key_where_murmur2_says_in_its_order_with_timestamps_and_headers(old: int,
                                                                                             new: int) -> None:
    rng = random.Random(old * 10 + new)
    keys = [f"user-{i}".encode() for i in range(300)]
    partitions: list[list[Record]] = [[] for _ in range(old)]
    sequence: dict[bytes, int] = {}
    for _ in range(3_000):
        key = rng.choice(keys)
        sequence[key] = sequence.get(key, 0) + 1
        partitions[partition_for_key(key, old)].append(
            Record(key, str(sequence[key]).encode(), rng.randint(0, 10_000), (("h", key),)))
    partitions[1].append(Record(None, b"no key", 50))
    copied = repartition(partitions, new)
    assert sum(map(len, copied)) == 3_001 and copied[1 % new].count(Record(None, b"no key", 50)) == 1
    seen: dict[bytes, list[Record]] = {}
    for partition, records in enumerate(copied):
        for record in records:
            if record.key is not None:
                assert partition_for_key(record.key, new) == partition
                seen.setdefault(record.key, []).append(record)
    originals = {key: [r for p in partitions for r in p if r.key == key] for key in seen}
    assert seen == originals  # every key's records, in their order, timestamps and headers kept


# -- re-shard ---------------------------------------------------------------------------------------------------------
def two_partition_changelogs(topology: Topology, pipe: dict[str, list[tuple[str, object, int]]],
                             value_serde: Serde[Any]) -> dict[str, dict[int, list[Record]]]:
    """Every logged store's changelog as a 2-partition app writes it: each record in the partition of its record
    key (the driver runs one partition; murmur2 of the record key says which of 2 a real task would hold)."""
    with TopologyTestDriver(topology, {"application.id": APP}) as driver:
        for topic, records in pipe.items():
            source = driver.create_input_topic(topic, String, value_serde)
            for key, value, ts in records:
                source.pipe_input(key, value, timestamp=ts)
        result = {}
        for store, layout in store_layouts(topology).items():
            record_key = partition_key_function(layout.kind)
            split: dict[int, list[Record]] = {0: [], 1: []}
            for r in driver.create_output_topic(changelog_topic(APP, store), Bytes, Bytes).read_records_to_list():
                split[partition_for_key(record_key(r.key), 2)].append(Record(r.key, r.value, r.timestamp or 0))
            result[store] = split
    return result


def live_rows(changelog: dict[int, list[Record]]) -> list[Record]:
    """The last record of every key that is not a tombstone."""
    latest: dict[bytes, Record] = {}
    for records in changelog.values():
        for r in records:
            assert r.key is not None
            latest[r.key] = r
    return [r for r in latest.values() if r.value is not None]


def test_windowed_counts_and_join_buffers_reshard_with_equal_digests_and_every_key_in_place() -> None:
    builder = StreamsBuilder()
    left = builder.stream("left", key_serde=String, value_serde=String)
    right = builder.stream("right", key_serde=String, value_serde=String)
    left.group_by_key().windowed_by(TimeWindows.of(10)).count(Materialized.as_("w").with_caching_disabled())
    left.left_join(right, lambda a, b: f"{a}+{b}", JoinWindows.of(5), store_name="j").to("out", value_serde=String)
    topology = builder.build()
    users = [f"user-{i}" for i in range(120)]
    pipe = {"left": [(u, "l", t) for t in (1, 12, 30) for u in users],
            "right": [(u, "r", 13) for u in users[::3]]}
    layouts = store_layouts(topology)
    assert {layouts[s].kind for s in layouts} == {StoreKind.WINDOW, StoreKind.JOIN_OUTER}
    for store, changelog in two_partition_changelogs(topology, pipe, String).items():
        kind = layouts[store].kind
        before = live_rows(changelog)
        for new in (4, 3, 1):
            after = reshard_store(changelog, kind, new)
            assert digest(row for rows in after.values() for row in rows) == digest(before), (store, new)
            assert misplaced(after, kind, new) == []
            assert all([r.key for r in rows] == sorted(r.key or b"" for r in rows) for rows in after.values())
            # each key keeps its last changelog record's value and timestamp (a restore reads the timestamp)
            assert {r for rows in after.values() for r in rows} == set(before)
        assert digest(before).keys > 0, store


def test_verification_finds_a_misplaced_key_and_a_key_in_two_partitions() -> None:
    key = b"user-7"
    home = partition_for_key(key, 4)
    other = (home + 1) % 4
    row = Record(key, b"1", 0)
    assert misplaced({home: [row]}, StoreKind.KEY_VALUE, 4) == []
    assert misplaced({other: [row]}, StoreKind.KEY_VALUE, 4) == [
        f"key b'user-7' is in partition {other}, its record key hashes to {home}"]
    assert misplaced({home: [row], other: [row]}, StoreKind.KEY_VALUE, 4)[0] == \
        f"key b'user-7' is in partitions {home} and {other}"
    with pytest.raises(ValueError, match="is in partitions 0 and 1: a store's key belongs to one task"):
        reshard_store({0: [Record(key, b"1", 0)], 1: [Record(key, b"2", 0)]}, StoreKind.KEY_VALUE, 4)


def test_tombstones_drop_keys_and_the_last_value_wins() -> None:
    changelog = {0: [Record(b"a", b"1", 0), Record(b"b", b"1", 0), Record(b"a", None, 1), Record(b"b", b"2", 2)]}
    after = reshard_store(changelog, StoreKind.KEY_VALUE, 2)
    assert [row for rows in after.values() for row in rows] == [Record(b"b", b"2", 2)]


def test_a_foreign_key_joins_subscriptions_follow_the_foreign_key_and_name_the_left_rows_new_partition() -> None:
    builder = StreamsBuilder()
    orders = builder.table("orders", key_serde=String, value_serde=Json, materialized=Materialized.as_("orders"))
    items = builder.table("items", key_serde=String, value_serde=Json, materialized=Materialized.as_("items"))
    orders.join(items, lambda o: o["item"], lambda o, i: [o, i], name="fk").to_stream().to("out")
    topology = builder.build()
    pipe = {"items": [(f"item-{i}", {"p": i}, 1) for i in range(10)],
            "orders": [(f"order-{i}", {"item": f"item-{i % 10}"}, 2) for i in range(80)]}
    changelog = two_partition_changelogs(topology, pipe, Json)["fk-subscription-store"]
    after = reshard_store(changelog, StoreKind.FK_SUBSCRIPTION, 4, left_partitions=3)
    assert misplaced(after, StoreKind.FK_SUBSCRIPTION, 4) == []
    rows = [row for rows in after.values() for row in rows]
    assert len(rows) == 80
    for key, value, _, _ in rows:
        _, partition, _, left_key = decode_subscription(value)
        assert left_key.startswith(b"order-") and key.endswith(left_key)
        assert partition == partition_for_key(left_key, 3)
    with pytest.raises(ValueError, match="left_partitions applies to a foreign-key subscription store"):
        reshard_store({0: [Record(b"k", b"v", 0)]}, StoreKind.KEY_VALUE, 2, left_partitions=2)


# -- replicate: a Processor API store keyed by something else than the record key ------------------------------------
class Deduplicate(Processor[str, Any]):
    """The orders pipeline's pattern: orders keyed (and partitioned) by user, seen order ids kept in a window store
    keyed by order id."""

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.seen = context.get_state_store("seen")

    def process(self, record: ProcRecord[str, Any]) -> None:
        order, ts = record.value["order"], record.timestamp
        if next(iter(self.seen.fetch(order, ts - 1_000, ts)), None) is None:
            self.seen.put(order, 1, ts)
        self.context.forward(record)


def test_replicating_a_store_keyed_by_order_id_keeps_every_id_where_its_users_records_go() -> None:
    topology = Topology().add_source("orders", "orders", key_serde=String, value_serde=Json)
    topology.add_processor("dedupe", Deduplicate, "orders")
    topology.add_state_store(Stores.window_store_builder(Stores.persistent_window_store("seen", 100_000, 100_000),
                                                         String, Serdes.Long()), "dedupe")
    assert store_layouts(topology)["seen"].processor_api == ("dedupe",)
    orders = {f"order-{i}": f"user-{i % 37}" for i in range(300)}
    changelog: dict[int, list[Record]] = {0: [], 1: []}
    with TopologyTestDriver(topology, {"application.id": APP}) as driver:
        source = driver.create_input_topic("orders", String, Json)
        for order, user in orders.items():
            source.pipe_input(user, {"order": order}, timestamp=10)
        for r in driver.create_output_topic(changelog_topic(APP, "seen"), Bytes, Bytes).read_records_to_list():
            order = partition_key_function(StoreKind.WINDOW)(r.key).decode()
            # a 2-partition app holds the id in the task of its order's user
            changelog[partition_for_key(orders[order].encode(), 2)].append(Record(r.key, r.value, 10))
    assert sum(map(len, changelog.values())) == len(orders)
    for new in (4, 3, 1):
        replicated = replicate_store(changelog, 2, new)
        held = {p: {partition_key_function(StoreKind.WINDOW)(r.key).decode() for r in rows if r.key}
                for p, rows in replicated.items()}
        for order, user in orders.items():  # the task a duplicate of the order goes to has its id
            assert order in held[partition_for_key(user.encode(), new)], (order, new)
        distinct = {row for rows in replicated.values() for row in rows}
        assert digest(distinct) == digest(live_rows(changelog))
    by_key = reshard_store(changelog, StoreKind.WINDOW, 4)  # what by-key would do: ids land by order id, not user
    placed = {partition_key_function(StoreKind.WINDOW)(r.key).decode(): p for p, rows in by_key.items() for r in rows
              if r.key}
    assert any(placed[order] != partition_for_key(user.encode(), 4) for order, user in orders.items())


def test_partition_targets_go_both_ways() -> None:
    assert partition_targets(4, 2) == {0: [0], 1: [1], 2: [0], 3: [1]}
    assert partition_targets(3, 2) == {0: [0, 1], 1: [0, 1], 2: [0, 1]}
    assert partition_targets(2, 6) == {0: [0, 2, 4], 1: [1, 3, 5]}
    rng = random.Random(7)
    for _ in range(2_000):
        key = rng.randbytes(8)
        for old, new in ((4, 2), (3, 2), (6, 4), (2, 6)):
            assert partition_for_key(key, new) in partition_targets(old, new)[partition_for_key(key, old)]
