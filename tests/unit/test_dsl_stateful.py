"""Grouped streams: count, reduce, aggregate, group_by repartitioning and Materialized, through the driver.

Results are checked against a plain-Python oracle on a few thousand seeded random records: in the
store, in the output topic (last value per key) and in the changelog, with caching on and off.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from streaming import Materialized, ProcessingError, Serdes, StreamsBuilder, TopologyError
from streaming.runtime.internal_topics import internal_topic_partitions
from streaming.testing import TopologyTestDriver
from streaming.testing.generators import REGIONS, orders

APP = "stateful-test"
CONFIG = {"application.id": APP}
CACHING = pytest.mark.parametrize("caching", [True, False], ids=["cached", "uncached"])
String, Json, Long = Serdes.String(), Serdes.Json(), Serdes.Long()


def store_options(name: str | None, caching: bool, store_type: str = "in_memory") -> Materialized:
    """Stores for the big oracle runs are in memory: the driver commits after every record, and a RocksDB
    commit flushes its memtable (~2 ms); RocksDB runs the same checks on fewer records."""
    materialized = (Materialized.as_(name) if name else Materialized()).with_store_type(store_type)
    return materialized if caching else materialized.with_caching_disabled()


def random_records(count: int, seed: int = 7) -> list[tuple[Any, Any]]:
    """Keys k00..k59 and values {"n", "region"}; about 2% None keys and 2% None values."""
    rng = random.Random(seed)
    records = []
    for _ in range(count):
        key = f"k{rng.randrange(60):02d}" if rng.random() > 0.02 else None
        value = {"n": rng.randrange(-50, 100), "region": rng.choice(REGIONS)} if rng.random() > 0.02 else None
        records.append((key, value))
    return records


def pipe(driver: TopologyTestDriver, topic: str, records: list[tuple[Any, Any]], key_serde: Any = String,
         value_serde: Any = Json) -> None:
    inp = driver.create_input_topic(topic, key_serde, value_serde)
    for index, (key, value) in enumerate(records):
        inp.pipe_input(key, value, timestamp=1_000 + index)


def stats_init() -> dict[str, Any]:
    return {"count": 0, "min": None, "max": None, "regions": []}


def stats_add(key: str, value: dict[str, Any], agg: dict[str, Any]) -> dict[str, Any]:
    n = value["n"]
    return {"count": agg["count"] + 1, "min": n if agg["min"] is None else min(agg["min"], n),
            "max": n if agg["max"] is None else max(agg["max"], n),
            "regions": sorted(set(agg["regions"]) | {value["region"]})}


# -- count, reduce, aggregate against the oracle ---------------------------------------------------------------

@CACHING
@pytest.mark.parametrize(("store_type", "count"), [("in_memory", 3_000), ("rocksdb", 300)])
def test_count_reduce_and_aggregate_match_a_python_oracle(caching: bool, store_type: str, count: int) -> None:
    records = random_records(count)
    builder = StreamsBuilder()
    stream = builder.stream("in", key_serde=String, value_serde=Json)
    grouped = stream.group_by_key()
    grouped.count(store_options("counts", caching, store_type)).to_stream().to("counts-out")
    (stream.map_values(lambda v: None if v is None else v["n"])
     .group_by_key(value_serde=Long)
     .reduce(lambda total, n: total + n, store_options("sums", caching, store_type)).to_stream().to("sums-out"))
    grouped.aggregate(stats_init, stats_add, store_options("stats", caching, store_type)).to_stream().to("stats-out")

    valid = [(k, v) for k, v in records if k is not None and v is not None]
    counts, sums, stats = Counter(k for k, _ in valid), Counter(), {}
    for key, value in valid:
        sums[key] += value["n"]
        stats[key] = stats_add(key, value, stats.get(key, stats_init()))

    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        pipe(driver, "in", records)
        outputs = {name: driver.create_output_topic(f"{name}-out", String, serde)
                   for name, serde in (("counts", Long), ("sums", Long), ("stats", Json))}
        changelogs = {name: driver.create_output_topic(f"{APP}-{name}-changelog", String, serde)
                      for name, serde in (("counts", Long), ("sums", Long), ("stats", Json))}
        for name, oracle in (("counts", counts), ("sums", sums), ("stats", stats)):
            assert driver.get_key_value_store(name).persistent is (store_type == "rocksdb")
            assert dict(driver.get_key_value_store(name).all()) == dict(oracle), name
            assert all(driver.get_key_value_store(name).get(k) == v for k, v in oracle.items()), name
            emitted = outputs[name].read_key_values()
            assert {k: v for k, v in emitted} == dict(oracle), name  # the last value per key
            assert len(emitted) == len(valid), name  # one update per aggregated record (a commit per record)
            assert changelogs[name].read_key_values_to_map() == dict(oracle), name
        skipped = len(records) - len(valid)
        assert skipped > 0
        assert driver.metrics()["dropped_records"] == 3 * skipped  # each aggregation skips each bad record


@CACHING
def test_aggregation_output_carries_the_record_timestamp(caching: bool) -> None:
    builder = StreamsBuilder()
    builder.stream("in").group_by_key().count(store_options("c", caching)).to_stream().to("out")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inp = driver.create_input_topic("in")
        inp.pipe_input("a", {}, timestamp=5_000)
        inp.pipe_input("a", {}, timestamp=7_000)
        out = driver.create_output_topic("out", String, Long)
        assert [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()] == [("a", 1, 5_000), ("a", 2, 7_000)]


@CACHING
def test_caching_collapses_updates_of_a_key_to_one_record_per_commit(caching: bool) -> None:
    builder = StreamsBuilder()
    (builder.stream("in").flat_map_values(lambda v: [v, v, v])  # three updates of the key per piped record
     .group_by_key().count(store_options("c", caching)).to_stream().to("out"))
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inp = driver.create_input_topic("in")
        for _ in range(4):
            inp.pipe_input("a", {})
        emitted = driver.create_output_topic("out", String, Long).read_values_to_list()
    assert emitted == ([3, 6, 9, 12] if caching else list(range(1, 13)))


def test_aggregator_returning_none_deletes_the_key_and_forwards_a_delete() -> None:
    builder = StreamsBuilder()
    (builder.stream("in", value_serde=Long).group_by_key()
     .aggregate(lambda: 0, lambda k, v, agg: None if agg + v == 0 else agg + v,
                Materialized.as_("totals").with_value_serde(Long).with_caching_disabled())
     .to_stream().to("out", value_serde=Long))
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inp = driver.create_input_topic("in", String, Long)
        for value in (5, 3, -8, 2):
            inp.pipe_input("a", value)
        assert driver.create_output_topic("out", String, Long).read_values_to_list() == [5, 8, None, 2]
        assert driver.get_key_value_store("totals").get("a") == 2


# -- group_by: repartitioning ---------------------------------------------------------------------------------

@CACHING
def test_group_by_repartitions_through_an_internal_topic_and_matches_the_oracle(caching: bool) -> None:
    records = orders(2_000, users=300, seed=3)
    builder = StreamsBuilder()
    by_region = builder.stream("orders", key_serde=String, value_serde=Json).group_by(
        lambda user, order: order["region"], key_serde=String, name="by-region")
    by_region.count(store_options("orders-per-region", caching)).to_stream().to("count-out")
    (by_region.aggregate(lambda: 0, lambda region, order, qty: qty + sum(i["qty"] for i in order["items"]),
                         store_options("qty-per-region", caching).with_value_serde(Long))
     .to_stream().to("qty-out"))
    topology = builder.build()
    assert len(topology.subtopologies()) == 2
    assert topology.internal_topics == {"by-region-repartition"}  # one topic for both aggregations

    counts: Counter[str] = Counter()
    qty: Counter[str] = Counter()
    for record in records:
        counts[record.value["region"]] += 1
        qty[record.value["region"]] += sum(i["qty"] for i in record.value["items"])

    with TopologyTestDriver(topology, CONFIG) as driver:
        driver.create_input_topic("orders", String, Json).pipe_record_list(records)
        assert f"{APP}-by-region-repartition" in driver.produced_topic_names
        assert dict(driver.get_key_value_store("orders-per-region").all()) == dict(counts)
        assert dict(driver.get_key_value_store("qty-per-region").all()) == dict(qty)
        assert driver.create_output_topic("count-out", String, Long).read_key_values_to_map() == dict(counts)
        assert driver.create_output_topic("qty-out", String, Long).read_key_values_to_map() == dict(qty)
        repartitioned = driver.create_output_topic(f"{APP}-by-region-repartition", String, Json).read_key_values()
        assert [k for k, _ in repartitioned] == [r.value["region"] for r in records]


def test_unnamed_group_by_names_nodes_and_topic_as_kafka_streams_does() -> None:
    builder = StreamsBuilder()
    builder.stream("in").group_by(lambda k, v: v["region"]).count().to_stream().to("out")
    topology = builder.build()
    nodes = [[n.name for n in s.nodes] for s in topology.subtopologies()]
    assert nodes == [
        ["KSTREAM-SOURCE-0000000000", "KSTREAM-KEY-SELECT-0000000001", "KSTREAM-FILTER-0000000005",
         "KSTREAM-SINK-0000000004"],
        ["KSTREAM-SOURCE-0000000006", "KSTREAM-AGGREGATE-0000000003", "KTABLE-TOSTREAM-0000000007",
         "KSTREAM-SINK-0000000008"]]
    assert topology.internal_topics == {"KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition"}
    assert set(topology.store_builders) == {"KSTREAM-AGGREGATE-STATE-STORE-0000000002"}
    with TopologyTestDriver(topology, CONFIG) as driver:
        inp = driver.create_input_topic("in")
        inp.pipe_input("u1", {"region": "eu"})
        inp.pipe_input("u2", {"region": "eu"})
        inp.pipe_input("u3", {"region": None})  # a None group key is skipped and counted
        assert driver.create_output_topic("out", String, Long).read_key_values() == [("eu", 1), ("eu", 2)]
        assert driver.metrics()["dropped_records"] == 1
        assert {f"{APP}-KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition",
                f"{APP}-KSTREAM-AGGREGATE-STATE-STORE-0000000002-changelog"} <= driver.produced_topic_names


def test_group_by_key_serde_that_cannot_take_the_selected_key_fails_naming_node_serde_and_key() -> None:
    builder = StreamsBuilder()
    builder.stream("in").group_by(lambda k, v: v["region"], key_serde=Long, name="by-region").count()
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inp = driver.create_input_topic("in")
        with pytest.raises(ProcessingError) as info:
            inp.pipe_input("u1", {"region": "eu"})
    message = str(info.value)
    assert "group_by 'by-region'" in message and "Serdes.Long()" in message and "'eu'" in message
    assert (info.value.topic, info.value.partition, info.value.offset) == ("in", 0, 0)


def test_group_by_with_the_default_key_serde_and_a_non_string_key_fails_on_the_first_record() -> None:
    builder = StreamsBuilder()
    builder.stream("in").group_by(lambda k, v: v["n"]).count()  # default.key.serde is String
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        with pytest.raises(ProcessingError, match=r"group_by 'KSTREAM-KEY-SELECT-0000000001': key serde "
                                                  r"Serdes\.String\(\) cannot serialize the selected key 5"):
            driver.create_input_topic("in").pipe_input("u1", {"n": 5})


def test_a_later_key_the_serde_cannot_take_fails_in_the_repartition_sink_naming_serde_and_key() -> None:
    builder = StreamsBuilder()
    builder.stream("in").group_by(lambda k, v: v["x"], name="by-x").count()
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inp = driver.create_input_topic("in")
        inp.pipe_input("u1", {"x": "fine"})
        with pytest.raises(ProcessingError) as info:
            inp.pipe_input("u2", {"x": 7})
    message = str(info.value)
    assert "sink 'by-x-repartition-sink' cannot serialize the key 7 with key serde Serdes.String()" in message
    assert f"topic '{APP}-by-x-repartition'" in message and "repartition topic" in message
    assert info.value.offset == 1


def test_select_key_then_group_by_key_repartitions_but_map_values_does_not() -> None:
    builder = StreamsBuilder()
    stream = builder.stream("in")
    stream.select_key(lambda k, v: v["region"]).group_by_key().count(materialized="by-region").to_stream().to("a")
    stream.map_values(lambda v: v).group_by_key().count(materialized="by-user").to_stream().to("b")
    topology = builder.build()
    assert topology.internal_topics == {"by-region-repartition"}
    assert len(topology.subtopologies()) == 2
    with TopologyTestDriver(topology, CONFIG) as driver:
        inp = driver.create_input_topic("in")
        for user, region in [("u1", "eu"), ("u2", "eu"), ("u1", "us")]:
            inp.pipe_input(user, {"region": region})
        assert driver.create_output_topic("a", String, Long).read_key_values_to_map() == {"eu": 2, "us": 1}
        assert driver.create_output_topic("b", String, Long).read_key_values_to_map() == {"u1": 2, "u2": 1}


def test_repartition_writes_through_a_named_internal_topic_with_the_partitioner() -> None:
    calls: list[tuple[str, Any, int]] = []

    def partitioner(topic: str, key: Any, value: Any, partitions: int) -> int:
        calls.append((topic, key, partitions))
        return 0

    builder = StreamsBuilder()
    (builder.stream("in").select_key(lambda k, v: v["region"])
     .repartition(name="rekeyed", partitioner=partitioner).to("out"))
    topology = builder.build()
    assert [[n.name for n in s.nodes] for s in topology.subtopologies()][1] == [
        "rekeyed-repartition-source", "KSTREAM-SINK-0000000005"]
    with TopologyTestDriver(topology, CONFIG) as driver:
        inp = driver.create_input_topic("in")
        inp.pipe_input("u1", {"region": "eu"})
        inp.pipe_input("u2", {"region": None})  # no key, no partition: skipped and counted
        assert driver.create_output_topic("out").read_key_values() == [("eu", {"region": "eu"})]
        assert driver.metrics()["dropped_records"] == 1
    assert calls == [(f"{APP}-rekeyed-repartition", "eu", 1)]


def test_repartition_topics_and_changelogs_are_sized_by_their_writers() -> None:
    builder = StreamsBuilder()
    builder.stream("orders").group_by(lambda k, v: v["region"], name="by-region").count(materialized="counts")
    builder.stream("clicks").group_by_key().count(materialized="clicks-per-user")
    topology = builder.build().bind(APP)
    sizes = internal_topic_partitions(topology, APP, {"orders": 6, "clicks": 3})
    assert sizes == {f"{APP}-by-region-repartition": 6, f"{APP}-counts-changelog": 6,
                     f"{APP}-clicks-per-user-changelog": 3, f"{APP}-1-stream-time": 6, f"{APP}-2-stream-time": 3}


def test_each_aggregation_of_an_unnamed_grouping_shares_one_repartition_topic() -> None:
    builder = StreamsBuilder()
    grouped = builder.stream("in").group_by(lambda k, v: v["region"])
    grouped.count(materialized="c1")
    grouped.count(materialized="c2")
    assert builder.build().internal_topics == {"c1-repartition"}


# -- stores: names, options -------------------------------------------------------------------------------------

def test_a_store_name_used_twice_fails_at_build_time() -> None:
    builder = StreamsBuilder()
    grouped = builder.stream("in").group_by_key()
    grouped.count(materialized="counts")
    with pytest.raises(TopologyError, match="state store 'counts' is already added"):
        grouped.reduce(lambda a, b: b, materialized=Materialized.as_("counts"))
    with pytest.raises(TopologyError, match="state store 'counts' is already added"):
        builder.table("t", materialized="counts")
    with pytest.raises(TopologyError, match="state store 'counts' is already added"):
        builder.global_table("g", materialized="counts")


def test_unnamed_stores_get_generated_names_and_changelogs() -> None:
    builder = StreamsBuilder()
    grouped = builder.stream("in").group_by_key()
    grouped.count().to_stream().to("out")
    grouped.reduce(lambda a, b: b)
    topology = builder.build()
    assert list(topology.store_builders) == ["KSTREAM-AGGREGATE-STATE-STORE-0000000001",
                                             "KSTREAM-REDUCE-STATE-STORE-0000000005"]
    assert [n.name for n in topology.subtopologies()[0].nodes][:2] == ["KSTREAM-SOURCE-0000000000",
                                                                        "KSTREAM-AGGREGATE-0000000002"]
    with TopologyTestDriver(topology, CONFIG) as driver:
        driver.create_input_topic("in").pipe_input("a", {"x": 1})
        assert {f"{APP}-KSTREAM-AGGREGATE-STATE-STORE-0000000001-changelog",
                f"{APP}-KSTREAM-REDUCE-STATE-STORE-0000000005-changelog"} <= driver.produced_topic_names


def test_materialized_defaults_are_kafka_streams_ones() -> None:
    builder = StreamsBuilder()
    builder.stream("in").group_by_key().count(materialized="c")
    store = builder.build().store_builders["c"]
    assert store.logging_enabled and store.caching_enabled and store.supplier.persistent
    assert isinstance(store.value_serde, Serdes.Long)


def test_materialized_options_reach_the_store() -> None:
    builder = StreamsBuilder()
    grouped = builder.stream("in").group_by_key()
    grouped.count(Materialized.as_("mem").with_store_type("in_memory").with_logging_disabled()
                  .with_caching_disabled())
    grouped.count(Materialized.as_("json").with_value_serde(Json).with_key_serde(String)
                  .with_logging_enabled({"retention.ms": "1000"}))
    topology = builder.build()
    mem, json = topology.store_builders["mem"], topology.store_builders["json"]
    assert not mem.supplier.persistent and not mem.logging_enabled and not mem.caching_enabled
    assert json.log_config == {"retention.ms": "1000"} and isinstance(json.value_serde, Serdes.Json)
    with TopologyTestDriver(topology, CONFIG) as driver:
        driver.create_input_topic("in").pipe_input("a", {})
        assert driver.get_key_value_store("mem").persistent is False
        assert driver.get_key_value_store("json").persistent is True
        assert f"{APP}-mem-changelog" not in driver.produced_topic_names
        assert driver.create_output_topic(f"{APP}-json-changelog", String, Json).read_key_values() == [("a", 1)]


def test_materialized_with_methods_return_new_objects() -> None:
    base = Materialized.as_("s")
    changed = base.with_caching_disabled().with_store_type("in_memory")
    assert base.caching_enabled and base.store_type == "rocksdb"
    assert not changed.caching_enabled and changed.store_type == "in_memory" and changed.store_name == "s"
    assert Materialized.with_(String, Long).key_serde is String


@pytest.mark.parametrize("bad", [lambda: Materialized().with_store_type("lmdb"), lambda: Materialized.as_("no spaces"),
                                 lambda: Materialized.as_("")])
def test_bad_materialized_settings_fail_clearly(bad: Any) -> None:
    with pytest.raises(TopologyError):
        bad()


def test_materialized_of_a_wrong_type_fails_clearly() -> None:
    with pytest.raises(TopologyError, match="materialized must be a store name or a Materialized"):
        StreamsBuilder().stream("in").group_by_key().count(materialized=42)  # type: ignore[arg-type]


def test_a_supplier_picks_the_store_implementation() -> None:
    from streaming import Stores
    builder = StreamsBuilder()
    builder.stream("in").group_by_key().count(Materialized.as_(Stores.in_memory_key_value_store("mem")))
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        driver.create_input_topic("in").pipe_input("a", {})
        assert driver.get_key_value_store("mem").get("a") == 1
        assert driver.get_key_value_store("mem").persistent is False


def test_a_stream_as_a_table_via_to_table() -> None:
    builder = StreamsBuilder()
    builder.stream("in").to_table(Materialized.as_("latest").with_caching_disabled()).to_stream().to("out")
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inp = driver.create_input_topic("in")
        for key, value in [("a", 1), ("b", 2), ("a", None), ("c", None), ("b", 3)]:
            inp.pipe_input(key, value)
        assert driver.create_output_topic("out").read_key_values() == [("a", 1), ("b", 2), ("a", None), ("b", 3)]
        assert dict(driver.get_key_value_store("latest").all()) == {"b": 3}


def test_errors_in_an_aggregator_name_the_record() -> None:
    builder = StreamsBuilder()
    builder.stream("in").group_by_key().aggregate(lambda: 0, lambda k, v, agg: agg + v["missing"])
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        with pytest.raises(ProcessingError, match="KeyError.*topic=in, partition=0, offset=0"):
            driver.create_input_topic("in").pipe_input("a", {})



def test_design_example_stateful_part_verbatim() -> None:
    """The design brief's example, but for the window imports."""
    from streaming import KafkaStreams

    builder = StreamsBuilder()
    orders = builder.stream("orders", key_serde=Serdes.String(), value_serde=Serdes.Json())
    orders.filter(lambda k, v: v["amount"] > 10).map_values(lambda v: {**v, "big": True}).to("big-orders")
    counts = orders.group_by_key().count(materialized="order-counts")
    counts.to_stream().to("order-counts-out", value_serde=Serdes.Long())
    topology = builder.build()
    assert "Processor: KSTREAM-AGGREGATE-0000000004 (stores: [order-counts])" in str(topology.describe())

    with TopologyTestDriver(topology, {"application.id": "demo"}) as driver:
        inp = driver.create_input_topic("orders", Serdes.String(), Serdes.Json())
        out = driver.create_output_topic("big-orders", Serdes.String(), Serdes.Json())
        inp.pipe_input("u1", {"amount": 12}, timestamp=1_000)
        assert out.read_key_value() == ("u1", {"amount": 12, "big": True})
        assert driver.get_key_value_store("order-counts").get("u1") == 1
        counts_out = driver.create_output_topic("order-counts-out", Serdes.String(), Serdes.Long())
        assert counts_out.read_key_value() == ("u1", 1)

    app = KafkaStreams(topology, {"application.id": "demo", "bootstrap.servers": "127.0.0.1:9092"})
    assert app.close()


# -- timestamps and headers of aggregate results (issue 6, items 5 and 6) ---------------------------------------

def out_of_order(count: int, seed: int) -> list[tuple[str, int, int]]:
    """(key, value, timestamp) over 40 keys; timestamps jump back by up to 10 s a third of the time."""
    rng = random.Random(seed)
    records, clock = [], 1_000_000
    for _ in range(count):
        clock += rng.randrange(0, 1_000)
        timestamp = clock - rng.randrange(0, 10_000) if rng.random() < 0.33 else clock
        records.append((f"k{rng.randrange(40):02d}", rng.randrange(1, 100), timestamp))
    return records


@CACHING
def test_stream_aggregate_timestamps_never_go_back_in_time(caching: bool) -> None:
    """Kafka Streams emits max(record timestamp, the aggregate's previous timestamp) for count, reduce and
    aggregate; the changelog records carry the same timestamp, and it survives in the store."""
    records = out_of_order(3_000, seed=11)
    builder = StreamsBuilder()
    grouped = builder.stream("in", key_serde=String, value_serde=Long).group_by_key()
    grouped.count(materialized=store_options("counts", caching)).to_stream().to("count-out", value_serde=Long)
    grouped.reduce(lambda a, b: a + b, materialized=store_options("sums", caching)).to_stream().to(
        "sum-out", value_serde=Long)
    grouped.aggregate(lambda: 0, lambda k, v, agg: max(agg, v),
                      materialized=store_options("maxes", caching).with_value_serde(Long)).to_stream().to(
        "max-out", value_serde=Long)
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inp = driver.create_input_topic("in", String, Long)
        expected: list[tuple[str, int]] = []
        latest: dict[str, int] = {}
        for key, value, timestamp in records:
            inp.pipe_input(key, value, timestamp=timestamp)
            latest[key] = max(latest.get(key, timestamp), timestamp)
            expected.append((key, latest[key]))
        for name in ("count", "sum", "max"):
            out = driver.create_output_topic(f"{name}-out", String, Long).read_records_to_list()
            assert [(r.key, r.timestamp) for r in out] == expected, name
        for store in ("counts", "sums", "maxes"):
            changelog = driver.create_output_topic(f"{APP}-{store}-changelog", String, Long).read_records_to_list()
            assert [(r.key, r.timestamp) for r in changelog] == expected, store
            kv = driver.get_timestamped_key_value_store(store)
            assert {k: kv.get_with_timestamp(k).timestamp for k in latest} == latest
        assert driver.get_key_value_store("counts").get("k00") == sum(1 for k, _, _ in records if k == "k00")


@CACHING
def test_table_aggregate_timestamps_never_go_back_in_time(caching: bool) -> None:
    """KTable group_by count/reduce: the group's result carries max(update timestamp, the group's previous)."""
    rng = random.Random(5)
    updates = [(f"u{rng.randrange(30):02d}", rng.choice(REGIONS), ts) for _, _, ts in out_of_order(2_000, seed=3)]
    builder = StreamsBuilder()
    (builder.table("users", key_serde=String, value_serde=String, materialized=store_options("users", caching))
     .group_by(lambda user, region: (region, user), key_serde=String, value_serde=String)
     .count(materialized=store_options("per-region", caching)).to_stream().to("out", value_serde=Long))
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inp = driver.create_input_topic("users", String, String)
        out = driver.create_output_topic("out", String, Long)
        region_time: dict[str, int] = {}
        current: dict[str, str] = {}
        for user, region, timestamp in updates:
            inp.pipe_input(user, region, timestamp=timestamp)
            touched = {region, current.get(user, region)}
            current[user] = region
            for record in out.read_records_to_list():
                assert record.key in touched
                region_time[record.key] = max(region_time.get(record.key, timestamp), timestamp)
                assert record.timestamp == region_time[record.key], (record, timestamp)
        assert len(region_time) == len(REGIONS)


def test_table_source_stores_each_update_with_its_own_timestamp() -> None:
    builder = StreamsBuilder()
    builder.table("t", key_serde=String, value_serde=Long, materialized="t").to_stream().to("out", value_serde=Long)
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inp = driver.create_input_topic("t", String, Long)
        inp.pipe_input("a", 1, timestamp=100)
        inp.pipe_input("a", 2, timestamp=50)  # a table takes the update as it comes, as Kafka Streams' KTableSource
        out = driver.create_output_topic("out", String, Long).read_records_to_list()
        assert [(r.value, r.timestamp) for r in out] == [(1, 100), (2, 50)]
        assert driver.get_timestamped_key_value_store("t").get_with_timestamp("a") == (2, 50)


@CACHING
def test_aggregations_forward_the_headers_of_the_record_that_made_the_result(caching: bool) -> None:
    """With caching on, the cache keeps each entry's headers and the flush forwards them (as without)."""
    builder = StreamsBuilder()
    builder.stream("in", key_serde=String, value_serde=Long).group_by_key().count(
        materialized=store_options("counts", caching)).to_stream().to("out", value_serde=Long)
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        inp = driver.create_input_topic("in", String, Long)
        inp.pipe_input("a", 1, timestamp=1, headers=[("trace", b"t-1")])
        inp.pipe_input("a", 1, timestamp=2, headers=[("trace", b"t-2"), ("tenant", b"x")])
        inp.pipe_input("b", 1, timestamp=3)
        out = driver.create_output_topic("out", String, Long).read_records_to_list()
        assert [(r.key, r.value, r.headers) for r in out] == [
            ("a", 1, [("trace", b"t-1")]), ("a", 2, [("trace", b"t-2"), ("tenant", b"x")]), ("b", 1, [])]


def test_headers_survive_a_cache_eviction() -> None:
    """A tiny cache budget evicts entries while records are processed (one input fans out to 50 keys
    through a repartition topic before the driver commits): the evicted results keep their headers."""
    builder = StreamsBuilder()
    (builder.stream("in", key_serde=String, value_serde=Long)
     .flat_map(lambda k, v: [(f"{k}-{i:02d}", v) for i in range(50)])
     .group_by_key(key_serde=String, value_serde=Long)
     .count(materialized=store_options("counts", True)).to_stream().to("out", value_serde=Long))
    with TopologyTestDriver(builder.build(), {**CONFIG, "statestore.cache.max.bytes": 2_000}) as driver:
        inp = driver.create_input_topic("in", String, Long)
        inp.pipe_input("a", 1, timestamp=1, headers=[("batch", b"first")])
        inp.pipe_input("b", 1, timestamp=2, headers=[("batch", b"second")])
        out = driver.create_output_topic("out", String, Long).read_records_to_list()
        assert len(out) == 100
        assert all(r.headers == [("batch", b"first" if r.key.startswith("a-") else b"second")] for r in out)
