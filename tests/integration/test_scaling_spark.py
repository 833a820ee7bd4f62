"""The Spark work of a migration (issue 18) on the embedded broker: a counting app (a count and a windowed count)
runs on 2 partitions; the dry run plans 2 -> 4; Spark copies the input and re-shards both changelogs into the new
generation, and the group's offsets are committed at the copied ends; then the same from 4 to 2 (generation 3), whose
plan sees generation 2 fully consumed. Each time: every input record is in the partition murmur2
gives its key, each key's records in their order with their timestamps and headers; every store key is in the
partition of its record key with its last value and timestamp; the re-shard's own verification agrees."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from assets.scaling.migrate import copy_topic, reshard_changelog
from assets.scaling.stages import commit_offsets
from streaming import KafkaStreams, Materialized, Serdes, StreamsBuilder, TimeWindows, Topology
from streaming.admin import create_topics
from streaming.runtime.partitioning import partition_for_key
from streaming.scaling import ScalingError, ScalingPlan, make_plan, partition_key_function
from streaming.testing.kafka import group_lag, produce, read_topic, wait_for

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.slow]
String, Bytes = Serdes.String(), Serdes.Bytes()


@dataclass
class Record:
    key: str | None
    value: str
    timestamp: int
    headers: list[tuple[str, bytes]]


def topology(words: str) -> Topology:
    builder = StreamsBuilder()
    grouped = builder.stream(words, key_serde=String, value_serde=String).group_by_key()
    grouped.count(Materialized.as_("counts"))
    grouped.windowed_by(TimeWindows.of(1_000)).count(Materialized.as_("per-second"))
    return builder.build()


@pytest.fixture
def counted(bootstrap: str, unique_name: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app run over 2,000 records of 300 keys (some with headers), every input committed, then stopped."""
    words = f"{unique_name}-words"
    create_topics(bootstrap, {words: 2})
    produce(bootstrap, words, [Record(f"key-{i * 7 % 300}", f"v{i}", 1_000 + i * 10,
                                      [("seq", str(i).encode())] if i % 3 == 0 else []) for i in range(2_000)],
            String, String)
    streams = KafkaStreams(topology(words), {"application.id": unique_name, "bootstrap.servers": bootstrap,
                                             "commit.interval.ms": 200,
                                             "state.dir": str(tmp_path_factory.mktemp("state"))})
    streams.start()
    try:
        wait_for(lambda: group_lag(bootstrap, unique_name, words, 2) == 0, 90, "the app to commit every input")
    finally:
        assert streams.close(30)
    yield words


def by_key(records: list, kind: str | None = None) -> dict[bytes, list[tuple[int, bytes, int, list]]]:
    """Per key (a changelog's: per record key), ``(partition, value, timestamp, headers)`` in offset order."""
    record_key = partition_key_function(kind) if kind else (lambda key: key)
    found: dict[bytes, list[tuple[int, bytes, int, list]]] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        found.setdefault(record_key(r.key), []).append((r.partition, r.value, r.timestamp, r.headers or []))
    return found


def migrate(spark: SparkSession, bootstrap: str, plan: ScalingPlan) -> None:
    """The plan's create, copy and re-shard stages, and the checks of what they wrote."""
    config = {"bootstrap.servers": bootstrap}
    n = plan.new_partitions
    create_topics(bootstrap, {t.new_physical: n for t in plan.topics if t.role != "stream-time"})
    for topic in plan.topics:
        if topic.role == "input":
            ends = copy_topic(spark, config, topic)
            # the group's offsets at the copied ends: nothing copied is processed again
            offsets = {(topic.new_physical, p): end for p, end in enumerate(ends)}
            assert commit_offsets(config, plan.application_id, offsets) == {
                f"{topic.new_physical}[{p}]": end for p, end in enumerate(ends)}
            old = by_key(read_topic(bootstrap, topic.physical, Bytes, Bytes, topic.partitions))
            new = by_key(read_topic(bootstrap, topic.new_physical, Bytes, Bytes, n))
            assert sum(ends) == topic.records == 2_000
            assert new.keys() == old.keys()
            for key, records in new.items():
                assert {p for p, *_ in records} == {partition_for_key(key, n)}
                assert [r[1:] for r in records] == [r[1:] for r in old[key]]  # order, timestamps, headers
    for store in plan.stores:
        topic = next(t for t in plan.topics if t.store == store.store)
        result = reshard_changelog(spark, config, store, topic)
        assert result.before == result.after and result.after.keys > 0
        old = by_key(read_topic(bootstrap, topic.physical, Bytes, Bytes, topic.partitions), store.kind)
        new = by_key(read_topic(bootstrap, topic.new_physical, Bytes, Bytes, n), store.kind)
        assert sum(result.ends) == sum(len(v) for v in new.values())
        assert new.keys() == old.keys()
        for record_key, records in new.items():
            assert {p for p, *_ in records} == {partition_for_key(record_key, n)}
        # the last changelog record of every store key, with its timestamp, is what the new changelog holds
        last_old = {r.key: (r.value, r.timestamp) for r in read_topic(bootstrap, topic.physical, Bytes, Bytes,
                                                                      topic.partitions)}
        last_new = {r.key: (r.value, r.timestamp) for r in read_topic(bootstrap, topic.new_physical, Bytes, Bytes,
                                                                      n)}
        assert last_new == {k: v for k, v in last_old.items() if v[0] is not None}


def test_a_counting_app_migrates_from_2_to_4_partitions_and_back_to_2(spark: SparkSession, bootstrap: str,
                                                                      unique_name: str, counted: str) -> None:
    words, app = counted, unique_name
    up = make_plan(topology(words), app, {"bootstrap.servers": bootstrap}, [words], 4)
    assert {s.store: s.kind for s in up.stores} == {"counts": "key-value", "per-second": "window"}
    migrate(spark, bootstrap, up)
    with pytest.raises(ScalingError, match=r"already holds records \(end offsets \{"):
        copy_topic(spark, {"bootstrap.servers": bootstrap}, next(t for t in up.topics if t.role == "input"))

    generations = {t.topic: t.new_generation for t in up.topics}
    down = make_plan(topology(words), app, {"bootstrap.servers": bootstrap}, [words], 2, generations=generations)
    assert (down.partitions, down.new_partitions) == (4, 2)
    assert next(t for t in down.topics if t.role == "input").undrained == 0  # committed at the copied ends
    assert {t.new_physical for t in down.topics if t.role != "stream-time"} == \
        {f"{words}.v3", f"{app}-counts-changelog.v3", f"{app}-per-second-changelog.v3"}
    migrate(spark, bootstrap, down)


def test_a_changelog_with_a_key_in_two_partitions_is_refused_and_nothing_is_written(spark: SparkSession,
                                                                                  bootstrap: str,
                                                                                  unique_name: str) -> None:
    from confluent_kafka import Producer

    from streaming.admin import watermarks
    from streaming.scaling.plan import StoreScaling, TopicScaling

    old, new = f"{unique_name}-counts-changelog", f"{unique_name}-counts-changelog.v2"
    create_topics(bootstrap, {old: 2, new: 4})
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, key in ((0, b"split"), (1, b"split"), (1, b"fine")):  # "split" is in both: the state was split
        producer.produce(old, b"1", key, partition=partition)
    assert producer.flush(30) == 0
    topic = TopicScaling(topic="counts-changelog", role="changelog", physical=old, generation=1, new_physical=new,
                         new_generation=2, partitions=2, new_partitions=4, earliest=[0, 0], end=[1, 2],
                         committed=[None, None], store="counts")
    store = StoreScaling("counts", "key-value", "counts-changelog", 0, 3)
    with pytest.raises(ScalingError, match=r"has 0 record\(s\) without a key and 1 key\(s\) in more than one partition"):
        reshard_changelog(spark, {"bootstrap.servers": bootstrap}, store, topic)
    ends = watermarks(bootstrap, [(new, p) for p in range(4)])
    assert [high for _, high in ends.values()] == [0, 0, 0, 0]


@pytest.mark.parametrize("new", [4, 3])
def test_a_replicated_store_holds_in_each_new_partition_the_entries_of_the_old_ones_feeding_it(
        spark: SparkSession, bootstrap: str, unique_name: str, new: int) -> None:
    from confluent_kafka import Producer

    from streaming.scaling.plan import StoreScaling, TopicScaling
    from streaming.scaling.reshard import Record as Entry
    from streaming.scaling.reshard import replicate_store

    old, target = f"{unique_name}-ids-changelog", f"{unique_name}-ids-changelog.v2"
    create_topics(bootstrap, {old: 2, target: new})
    changelog: dict[int, list[Entry]] = {0: [], 1: []}
    for partition, key, value in ((0, b"order-1", b"a"), (0, b"order-2", b"b"), (0, b"order-1", b"c"),
                                  (1, b"order-3", b"d"), (1, b"order-2", b"e"),  # order-2 live in both: 1's wins
                                  (1, b"order-4", b"f"), (1, b"order-4", None), (0, b"order-5", b"g")):
        changelog[partition].append(Entry(key, value, 100 + len(changelog[partition])))
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, entries in changelog.items():
        for entry in entries:
            producer.produce(old, entry.value, entry.key, partition=partition, timestamp=entry.timestamp)
    assert producer.flush(30) == 0
    topic = TopicScaling(topic="ids-changelog", role="changelog", physical=old, generation=1, new_physical=target,
                         new_generation=2, partitions=2, new_partitions=new, earliest=[0, 0],
                         end=[len(changelog[0]), len(changelog[1])], committed=[None, None], store="ids")
    store = StoreScaling("ids", "window", "ids-changelog", 0, 8, placement="replicate")
    result = reshard_changelog(spark, {"bootstrap.servers": bootstrap}, store, topic)
    result.release()
    expected = replicate_store(changelog, 2, new)
    found: dict[int, list[tuple[bytes, bytes, int]]] = {p: [] for p in range(new)}
    for record in read_topic(bootstrap, target, Bytes, Bytes, new):
        found[record.partition].append((record.key, record.value, record.timestamp))
    assert found == {p: [(e.key, e.value, e.timestamp) for e in entries] for p, entries in expected.items()}
    assert result.after == result.before and result.after.keys == sum(map(len, expected.values()))
    assert sum(result.ends) == result.after.keys
