"""The ``brook-kafka`` Spark data source against the embedded broker, in a real local SparkSession."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import Producer
from pyspark.errors import AnalysisException, PythonException
from pyspark.sql import DataFrame, SparkSession

from assets.resources import KafkaResource, kafka_source_options
from streaming.admin import create_topics

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def produce(bootstrap: str, topic: str, records: list[dict[str, Any]], **config: Any) -> None:
    """Produce ``records`` (dicts of partition, key, value, timestamp, headers) in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **config})
    for record in records:
        producer.produce(topic, key=record.get("key"), value=record.get("value"), partition=record["partition"],
                         timestamp=record.get("timestamp", 0), headers=record.get("headers"))
        producer.flush(10)  # in order, one batch each (small tests: speed does not matter)
    assert producer.flush(10) == 0


def read(spark: SparkSession, bootstrap: str, topics: str, **options: str) -> DataFrame:
    reader = spark.read.format("brook-kafka").options(**kafka_source_options(KafkaResource(bootstrap_servers=bootstrap)))
    return reader.option("subscribe", topics).options(**options).load()


def offsets_read(df: DataFrame) -> list[tuple[str, int, int]]:
    return sorted((r.topic, r.partition, r.offset) for r in df.select("topic", "partition", "offset").collect())


def test_reads_every_column_like_sparks_kafka_source(spark: SparkSession, bootstrap: str, unique_name: str) -> None:
    topic = unique_name
    create_topics(bootstrap, {topic: 2})
    produce(bootstrap, topic, [
        {"partition": 0, "key": b"k1", "value": b"v1", "timestamp": 1_700_000_000_123},
        {"partition": 0, "key": None, "value": b"no key", "timestamp": 1_700_000_000_124},
        {"partition": 1, "key": b"tomb", "value": None, "timestamp": 1_700_000_000_125,
         "headers": [("trace", b"\x00\x01"), ("empty", None), ("trace", b"again")]},
        {"partition": 1, "key": b"\xff\xfe", "value": b"\x00binary\x00", "timestamp": 5},
    ])

    df = read(spark, bootstrap, topic)
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>")
    rows = sorted(df.collect(), key=lambda r: (r.partition, r.offset))

    def as_tuple(row: Any) -> tuple[Any, ...]:
        headers = None if row.headers is None else [(h.key, h.value) for h in row.headers]
        key = None if row.key is None else bytes(row.key)
        value = None if row.value is None else bytes(row.value)
        return (key, value, row.topic, row.partition, row.offset, row.timestamp.astimezone(UTC),
                row.timestampType, headers)

    def ts(ms: int) -> datetime:
        return datetime.fromtimestamp(ms / 1000, UTC)

    assert [as_tuple(r) for r in rows] == [
        (b"k1", b"v1", topic, 0, 0, ts(1_700_000_000_123), 0, None),
        (None, b"no key", topic, 0, 1, ts(1_700_000_000_124), 0, None),
        (b"tomb", None, topic, 1, 0, ts(1_700_000_000_125), 0,
         [("trace", b"\x00\x01"), ("empty", None), ("trace", b"again")]),
        (b"\xff\xfe", b"\x00binary\x00", topic, 1, 1, ts(5), 0, None),
    ]


def test_a_schema_of_some_columns_builds_only_those(spark: SparkSession, bootstrap: str, unique_name: str) -> None:
    topic = unique_name
    create_topics(bootstrap, {topic: 1})
    produce(bootstrap, topic, [{"partition": 0, "key": b"k", "value": b"v", "timestamp": 7}])
    base = spark.read.format("brook-kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    df = base.schema("offset long, timestampType int, key binary").load()
    assert df.columns == ["offset", "timestampType", "key"]
    assert [tuple(r) for r in df.collect()] == [(0, 0, bytearray(b"k"))]
    for schema, message in (("offset int", "schema column 'offset' must be bigint, not int"),
                            ("key binary, size long", "schema column 'size' is not a column of brook-kafka")):
        with pytest.raises(AnalysisException, match=message):
            base.schema(schema).load().collect()


def test_offset_ranges_json_and_sentinels(spark: SparkSession, bootstrap: str, unique_name: str) -> None:
    topic = unique_name
    create_topics(bootstrap, {topic: 2})
    produce(bootstrap, topic, [{"partition": p, "value": b"x"} for p in (0, 1) for _ in range(5)])

    df = read(spark, bootstrap, topic, startingOffsets=json.dumps({topic: {"0": 2, "1": -2}}),
              endingOffsets=json.dumps({topic: {"0": 4}}))
    assert offsets_read(df) == [(topic, 0, 2), (topic, 0, 3)] + [(topic, 1, o) for o in range(5)]

    df = read(spark, bootstrap, topic, startingOffsets=json.dumps({topic: {"1": -1}}), endingOffsets="latest")
    assert offsets_read(df) == [(topic, 0, o) for o in range(5)]
    assert read(spark, bootstrap, topic, startingOffsets="latest").count() == 0
    assert read(spark, bootstrap, topic, endingOffsets="earliest").count() == 0

    # "latest" is resolved when a query is planned (each action, as with Spark's Kafka source);
    # explicit offsets pin a range.
    latest = read(spark, bootstrap, topic)
    pinned = read(spark, bootstrap, topic, endingOffsets=json.dumps({topic: {"0": 5, "1": 5}}))
    produce(bootstrap, topic, [{"partition": 0, "value": b"late"}])
    assert (latest.count(), pinned.count()) == (11, 10)


def test_ranges_end_at_offset_gaps_not_after_counting_records(
        spark: SparkSession, bootstrap: str, unique_name: str) -> None:
    """Transaction markers take offsets but are no records: the end is found by offset and EOF."""
    topic = unique_name
    create_topics(bootstrap, {topic: 1})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_name})
    producer.init_transactions(10)
    for batch in ([b"a", b"b"], [b"c", b"d"]):
        producer.begin_transaction()
        for value in batch:
            producer.produce(topic, value=value, partition=0)
        producer.commit_transaction(10)

    df = read(spark, bootstrap, topic)
    rows = sorted((r.offset, bytes(r.value)) for r in df.collect())
    assert [v for _, v in rows] == [b"a", b"b", b"c", b"d"]
    offsets = [o for o, _ in rows]
    assert offsets == [0, 1, 3, 4], "each commit marker takes an offset"
    assert [bytes(r.value) for r in read(spark, bootstrap, topic, endingOffsets=json.dumps({topic: {"0": 3}}))
            .collect()] == [b"a", b"b"]
    assert read(spark, bootstrap, topic, startingOffsets=json.dumps({topic: {"0": 2}})).count() == 2


def test_timestamp_ranges_use_record_timestamps_even_out_of_order(
        spark: SparkSession, bootstrap: str, unique_name: str) -> None:
    topic = unique_name
    create_topics(bootstrap, {topic: 2})
    # Partition 0's timestamps are out of order; partition 1 has none at or after 250.
    stamps = {0: [100, 300, 200, 400, 150, 500], 1: [10, 20]}
    produce(bootstrap, topic, [{"partition": p, "value": b"x", "timestamp": t} for p, ts in stamps.items() for t in ts])

    def offsets(**options: str) -> list[tuple[int, int]]:
        return [(p, o) for _, p, o in offsets_read(read(spark, bootstrap, topic, **options))]

    # Kafka's meaning: from the first record whose timestamp >= 250 (offset 1, ts 300) on, whatever
    # the later timestamps; partition 1 has no such record and gives nothing.
    assert offsets(startingTimestamp="250") == [(0, 1), (0, 2), (0, 3), (0, 4), (0, 5)]
    # ... up to (not including) the first record whose timestamp >= 450 (offset 5, ts 500).
    assert offsets(startingTimestamp="250", endingTimestamp="450") == [(0, 1), (0, 2), (0, 3), (0, 4)]
    assert offsets(endingTimestamp="150") == [(0, 0), (1, 0), (1, 1)]
    assert offsets(startingTimestamp="100000") == []
    assert offsets(startingTimestamp="0", endingOffsets=json.dumps({topic: {"0": 2}})) == [
        (0, 0), (0, 1), (1, 0), (1, 1)]


def test_many_topics_and_partitions_and_an_empty_topic(spark: SparkSession, bootstrap: str, unique_name: str) -> None:
    first, second, empty = f"{unique_name}-a", f"{unique_name}-b", f"{unique_name}-empty"
    create_topics(bootstrap, {first: 3, second: 2, empty: 2})
    produce(bootstrap, first, [{"partition": i % 3, "value": b"%d" % i} for i in range(30)])
    produce(bootstrap, second, [{"partition": i % 2, "value": b"%d" % i} for i in range(7)])

    df = read(spark, bootstrap, f"{first},{second},{empty}")
    assert df.rdd.getNumPartitions() == 7, "one Spark partition per Kafka partition"
    counts = {(r.topic, r.partition): r["count"] for r in df.groupBy("topic", "partition").count().collect()}
    assert counts == {(first, 0): 10, (first, 1): 10, (first, 2): 10, (second, 0): 4, (second, 1): 3}
    empty_df = read(spark, bootstrap, empty)
    assert empty_df.count() == 0
    assert empty_df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
                                "headers"]


def test_bad_reads_fail_with_the_name_of_what_is_wrong_and_no_secret(
        spark: SparkSession, bootstrap: str, unique_name: str) -> None:
    topic = unique_name
    create_topics(bootstrap, {topic: 1})
    produce(bootstrap, topic, [{"partition": 0, "value": b"x"}])
    secret = {"kafka.sasl.username": "svc", "kafka.sasl.password": "hunter2-secret"}

    cases = [
        ({"subscribe": f"{topic}-missing"}, f"['{topic}-missing'] do not exist"),
        ({"subscribe": topic, "endingOffsets": json.dumps({topic: {"0": 5}})}, f"offset 5 of {topic}[0] is outside"),
        ({"subscribe": topic, "startingOffsets": json.dumps({topic: {"3": 0}})}, "has no partition(s) [3]"),
        ({"subscribe": topic, "startingOffsets": "first"}, "option 'startingOffsets' must be"),
        ({"subscribe": topic, "maxOffsetsPerTrigger": "10"}, "unknown option 'maxoffsetspertrigger'"),
        ({"subscribe": topic, "kafka.no.such.setting": "1"}, 'No such configuration property: "no.such.setting"'),
    ]
    for options, message in cases:
        reader = spark.read.format("brook-kafka").option("kafka.bootstrap.servers", bootstrap).options(**secret)
        with pytest.raises((AnalysisException, PythonException)) as failure:
            reader.options(**options).load().collect()
        assert message.lower() in str(failure.value).lower(), str(failure.value)
        assert "hunter2" not in str(failure.value)

    df = spark.read.format("brook-kafka").option("kafka.bootstrap.servers", bootstrap).options(**secret) \
        .option("subscribe", topic).load()
    plans = df._jdf.queryExecution().toString()
    assert "brook-kafka" in plans and "hunter2" not in plans
