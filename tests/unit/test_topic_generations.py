"""Topic generations (partition scaling's logical -> physical names): the resolver, the config key, the bound
topology's names, the internal topics it creates and the platform spec's ``topic_generations``."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from apps.wordcount import topology as wordcount_topology
from assets.platform_spec import PlatformSpec, find_spec_path
from assets.topics import topic_asset_specs
from streaming import Serdes, StreamsBuilder
from streaming.config import StreamsConfig
from streaming.errors import ConfigError, TopologyError
from streaming.reset.topics import classify_topics
from streaming.runtime.internal_topics import internal_topic_specs, logical_topics
from streaming.runtime.kafka_streams import KafkaStreams
from streaming.runtime.stream_time import stream_time_topics
from streaming.topic_generations import TopicGenerations, check_generations
from streaming.yaml_files import load_yaml

APP = "gen-app"


def test_generation_one_is_the_logical_name_and_n_is_dot_v_n() -> None:
    generations = TopicGenerations({"orders": 2, "users": 1, f"{APP}-counts-changelog": 3})
    assert generations.generations == {"orders": 2, f"{APP}-counts-changelog": 3}  # 1 is the default
    assert generations.physical("orders") == "orders.v2"
    assert generations.physical("users") == "users"
    assert generations.physical("clicks") == "clicks"
    assert generations.changelog(APP, "counts") == f"{APP}-counts-changelog.v3"
    assert generations.stream_time(APP, 0) == f"{APP}-0-stream-time"
    assert generations.logical("orders.v2") == "orders"
    assert generations.logical("clicks.v2") == "clicks.v2"  # a user's topic of that name, not a generation
    assert generations.label("orders.v2") == "orders.v2 (generation 2 of orders)"
    assert generations.label("users") == "users"
    assert generations.describe() == [f"{APP}-counts-changelog -> {APP}-counts-changelog.v3", "orders -> orders.v2"]
    assert TopicGenerations({"orders": 1}) == TopicGenerations() == TopicGenerations(None)


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        ({"orders": 0}, ValueError, "topic generation of 'orders' must be an integer >= 1, got 0"),
        ({"orders": True}, ValueError, "must be an integer >= 1, got True"),
        ({"orders": "2"}, ValueError, "must be an integer >= 1, got '2'"),
        ({"orders.v2": 3}, ValueError, "'orders.v2' is a physical generation's name; name the logical topic 'orders'"),
        ({"bad topic": 2}, ValueError, "'bad topic' is not a legal topic name"),
        ("orders=2", TypeError, "must map logical topics to generations"),
    ],
)
def test_bad_generation_maps_are_refused_naming_the_topic(value: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        check_generations(value)


def test_unpartitioned_and_unknown_topics_are_refused_naming_the_application() -> None:
    for topic in (f"{APP}-metadata", f"{APP}-epoch", f"{APP}-dlq", f"{APP}-dlq-replayed"):
        with pytest.raises(ValueError, match=f"application '{APP}': topic '{topic}' has no generations"):
            TopicGenerations({topic: 2}).check_application(APP)
    with pytest.raises(ValueError, match="topic generations name 'ordres', which is not a topic of the application"):
        TopicGenerations({"ordres": 2}).check_application(APP, {"orders"})
    TopicGenerations({"orders": 2}).check_application(APP, {"orders"})


def test_the_config_key_is_validated_at_construction() -> None:
    base = {"application.id": APP, "bootstrap.servers": "127.0.0.1:1"}
    assert StreamsConfig(base)["topic.generations"] == {}
    assert StreamsConfig({**base, "topic.generations": {"in": 2}})["topic.generations"] == {"in": 2}
    with pytest.raises(ConfigError, match="config key 'topic.generations'.*must be an integer >= 1"):
        StreamsConfig({**base, "topic.generations": {"in": -1}})


def _counting(stateful_repartition: bool = True) -> Any:
    builder = StreamsBuilder()
    stream = builder.stream("in", key_serde=Serdes.String(), value_serde=Serdes.String())
    grouped = stream.group_by(lambda k, v: v) if stateful_repartition else stream.group_by_key()
    grouped.count(materialized="counts").to_stream().to("out", value_serde=Serdes.Long())
    builder.global_table("ref", materialized="ref-store")
    return builder.build()


def test_binding_gives_every_topic_its_generation_and_internal_topics_their_physical_names() -> None:
    topology = _counting()
    logical = logical_topics(topology.bind(APP), APP)
    repartition = next(t for t in logical if t.endswith("-repartition"))
    stream_time = next(t for t in logical if t.endswith("-stream-time"))
    assert logical == {"in", "out", "ref", repartition, f"{APP}-counts-changelog", stream_time}
    generations = TopicGenerations({"in": 2, repartition: 2, f"{APP}-counts-changelog": 2, stream_time: 2, "ref": 2})
    bound = _counting().bind(APP, generations)
    assert bound.generations is generations
    assert set(bound.source_topics) == {"in.v2", f"{repartition}.v2"}
    assert bound.sink_topics == sorted(["out", f"{repartition}.v2"])
    assert bound.internal_topics == {f"{repartition}.v2"}
    assert bound.global_stores["ref-store"].topic == "ref.v2"
    assert logical_topics(bound, APP) == logical  # the names the map is keyed by stay the logical ones
    assert set(stream_time_topics(bound, APP).values()) == {f"{stream_time}.v2"}
    specs = internal_topic_specs(bound, APP, {"in.v2": 4, "out": 1, "ref.v2": 1})
    assert {name: (spec.kind, spec.partitions) for name, spec in specs.items()} == {
        f"{repartition}.v2": ("repartition", 4), f"{APP}-counts-changelog.v2": ("changelog", 4),
        f"{stream_time}.v2": ("stream-time", 4)}
    assert bound.bind(APP, generations) is bound
    with pytest.raises(TopologyError, match="bound to application.id 'gen-app' with topic generations"):
        bound.bind(APP)


def test_kafka_streams_refuses_generations_of_topics_the_topology_does_not_have() -> None:
    config = {"application.id": APP, "bootstrap.servers": "127.0.0.1:1"}
    with pytest.raises(ConfigError, match="'topic.generations'.*name 'inn', which is not a topic of the application"):
        KafkaStreams(_counting(), {**config, "topic.generations": {"inn": 2}})
    with pytest.raises(ConfigError, match=f"'topic.generations'.*topic '{APP}-dlq' has no generations"):
        KafkaStreams(_counting(), {**config, "topic.generations": {f"{APP}-dlq": 2}})
    streams = KafkaStreams(_counting(), {**config, "topic.generations": {"in": 2}})
    assert "in.v2" in streams.topology.source_topics


def _spec_with(generations: dict[str, Any]) -> PlatformSpec:
    raw = copy.deepcopy(load_yaml(find_spec_path().read_text()))
    raw["apps"]["wordcount"]["topic_generations"] = generations
    return PlatformSpec.model_validate(raw)


def test_the_spec_records_generations_per_app_and_absent_is_generation_one() -> None:
    assert _spec_with({}).apps["orders"].physical_topic("orders") == "orders"
    app = _spec_with({"wordcount-words": 2, "wordcount-word-counts-changelog": 2}).apps["wordcount"]
    assert app.physical_topic("wordcount-words") == "wordcount-words.v2"
    assert app.physical_topic("wordcount-lines") == "wordcount-lines"
    assert app.physical_changelog("word-counts") == "wordcount-word-counts-changelog.v2"
    assert app.changelog_topic("word-counts") == "wordcount-word-counts-changelog"  # the logical name
    assert _spec_with({}).app_of("wordcount") is not None
    assert _spec_with({}).app_of("nobody") is None


@pytest.mark.parametrize(
    ("generations", "message"),
    [
        ({"orders": 2}, "app 'wordcount': topic_generations names 'orders', which is neither an input or output"),
        ({"wordcount-metadata": 2}, "app 'wordcount': topic_generations: topic 'wordcount-metadata' has no generations"),
        ({"wordcount-words.v2": 2}, "app 'wordcount': topic_generations: topic 'wordcount-words.v2' is a physical"),
        ({"wordcount-words": 0}, "app 'wordcount': topic_generations: topic generation of 'wordcount-words' must be"),
        ({"wordcount-words": True}, "Input should be a valid integer"),
    ],
)
def test_bad_spec_generations_are_refused_with_one_line_naming_app_and_topic(generations: dict[str, Any],
                                                                              message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _spec_with(generations)


def test_two_apps_must_agree_on_the_generation_of_a_topic_they_share() -> None:
    raw = copy.deepcopy(load_yaml(find_spec_path().read_text()))
    raw["apps"]["wordcount2"] = {**raw["apps"]["wordcount"], "application_id": "wordcount2",
                                 "topic_generations": {"wordcount-lines": 2}}
    with pytest.raises(ValidationError, match="app 'wordcount2': topic 'wordcount-lines' is at generation 2, but "
                                              "app 'wordcount' uses it at generation 1"):
        PlatformSpec.model_validate(raw)


def test_a_reset_at_a_generation_moves_its_inputs_and_recreates_its_internal_topics() -> None:
    generations = TopicGenerations({"wordcount-lines": 2, "wordcount-words": 2, "wc-1-stream-time": 2,
                                    "wc-word-counts-changelog": 2, "wc-word-counts-pending-changelog": 2})
    topology = wordcount_topology().bind("wc", generations)
    roles = classify_topics(topology, "wc", {"wordcount-lines.v2": 6, "wordcount-words.v2": 6, "wordcount-counts": 4})
    assert (roles.inputs, roles.intermediates, roles.outputs) == (
        ("wordcount-lines.v2",), ("wordcount-words.v2",), ("wordcount-counts",))
    assert [(t.name, t.partitions) for t in roles.internal] == [
        ("wc-1-stream-time.v2", 6), ("wc-word-counts-changelog.v2", 6), ("wc-word-counts-pending-changelog.v2", 6)]
    only = classify_topics(topology, "wc", {"wordcount-lines.v2": 6, "wordcount-words.v2": 6},
                           only_internal=["wc-word-counts-changelog", "wc-1-stream-time.v2"])
    assert [t.name for t in only.internal] == ["wc-1-stream-time.v2", "wc-word-counts-changelog.v2"]


def test_topic_assets_keep_logical_keys_and_name_the_generation_that_carries_them() -> None:
    spec = _spec_with({"wordcount-words": 2, "wordcount-word-counts-changelog": 2})
    metadata = {spec.key.path[-1]: spec.metadata for spec in topic_asset_specs(spec)}
    assert metadata["wordcount-words"]["physical_topic"] == "wordcount-words.v2"
    assert metadata["wordcount-lines"]["physical_topic"] == "wordcount-lines"
    assert metadata["wordcount-word-counts-changelog"]["physical_topic"] == "wordcount-word-counts-changelog.v2"
    assert metadata["wordcount-word-counts-pending-changelog"]["physical_topic"] == \
        "wordcount-word-counts-pending-changelog"
    assert spec.physical_topic("wordcount-words") == "wordcount-words.v2"
    assert spec.physical_topic("orders") == "orders"
