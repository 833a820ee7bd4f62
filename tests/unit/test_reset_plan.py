"""An application reset without a broker: the positions' syntax and rules (Kafka's StreamsResetter), what happens
to each topic of the word count and the orders pipeline (from their topologies), the refusals of bad input, and
the plan's JSON, table and staleness report (issue 17, item 2)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from apps.orders import topology as orders_topology
from apps.wordcount import topology as wordcount_topology
from streaming import Serdes, Stores, Topology
from streaming.reset import ResetError, ResetPlan, ResetPosition
from streaming.reset.cluster import Observation
from streaming.reset.plan import OffsetChange, SnapshotRetirement, TopicRecreation
from streaming.reset.positions import clamp, parse_datetime, parse_duration
from streaming.reset.topics import classify_topics

NOW = 1_700_006_400_000  # 2023-11-15T00:00:00Z


# -- positions -------------------------------------------------------------------------------------------------
def test_datetimes_are_iso_8601_and_utc_without_a_zone() -> None:
    """Kafka's Utils.getDateTime appends 'Z' to a time without a zone."""
    assert parse_datetime("2023-11-15T00:00:00") == NOW
    assert parse_datetime("2023-11-15T00:00:00.000Z") == NOW
    assert parse_datetime("2023-11-15T01:00:00.000+01:00") == NOW
    assert parse_datetime("2023-11-14T23:59:59.999") == NOW - 1
    for bad in ("2023-11-15", "yesterday", "2023-13-01T00:00:00"):
        with pytest.raises(ResetError, match="--to-datetime .* is not an ISO 8601 date and time"):
            parse_datetime(bad)


def test_durations_are_iso_8601_as_javas_duration_parse() -> None:
    assert parse_duration("P1D") == 86_400_000
    assert parse_duration("PT2H30M") == 9_000_000
    assert parse_duration("P1DT0.5S") == 86_400_500
    assert parse_duration("pt1m") == 60_000
    for bad in ("P", "PT", "1D", "-PT1H", "PT1H30", "P1W"):
        with pytest.raises(ResetError, match="is not an ISO 8601 duration"):
            parse_duration(bad)


def test_one_position_at_most_and_earliest_by_default() -> None:
    assert ResetPosition.from_options() == ResetPosition("earliest")
    assert ResetPosition.from_options(to_offset=5) == ResetPosition("offset", 5)
    assert ResetPosition.from_options(by_duration="PT1H").time_ms(NOW) == NOW - 3_600_000
    with pytest.raises(ResetError, match="choose one of .*got --to-offset 5, --to-datetime 2023"):
        ResetPosition.from_options(to_offset=5, to_datetime="2023-11-14T00:00:00")
    with pytest.raises(ResetError, match="--to-offset -1: an offset is 0 or more"):
        ResetPosition.from_options(to_offset=-1)


def test_a_time_in_the_future_is_refused() -> None:
    with pytest.raises(ResetError) as refused:
        ResetPosition("datetime", "2023-11-15T00:00:00.001").time_ms(NOW)
    assert str(refused.value) == ("--to-datetime 2023-11-15T00:00:00.001 is in the future (now is "
                                  "2023-11-15T00:00:00.000+00:00): a reset goes back in time; to skip everything up "
                                  "to now, use --to-datetime with the current time")
    assert ResetPosition("datetime", "2023-11-15T00:00:00").time_ms(NOW) == NOW  # now itself is fine


@pytest.mark.parametrize(("offset", "earliest", "end", "expected"), [
    (5, 0, 10, 5), (0, 3, 10, 3), (10, 0, 10, 10), (99, 0, 10, 10), (3, 3, 3, 3)])
def test_offsets_are_clamped_as_streams_resetter_check_offset_range(offset: int, earliest: int, end: int,
                                                                    expected: int) -> None:
    """StreamsResetter.checkOffsetRange: offset < end ? max(offset, beginning) : end."""
    model = max(offset, earliest) if offset < end else end
    assert clamp(offset, earliest, end) == model == expected


# -- topics ------------------------------------------------------------------------------------------------------
def test_the_word_count_moves_its_words_topic_to_the_end_and_deletes_its_changelog() -> None:
    topology = wordcount_topology().bind("wc")
    roles = classify_topics(topology, "wc", {"wordcount-lines": 4, "wordcount-words": 4, "wordcount-counts": 4})
    assert (roles.inputs, roles.tables, roles.intermediates, roles.outputs) == (
        ("wordcount-lines",), (), ("wordcount-words",), ("wordcount-counts",))
    assert [(t.name, t.kind, t.partitions, t.configs) for t in roles.internal] == [
        ("wc-1-stream-time", "stream-time", 4, {"cleanup.policy": "compact"}),
        ("wc-word-counts-changelog", "changelog", 4, {"cleanup.policy": "compact"}),
        ("wc-word-counts-pending-changelog", "changelog", 4, {"cleanup.policy": "compact"})]
    assert roles.internal_sources == ()


def test_the_orders_pipeline_resets_its_tables_and_deletes_its_repartition_topics() -> None:
    topology = orders_topology().bind("orders")
    counts = {t: 4 for t in ("orders", "users", "items", "order-lines", "orders-rejected", "order-lines-late",
                             "local-buyers-hourly", "user-profiles")}
    roles = classify_topics(topology, "orders", counts, dead_letters=True)
    assert (roles.inputs, roles.tables, roles.intermediates) == (("orders",), ("items", "users"), ())
    assert roles.outputs == ("local-buyers-hourly", "order-lines", "order-lines-late", "orders-rejected",
                             "user-profiles")
    kinds = {t.name: t.kind for t in roles.internal}
    assert {name for name, kind in kinds.items() if kind == "repartition"} == set(roles.internal_sources) == {
        "orders-lines-by-item-left-repartition", "orders-lines-by-region-repartition"}
    assert {name for name, kind in kinds.items() if kind == "changelog"} == {
        f"orders-{store}-changelog" for store in ("order-ids", "users", "items", "local-buyers",
                                                  "local-buyers-finals-store", "user-profiles")}
    assert {name for name, kind in kinds.items() if kind == "dead-letters"} == {"orders-dlq", "orders-dlq-replayed"}
    assert "orders-metadata" not in kinds and "orders-epoch" not in kinds


def test_an_input_that_is_also_an_internal_topic_is_refused() -> None:
    """A source topic named like one of the app's changelogs: deleting it would delete an input."""
    topology = (Topology()
                .add_source("in", "app-counts-changelog")
                .add_processor("count", lambda: None, "in")
                .add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"),
                                                                Serdes.String(), Serdes.Long()), "count")).bind("app")
    with pytest.raises(ResetError) as refused:
        classify_topics(topology, "app", {"app-counts-changelog": 2})
    assert str(refused.value) == ("topic 'app-counts-changelog' is an input of application 'app' and also one of its "
                                  "internal topics (changelog): a reset deletes internal topics and never an input; "
                                  "rename the topic or the store")


def test_internal_topics_listed_by_the_user_must_be_internal() -> None:
    """Kafka's --internal-topics: a subset of the internal topics the dry run found; an input listed is refused."""
    topology = wordcount_topology().bind("wc")
    counts = {"wordcount-lines": 4, "wordcount-words": 4, "wordcount-counts": 4}
    only = classify_topics(topology, "wc", counts, only_internal=["wc-word-counts-changelog"])
    assert [t.name for t in only.internal] == ["wc-word-counts-changelog"]
    with pytest.raises(ResetError) as refused:
        classify_topics(topology, "wc", counts, only_internal=["wc-word-counts-changelog", "wordcount-lines"])
    assert str(refused.value) == ("topic 'wordcount-lines' cannot be listed as internal: it is an input of application "
                                  "'wc', and a reset deletes only its internal topics (wc-1-stream-time, "
                                  "wc-word-counts-changelog, wc-word-counts-pending-changelog)")
    with pytest.raises(ResetError, match="input topics \\['wordcount-lines'\\] of application 'wc' do not exist"):
        classify_topics(topology, "wc", {"wordcount-words": 4})


# -- the plan ------------------------------------------------------------------------------------------------------
def _plan() -> ResetPlan:
    observed = Observation(
        committed={"wordcount-lines[0]": 7, "wordcount-words[0]": 12},
        topics={"wordcount-lines": {"partitions": 1, "id": "AbC", "earliest": [0], "end": [9]},
                "wordcount-words": {"partitions": 1, "id": "DeF", "earliest": [0], "end": [15]},
                "wc-word-counts-changelog": {"partitions": 1, "id": "GhI", "earliest": [0], "end": [30]},
                "wc-epoch": {"partitions": 0, "id": "none", "earliest": [], "end": []}},
        epoch="none", snapshots={"word-counts": ["00000001@none"]})
    return ResetPlan(
        application_id="wc", position=ResetPosition("datetime", "2023-11-14T23:00:00"), time_ms=NOW - 3_600_000,
        tables="earliest",
        offsets=(OffsetChange("wordcount-lines", 0, "input", 7, 4, 0, 9, "first record at or after the time (5 read)"),
                 OffsetChange("wordcount-words", 0, "intermediate", 12, 15, 0, 15, "its end")),
        recreate=(TopicRecreation("wc-word-counts-changelog", "changelog", 1, {"cleanup.policy": "compact"}, True),),
        epoch_before="none", epoch_after="1", snapshots=(SnapshotRetirement("word-counts", "00000001", "none"),),
        snapshot_location="/snapshots", observed=observed, created_at="2023-11-15T00:00:00.000Z", application="wordcount")


def test_the_plan_round_trips_through_json_and_shows_as_a_table() -> None:
    plan = _plan()
    assert ResetPlan.from_json(plan.to_json(), "plan.json") == plan
    assert plan.table().splitlines() == [
        ("reset of wordcount (application.id wc) --to-datetime 2023-11-14T23:00:00 (= 2023-11-14T23:00:00.000+00:00), "
         "tables to earliest"),
        "  partition           role          before -> after  first..end",
        "  wordcount-lines[0]  input              7 ->     4  0..9        first record at or after the time (5 read)",
        "  wordcount-words[0]  intermediate      12 ->    15  0..15       its end",
        "topics deleted and re-created empty:",
        "  wc-word-counts-changelog (changelog, 1 partition(s))",
        "reset epoch none -> 1: every worker wipes its local state of epoch none when it starts",
        "snapshots retired (moved to retired/<epoch>/ under /snapshots/wc/<store>):",
        "  word-counts 00000001 (epoch none)"]


def test_an_edited_or_foreign_plan_is_refused() -> None:
    text = _plan().to_json()
    with pytest.raises(ResetError, match="plan.json was changed after the dry run wrote it"):
        ResetPlan.from_json(text.replace('"after": 4', '"after": 0'), "plan.json")
    with pytest.raises(ResetError, match="notes.txt is not a reset plan: JSONDecodeError"):
        ResetPlan.from_json("hello", "notes.txt")


def test_a_stale_plan_names_what_changed() -> None:
    old = _plan().observed
    topics = dict(old.topics)
    topics["wordcount-lines"] = {**topics["wordcount-lines"], "end": [11]}
    topics["wc-word-counts-changelog"] = {**topics["wc-word-counts-changelog"], "id": "XyZ"}
    new = replace(old, topics=topics, committed={**old.committed, "wordcount-lines[0]": 9}, epoch="1")
    assert new.fingerprint() != old.fingerprint()
    assert new.changes_since(old) == [
        "the reset epoch is 1, not none (another reset ran)",
        "topic wc-word-counts-changelog was 1 partition(s), id GhI, is 1 partition(s), id XyZ",
        "wordcount-lines[0] end offset 9 -> 11",
        "committed offset of wordcount-lines[0] 7 -> 9"]
    assert old.changes_since(old) == []
