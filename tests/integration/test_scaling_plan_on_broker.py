"""The scaling plan on the embedded broker (issue 18): a windowed count and a stream-stream join run for real, then
the dry run of taking their co-partition group from 2 to 4 partitions: every topic with its counts and the new
generation's names, the records to copy and re-shard as read from the topics themselves, the stages, the JSON and
the table; the new tasks' stream-time records written from the old tasks'. And the refusals that need the cluster, each one line with nothing changed: in_place on a broker
without CreatePartitions, a live worker, a new generation that already exists, an input of the current generation
that does not exist."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from assets.scaling.stages import write_stream_time
from streaming import JoinWindows, KafkaStreams, Materialized, Serdes, StreamsBuilder, TimeWindows, Topology
from streaming.admin import create_topics, partition_counts
from streaming.naming import changelog_topic, stream_time_topic
from streaming.runtime.membership import LiveWorkersError, live_workers
from streaming.runtime.stream_time import decode_record
from streaming.scaling import ScalingError, ScalingPlan, make_plan
from streaming.testing.kafka import group_lag, produce, read_topic, wait_for

pytestmark = [pytest.mark.integration]
String, Bytes = Serdes.String(), Serdes.Bytes()


@dataclass
class Record:
    key: str
    value: str
    timestamp: int


def topology(clicks: str, views: str, out: str) -> Topology:
    builder = StreamsBuilder()
    left = builder.stream(clicks, key_serde=String, value_serde=String)
    right = builder.stream(views, key_serde=String, value_serde=String)
    left.group_by_key().windowed_by(TimeWindows.of(1000)).count(Materialized.as_("per-second"))
    left.join(right, lambda c, v: f"{c}+{v}", JoinWindows.of(100), store_name="cv").to(out, value_serde=String)
    return builder.build()


def streams_config(bootstrap: str, app: str, tmp: str) -> dict[str, object]:
    return {"application.id": app, "bootstrap.servers": bootstrap, "commit.interval.ms": 200, "state.dir": tmp}


@pytest.fixture
def ran(bootstrap: str, unique_name: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """The app's topics with 2 partitions, 300 clicks and 300 views processed and committed, the app stopped."""
    clicks, views, out = f"{unique_name}-clicks", f"{unique_name}-views", f"{unique_name}-out"
    create_topics(bootstrap, {clicks: 2, views: 2, out: 2})
    produce(bootstrap, clicks, [Record(f"user-{i % 50}", "c", 1_000 + i) for i in range(300)], String, String)
    produce(bootstrap, views, [Record(f"user-{i % 50}", "v", 1_000 + i) for i in range(300)], String, String)
    state = str(tmp_path_factory.mktemp("state"))
    streams = KafkaStreams(topology(clicks, views, out), streams_config(bootstrap, unique_name, state))
    streams.start()
    try:
        wait_for(lambda: group_lag(bootstrap, unique_name, clicks, 2) == 0 and
                 group_lag(bootstrap, unique_name, views, 2) == 0, 90, "the app to commit every input")
    finally:
        assert streams.close(30)
    yield {"clicks": clicks, "views": views, "out": out, "app": unique_name, "state": state}


def test_the_migrate_plan_lists_the_group_its_new_generation_records_and_stages(bootstrap: str,
                                                                                ran: dict[str, str]) -> None:
    app, clicks, views = ran["app"], ran["clicks"], ran["views"]
    config = {"bootstrap.servers": bootstrap}
    plan = make_plan(topology(clicks, views, ran["out"]), app, config, [views, clicks], 4, "migrate",
                     generations={clicks: 1}, application="clicks-app", now_ms=1_700_000_000_000)
    changelogs = [changelog_topic(app, s) for s in ("cv-other-join-store", "cv-this-join-store", "per-second")]
    assert (plan.group, plan.mode, plan.partitions, plan.new_partitions) == (clicks, "migrate", 2, 4)
    assert [(t.topic, t.role, t.physical, t.new_physical, t.partitions, t.new_partitions) for t in plan.topics] == [
        (clicks, "input", clicks, f"{clicks}.v2", 2, 4), (views, "input", views, f"{views}.v2", 2, 4),
        *[(c, "changelog", c, f"{c}.v2", 2, 4) for c in changelogs],
        (stream_time_topic(app, 0), "stream-time", stream_time_topic(app, 0), f"{stream_time_topic(app, 0)}.v2", 2,
         4)]
    by_topic = {t.topic: t for t in plan.topics}
    # records as the topics hold them (read to the end by a consumer, not from ListOffsets)
    for topic in (clicks, views, *changelogs):
        assert by_topic[topic].records == len(read_topic(bootstrap, topic, Bytes, Bytes, 2)) > 0, topic
    assert by_topic[clicks].records == 300 and by_topic[clicks].undrained == 0  # the app committed everything
    assert plan.records_to_copy == 600
    assert plan.records_to_reshard == sum(by_topic[c].records for c in changelogs)
    assert {s.store: s.kind for s in plan.stores} == {"cv-other-join-store": "window", "cv-this-join-store": "window",
                                                      "per-second": "window"}
    assert [s.name for s in plan.stages] == ["drain", "create", "copy", "copy", "reshard", "reshard", "reshard",
                                             "stream-time", "verify", "commit", "switch", "epoch"]
    assert plan.downtime_s == pytest.approx(30 + 600 / 40_000 + plan.records_to_reshard / 40_000, abs=0.1)
    assert plan.in_place is None and plan.rewrites == []
    # nothing was created or changed by the dry run
    assert partition_counts(bootstrap, [f"{clicks}.v2", clicks]) == {f"{clicks}.v2": None, clicks: 2}

    # a store can start empty instead (placement 'drop'): nothing of it is read
    dropped = make_plan(topology(clicks, views, ran["out"]), app, config, [clicks, views], 4,
                        placements={"per-second": "drop"})
    assert {s.store: s.placement for s in dropped.stores}["per-second"] == "drop"
    assert dropped.records_to_reshard == plan.records_to_reshard - by_topic[changelogs[2]].records
    assert [s.records for s in dropped.stages if s.name == "reshard"][2] == 0

    text = plan.to_json()
    assert ScalingPlan.from_json(text, "plan.json") == plan
    assert f'"new_physical": "{clicks}.v2"' in text and '"records_to_copy": 600' in text
    with pytest.raises(ScalingError, match="plan.json was changed after the dry run wrote it"):
        ScalingPlan.from_json(text.replace('"new_partitions": 4', '"new_partitions": 5', 1), "plan.json")
    table = plan.table()
    assert table.startswith(f"scaling of clicks-app (application.id {app}), group {clicks!r}: 2 -> 4 partitions, "
                            f"mode migrate (joins: stream-stream join")
    assert f"{clicks} -> {clicks}.v2" in table and "expected downtime 30 s" in table


def refused(bootstrap: str, ran: dict[str, str], mode: str = "migrate", **options: object) -> str:
    with pytest.raises(ScalingError) as refusal:
        make_plan(topology(ran["clicks"], ran["views"], ran["out"]), ran["app"], {"bootstrap.servers": bootstrap},
                  [ran["clicks"], ran["views"]], 4, mode, **options)  # type: ignore[arg-type]
    assert "\n" not in str(refusal.value)
    return str(refusal.value)


@pytest.mark.skipif(bool(os.environ.get("BROOK_TEST_BOOTSTRAP_SERVERS")), reason="the embedded broker's refusal")
def test_in_place_is_refused_on_the_embedded_broker_naming_it_and_suggesting_migrate(bootstrap: str,
                                                                                     ran: dict[str, str]) -> None:
    assert refused(bootstrap, ran, "in_place") == (
        f"cannot scale in place on the broker at {bootstrap}: the broker does not support CreatePartitions "
        f"(_UNSUPPORTED_FEATURE: CreatePartitions (KIP-195) not supported by broker, requires broker version >= "
        f"1.0.0); use mode 'migrate' (the group moves to a new topic generation)")
    assert partition_counts(bootstrap, [ran["clicks"]]) == {ran["clicks"]: 2}


def test_generations_that_exist_or_do_not_are_refused(bootstrap: str, ran: dict[str, str]) -> None:
    clicks = ran["clicks"]
    assert refused(bootstrap, ran, generations={clicks: 3, ran["views"]: 3}) == \
        f"input topic '{clicks}.v3' of co-partition group '{clicks}' does not exist on the cluster"
    create_topics(bootstrap, {f"{clicks}.v2": 4})
    assert refused(bootstrap, ran) == (
        f"topic '{clicks}.v2' of the new generation already exists (left by an earlier scaling?): delete it, or name "
        f"the current generations so the plan goes past it")


def test_a_live_worker_is_refused_by_name(bootstrap: str, ran: dict[str, str]) -> None:
    streams = KafkaStreams(topology(ran["clicks"], ran["views"], ran["out"]),
                           streams_config(bootstrap, ran["app"], ran["state"]))
    streams.start()
    try:  # start() returns before the instance's first announcement is on <app>-metadata
        wait_for(lambda: bool(live_workers({"bootstrap.servers": bootstrap}, ran["app"])), 30, "the announcement")
        with pytest.raises(LiveWorkersError) as refusal:
            make_plan(topology(ran["clicks"], ran["views"], ran["out"]), ran["app"], {"bootstrap.servers": bootstrap},
                      [ran["clicks"], ran["views"]], 4)
    finally:
        assert streams.close(30)
    message = str(refusal.value)
    assert message.startswith(f"cannot scale application '{ran['app']}': 1 instance(s) of application "
                              f"'{ran['app']}' are alive: ") and "\n" not in message


def test_every_new_task_gets_the_highest_stream_time_of_the_old_tasks(bootstrap: str, ran: dict[str, str]) -> None:
    clicks, views = ran["clicks"], ran["views"]
    config = {"bootstrap.servers": bootstrap}
    plan = make_plan(topology(clicks, views, ran["out"]), ran["app"], config, [clicks, views], 4)
    topic = next(t for t in plan.topics if t.role == "stream-time")
    old = {r.key: decode_record(r.value, "old") for r in read_topic(bootstrap, topic.physical, Bytes, Bytes, 2)}
    assert sorted(old) == [b"0_0", b"0_1"]  # the last record of each old task
    highest = {t: max(ts for record in old.values() for (name, _), (ts, _) in record.partitions.items() if name == t)
               for t in (clicks, views)}
    assert highest == {clicks: 1_299, views: 1_299}
    nodes: dict[str, int] = {}
    for record in old.values():
        for node, ts in record.observed.items():
            nodes[node] = max(nodes.get(node, -1), ts)
    create_topics(bootstrap, {topic.new_physical: 4})
    committed = {(f"{t}.v2", p): 100 * p + i for i, t in enumerate((clicks, views)) for p in range(4)}
    assert write_stream_time(config, plan, topic, committed) == {p: f"0_{p}".encode() for p in range(4)}
    new = read_topic(bootstrap, topic.new_physical, Bytes, Bytes, 4)
    assert sorted((r.partition, r.key) for r in new) == [(p, f"0_{p}".encode()) for p in range(4)]
    for r in new:
        record = decode_record(r.value, "new")
        assert record.partitions == {(f"{t}.v2", r.partition): (highest[t], committed[(f"{t}.v2", r.partition)])
                                     for t in (clicks, views)}
        assert record.observed == nodes
    with pytest.raises(ScalingError, match="is not a stream-time topic of the plan"):
        write_stream_time(config, plan, plan.topics[0], committed)
