"""The stateful DSL on the embedded broker: group_by + count through repartition topics, and global tables."""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from streaming import KafkaStreams, Serdes, StreamsBuilder
from streaming.admin import create_topics, partition_counts
from streaming.processor import Processor, Record
from streaming.runtime.kafka_streams import State
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import produce, read_topic, wait_for

pytestmark = pytest.mark.integration
String, Json, Long = Serdes.String(), Serdes.Json(), Serdes.Long()


def config(bootstrap: str, app_id: str, state_dir: Path) -> dict[str, Any]:
    return {"application.id": app_id, "bootstrap.servers": bootstrap, "commit.interval.ms": 300,
            "state.dir": str(state_dir)}


def last_values(bootstrap: str, topic: str, partitions: int) -> dict[Any, Any]:
    return {r.key: r.value for r in sorted(read_topic(bootstrap, topic, String, Long, partitions),
                                             key=lambda r: (r.partition, r.offset))}


def test_group_by_count_over_two_topics_through_repartition_topics(bootstrap: str, unique_name: str,
                                                                   tmp_path: Path) -> None:
    clicks, views = f"{unique_name}-clicks", f"{unique_name}-views"
    page_counts, user_counts = f"{unique_name}-page-counts", f"{unique_name}-user-counts"
    create_topics(bootstrap, {clicks: 3, views: 2, page_counts: 3, user_counts: 2})
    rng = random.Random(5)
    click_records = [GeneratedRecord(f"user-{rng.randrange(40)}", {"page": f"/p{rng.randrange(25)}"},
                                     1_700_000_000_000 + i) for i in range(3_000)]
    view_records = [GeneratedRecord(f"session-{i}", {"user": f"user-{rng.randrange(40)}"}, 1_700_000_000_000 + i)
                    for i in range(2_000)]
    produce(bootstrap, clicks, click_records, String, Json)
    produce(bootstrap, views, view_records, String, Json)

    builder = StreamsBuilder()
    (builder.stream(clicks, key_serde=String, value_serde=Json)
     .group_by(lambda user, click: click["page"], key_serde=String, name="by-page")
     .count(materialized="clicks-per-page").to_stream().to(page_counts))
    (builder.stream(views, key_serde=String, value_serde=Json)
     .group_by(lambda session, view: view["user"])  # unnamed: topic and store names are generated
     .count().to_stream().to(user_counts))
    topology = builder.build()
    generated_store = next(s for s in topology.store_builders if s.startswith("KSTREAM-AGGREGATE-STATE-STORE-"))

    expected_pages = Counter(r.value["page"] for r in click_records)
    expected_users = Counter(r.value["user"] for r in view_records)
    app = KafkaStreams(topology, config(bootstrap, unique_name, tmp_path))
    app.start()
    try:
        wait_for(lambda: last_values(bootstrap, page_counts, 3) == expected_pages
                 and last_values(bootstrap, user_counts, 2) == expected_users, 90, "the final counts")
        assert app.state is State.RUNNING
        assert len(app.metrics()["tasks"]) == 3 + 3 + 2 + 2  # four sub-topologies, one task per partition
    finally:
        assert app.close(30)
    assert app.exception is None

    internal = {
        f"{unique_name}-by-page-repartition": 3,  # sized by the sub-topology that writes it (clicks: 3)
        f"{unique_name}-clicks-per-page-changelog": 3,
        f"{unique_name}-{generated_store}-repartition": 2,  # views: 2
        f"{unique_name}-{generated_store}-changelog": 2,
    }
    assert partition_counts(bootstrap, internal) == internal
    repartitioned = read_topic(bootstrap, f"{unique_name}-by-page-repartition", String, Json, 3)
    assert len(repartitioned) == len(click_records)
    assert all(len({r.partition for r in repartitioned if r.key == page}) == 1 for page in expected_pages)
    changelog = read_topic(bootstrap, f"{unique_name}-clicks-per-page-changelog", String, Long, 3)
    assert {r.key: r.value for r in sorted(changelog, key=lambda r: r.offset)} == expected_pages


class Enrich(Processor):
    def process(self, record: Record) -> None:
        user = self.context.get_state_store("users").get(record.key)
        self.context.forward(record.with_value({**record.value, "region": user and user["region"]}))


def test_global_table_is_complete_before_processing_and_then_follows_its_topic(bootstrap: str, unique_name: str,
                                                                                tmp_path: Path) -> None:
    users, orders, enriched = f"{unique_name}-users", f"{unique_name}-orders", f"{unique_name}-enriched"
    create_topics(bootstrap, {users: 2, orders: 3, enriched: 3})
    user_records = [GeneratedRecord(f"user-{i}", {"region": ["eu", "us"][i % 2]}, 1_000) for i in range(200)]
    order_records = [GeneratedRecord(f"user-{i % 200}", {"id": i}, 2_000 + i) for i in range(600)]
    produce(bootstrap, users, user_records, String, Json)
    produce(bootstrap, orders, order_records, String, Json)

    builder = StreamsBuilder()
    builder.global_table(users, key_serde=String, value_serde=Json, materialized="users")
    builder.stream(orders, key_serde=String, value_serde=Json).process(Enrich).to(enriched)
    app = KafkaStreams(builder.build(), config(bootstrap, unique_name, tmp_path))
    app.start()  # returns once the global store holds both partitions of the users topic
    try:
        wait_for(lambda: len(read_topic(bootstrap, enriched, String, Json, 3)) >= 600, 60, "the enriched orders")
        output = read_topic(bootstrap, enriched, String, Json, 3)
        # Every order saw its user, whichever partition the user is in: the store is complete and global.
        assert sorted(r.value["id"] for r in output) == list(range(600))
        assert all(r.value["region"] == ["eu", "us"][int(r.key.split("-")[1]) % 2] for r in output)

        produce(bootstrap, users, [GeneratedRecord("user-7", {"region": "apac"}, 3_000)], String, Json)
        probes = iter(range(600, 10_000))

        def follows() -> bool:
            produce(bootstrap, orders, [GeneratedRecord("user-7", {"id": next(probes)}, 4_000)], String, Json)
            return any(r.value["region"] == "apac" for r in read_topic(bootstrap, enriched, String, Json, 3))
        wait_for(follows, 60, "an order enriched with the updated user")
        assert app.state is State.RUNNING
    finally:
        assert app.close(30)
    assert app.exception is None
    assert os.path.exists(tmp_path / unique_name / "global" / ".checkpoint")  # a clean close: resume next time


def test_start_fails_clearly_for_a_missing_global_topic_or_a_global_only_topology(bootstrap: str, unique_name: str,
                                                                                   tmp_path: Path) -> None:
    from streaming import StreamsError
    from streaming.errors import MissingSourceTopicError

    create_topics(bootstrap, {f"{unique_name}-in": 1, f"{unique_name}-out": 1, f"{unique_name}-items": 1})
    builder = StreamsBuilder()
    builder.global_table(f"{unique_name}-nope")
    builder.stream(f"{unique_name}-in").to(f"{unique_name}-out")
    app = KafkaStreams(builder.build(), config(bootstrap, unique_name, tmp_path))
    with pytest.raises(MissingSourceTopicError, match=f"global table topics \\['{unique_name}-nope'\\]"):
        app.start()
    assert app.close(10)

    builder = StreamsBuilder()
    builder.global_table(f"{unique_name}-items")
    app = KafkaStreams(builder.build(), config(bootstrap, f"{unique_name}-g", tmp_path))
    with pytest.raises(StreamsError, match="only global tables"):
        app.start()
    assert app.close(10)


def test_aggregate_timestamps_survive_a_restore_and_a_stale_checkpoint_fails_loudly(
        bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    """Issue 6, items 5 and the restore gap: a restored aggregation keeps its timestamps (an out-of-order
    record after the restore still gets the newer timestamp), and a checkpoint claiming changelog offsets
    the changelog does not have fails the start, naming the changelog, instead of silently skipping."""
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: 2, sink: 2})
    builder = StreamsBuilder()
    builder.stream(source, key_serde=String, value_serde=Long).group_by_key().count(
        materialized="counts").to_stream().to(sink, value_serde=Long)
    topology = builder.build()
    first_state = tmp_path / "first"

    def run(records: list[GeneratedRecord], state_dir: Path, expected_outputs: int) -> list[Any]:
        produce(bootstrap, source, records, String, Long)
        app = KafkaStreams(topology, config(bootstrap, unique_name, state_dir))
        app.start()
        try:
            wait_for(lambda: len(read_topic(bootstrap, sink, String, Long, 2)) >= expected_outputs, 60, "outputs")
        finally:
            assert app.close(30)
        assert app.exception is None
        return read_topic(bootstrap, sink, String, Long, 2)

    run([GeneratedRecord("k", 1, 5_000), GeneratedRecord("k", 1, 9_000)], first_state, 1)
    out = run([GeneratedRecord("k", 1, 1_000)], tmp_path / "second", 2)  # new state dir: a full restore
    last = max((r for r in out if r.key == "k"), key=lambda r: r.value)
    assert (last.value, last.timestamp) == (3, 9_000)  # not 1_000: the restored aggregate kept 9_000

    checkpoint = first_state / unique_name / "0_0" / ".checkpoint"
    checkpoint = checkpoint if checkpoint.exists() else first_state / unique_name / "0_1" / ".checkpoint"
    entries = json.loads(checkpoint.read_text())
    for entry in entries:
        entry["offset"] += 1_000  # as if the changelog had been recreated shorter under this local state
    checkpoint.write_text(json.dumps(entries))
    app = KafkaStreams(topology, config(bootstrap, unique_name, first_state))
    app.start()
    try:
        wait_for(lambda: app.exception is not None, 60, "the restore to fail")
    finally:
        app.close(30)
    assert f"{unique_name}-counts-changelog[" in str(app.exception)
    assert "ends at offset" in str(app.exception) and "KafkaStreams.cleanup()" in str(app.exception)
