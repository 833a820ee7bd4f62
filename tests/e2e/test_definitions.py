"""The Dagster code location loads, and the platform spec parses and rejects mistakes."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml

from assets.platform_spec import PlatformSpecError, load_platform_spec
from assets.resources import KafkaResource, kafka_resource
from assets.topics import topic_asset_key

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "platform" / "platform.yaml"


def test_definitions_load_and_validate() -> None:
    from assets.definitions import defs

    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    keys = graph.get_all_asset_keys()
    spec = load_platform_spec(SPEC)
    assert {topic_asset_key(t) for t in spec.topics} <= keys
    assert topic_asset_key("wordcount-word-counts-changelog") in keys
    assert topic_asset_key("orders") in graph.get(topic_asset_key("order-lines")).parent_keys
    assert set(defs.resources) >= {"kafka", "platform"}


def test_platform_spec_parses() -> None:
    spec = load_platform_spec(SPEC)
    assert set(spec.apps) >= {"wordcount", "orders"}
    assert spec.cluster("embedded").embedded
    partitions = spec.topic_partitions()
    assert partitions["orders"] == spec.topics["orders"].partitions
    assert partitions["wordcount-word-counts-changelog"] == spec.topics["wordcount-words"].partitions
    assert all(rule.topic in spec.topics for rule in spec.quality)


def _write(tmp_path: Path, change: dict) -> Path:
    raw = yaml.safe_load(SPEC.read_text())
    for dotted, value in change.items():
        *parents, last = dotted.split(".")
        node = raw
        for part in parents:
            node = node[part]
        node[last] = value
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"apps.orders.inputs": ["nope"]}, "topic 'nope' is not declared"),
        ({"topics.orders.partitions": 0}, "greater than 0"),
        ({"topics.orders.partitons": 3}, "Extra inputs are not permitted"),
        ({"default_cluster": "staging"}, "default_cluster 'staging'"),
        ({"archive": None}, "quality rules check the topics' archive: add an archive section"),
        ({"apps.wordcount.co_partitioned": [["wordcount-lines", "orders"]]}, None),
    ],
)
def test_platform_spec_rejects_mistakes(tmp_path: Path, change: dict, message: str | None) -> None:
    path = _write(tmp_path, change)
    if message is None:  # equal partition counts: co-partitioning is fine
        load_platform_spec(path)
        return
    with pytest.raises(PlatformSpecError, match=message):
        load_platform_spec(path)


def test_co_partitioned_topics_must_agree(tmp_path: Path) -> None:
    path = _write(tmp_path, {"topics.orders.partitions": 3,
                             "apps.wordcount.co_partitioned": [["wordcount-lines", "orders"]]})
    with pytest.raises(PlatformSpecError, match="co-partitioned topics differ"):
        load_platform_spec(path)


def test_kafka_resource_redacts_secrets_and_reads_env(monkeypatch: pytest.MonkeyPatch) -> None:
    resource = KafkaResource(bootstrap_servers="k:9093", security_protocol="SASL_SSL", sasl_mechanism="PLAIN",
                             sasl_username="u", sasl_password="hunter2")
    assert resource.client_config()["sasl.password"] == "hunter2"
    assert "hunter2" not in str(resource.redacted_config())
    assert "bootstrap.servers" not in resource.security_config()

    spec = load_platform_spec(SPEC)
    monkeypatch.setenv("BROOK_BOOTSTRAP_SERVERS", "10.0.0.1:9092")
    monkeypatch.setenv("BROOK_KAFKA_USERNAME", "svc")
    monkeypatch.setenv("BROOK_KAFKA_PASSWORD", "s3cret")
    production = kafka_resource(spec, "production")
    with dg.build_resources({"kafka": production}) as resources:
        config = resources.kafka.client_config()
    assert config["bootstrap.servers"] == "10.0.0.1:9092"
    assert (config["sasl.username"], config["sasl.password"]) == ("svc", "s3cret")
    assert config["security.protocol"] == "SASL_SSL"


SECRETS = {"sasl.password": "pw-1", "ssl.key.password": "pw-2", "ssl.keystore.password": "pw-3",
           "ssl.key.pem": "-----BEGIN PRIVATE KEY-----pem", "sasl.oauthbearer.config": "principal=p secret=oauth",
           "sasl.oauthbearer.client.secret": "client-secret", "sasl.jaas.config": "jaas-secret"}


def test_one_redaction_rule_for_the_resource_and_the_runtime() -> None:
    """Issue 6, item 4: what StreamsConfig hides, the Dagster resource hides too, in redacted_config(),
    repr() and str()."""
    from streaming import ConfigError, StreamsConfig

    resource = KafkaResource(bootstrap_servers="k:9093", sasl_password="pw-1", ssl_key_password="pw-2",
                             client_settings={k: v for k, v in SECRETS.items() if k not in ("sasl.password",
                                                                                          "ssl.key.password")})
    # (librdkafka refuses sasl.jaas.config, a Java setting: the runtime checks it with the others)
    streams = StreamsConfig({"application.id": "a", "bootstrap.servers": "k:9093",
                             **{k: v for k, v in SECRETS.items() if k != "sasl.jaas.config"}})
    with pytest.raises(ConfigError) as refused:
        StreamsConfig({"application.id": "a", "bootstrap.servers": "k:9093", **SECRETS})
    for shown in (str(resource.redacted_config()), repr(resource), str(resource), str(streams.redacted()),
                  str(refused.value)):
        for secret in SECRETS.values():
            assert secret not in shown, (secret, shown)
    assert set(resource.redacted_config()) == {"bootstrap.servers", "security.protocol", *SECRETS}
    assert resource.client_config()["ssl.key.pem"] == SECRETS["ssl.key.pem"]  # the clients still get them


def test_definitions_archive_every_topic_with_checks_and_schedules() -> None:
    from assets.archive.keys import archive_asset_key
    from assets.definitions import defs

    spec = load_platform_spec(SPEC)
    graph = defs.resolve_asset_graph()
    keys = graph.get_all_asset_keys()
    assert {archive_asset_key(t) for t in spec.topics} <= keys
    assert not any(key.path[0] == "archive" and key.path[1].endswith("-changelog") for key in keys)
    checks = {(key.asset_key, key.name) for key in graph.asset_check_keys if key.asset_key.path[0] == "archive"}
    assert checks == {(archive_asset_key(rule.topic), rule.name) for rule in spec.quality} | \
        {(archive_asset_key(topic), "decodable") for topic in spec.topics}
    for key in graph.asset_check_keys:  # partitioned checks: each evaluation names its day (the checked asset's)
        assert graph.get(key).partitions_def == graph.get(key.asset_key).partitions_def is not None, key
    assert {schedule.name for schedule in defs.schedules} == {"nightly_compaction", "hourly_archive",
                                                                 "reprocess_yesterday"}
