"""StreamsConfig: Kafka Streams' keys validated at construction, client passthrough, secrets redacted."""

from __future__ import annotations

from typing import Any

import pytest

from streaming import ConfigError, FieldTimestampExtractor, RecordTimestampExtractor, Serdes, StreamsConfig

BASE = {"application.id": "app", "bootstrap.servers": "127.0.0.1:9092"}


def test_defaults() -> None:
    cfg = StreamsConfig(BASE)
    assert cfg["application.id"] == "app"
    assert cfg["processing.guarantee"] == "at_least_once"
    assert cfg["commit.interval.ms"] == 30_000
    assert cfg["num.standby.replicas"] == 0
    assert cfg["max.task.idle.ms"] == 0
    assert cfg["default.deserialization.exception.handler"] == "fail"
    assert isinstance(cfg.default_key_serde, Serdes.String)
    assert isinstance(cfg.default_value_serde, Serdes.Json)
    assert isinstance(cfg.default_timestamp_extractor, RecordTimestampExtractor)


def test_exactly_once_lowers_the_default_commit_interval() -> None:
    cfg = StreamsConfig({**BASE, "processing.guarantee": "exactly_once_v2"})
    assert cfg.exactly_once
    assert cfg["commit.interval.ms"] == 100
    explicit = StreamsConfig({**BASE, "processing.guarantee": "exactly_once_v2", "commit.interval.ms": 500})
    assert explicit["commit.interval.ms"] == 500


def test_values_are_converted() -> None:
    cfg = StreamsConfig({**BASE, "commit.interval.ms": "250", "default.value.serde": "Long",
                         "default.timestamp.extractor": FieldTimestampExtractor("ts")})
    assert cfg["commit.interval.ms"] == 250
    assert isinstance(cfg.default_value_serde, Serdes.Long)
    assert cfg.default_timestamp_extractor.field == "ts"


def test_unknown_key_names_the_key() -> None:
    with pytest.raises(ConfigError, match="unknown config key 'fetch.max.bytes'") as info:
        StreamsConfig({**BASE, "fetch.max.bytes": 1})
    assert "'consumer.'" in str(info.value)  # says how to pass a librdkafka setting


def test_unknown_key_near_miss_gets_a_did_you_mean_hint() -> None:
    with pytest.raises(ConfigError) as info:
        StreamsConfig({**BASE, "commit.interval.msec": 100})
    message = str(info.value)
    assert "'commit.interval.msec'" in message
    assert "Did you mean 'commit.interval.ms'?" in message


def test_far_off_unknown_key_has_no_hint() -> None:
    with pytest.raises(ConfigError) as info:
        StreamsConfig({**BASE, "zzz": 1})
    assert "Did you mean" not in str(info.value)


@pytest.mark.parametrize(("key", "value"), [
    ("commit.interval.ms", -1),
    ("commit.interval.ms", "soon"),
    ("commit.interval.ms", True),
    ("processing.guarantee", "exactly_once"),
    ("num.standby.replicas", -1),
    ("buffered.records.per.partition", 0),
    ("default.key.serde", "NoSuchSerde"),
    ("default.timestamp.extractor", "nope"),
    ("application.server", "no-port"),
    ("application.id", "bad id with spaces"),
    ("application.id", ""),
    ("bootstrap.servers", ""),
    ("default.deserialization.exception.handler", "ignore"),
    ("consumer.max.poll.records", 0),
])
def test_bad_value_names_the_key(key: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=f"config key '{key}'"):
        StreamsConfig({**BASE, key: value})


def test_missing_application_id() -> None:
    with pytest.raises(ConfigError, match="missing required config key 'application.id'"):
        StreamsConfig({"bootstrap.servers": "127.0.0.1:9092"})


def test_missing_bootstrap_servers_unless_not_required() -> None:
    with pytest.raises(ConfigError, match="'bootstrap.servers'"):
        StreamsConfig({"application.id": "app"})
    assert StreamsConfig({"application.id": "app"}, require_bootstrap=False)["bootstrap.servers"] is None


def test_non_string_key() -> None:
    with pytest.raises(ConfigError, match="not a string"):
        StreamsConfig({**BASE, 1: "x"})  # type: ignore[dict-item]


def test_client_settings_pass_through() -> None:
    cfg = StreamsConfig({**BASE, "consumer.fetch.max.bytes": 2_000_000, "consumer.auto.offset.reset": "latest",
                         "producer.linger.ms": 20, "producer.enable.idempotence": False,
                         "admin.request.timeout.ms": "3000", "consumer.max.poll.records": 500})
    consumer = cfg.consumer_config()
    assert consumer["fetch.max.bytes"] == "2000000"
    assert consumer["auto.offset.reset"] == "latest"  # overrides Brook's default
    assert consumer["group.id"] == "app"
    assert consumer["enable.auto.commit"] == "false"
    assert consumer["bootstrap.servers"] == "127.0.0.1:9092"
    assert "max.poll.records" not in consumer  # Brook reads it itself; librdkafka has no such key
    assert cfg.max_poll_records == 500
    producer = cfg.producer_config()
    assert producer["linger.ms"] == "20"
    assert producer["enable.idempotence"] == "false"
    assert producer["partitioner"] == "murmur2_random"
    assert cfg.admin_config()["request.timeout.ms"] == "3000"


def test_security_settings_reach_every_client() -> None:
    cfg = StreamsConfig({**BASE, "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                         "sasl.username": "me", "sasl.password": "hunter2"})
    for client in (cfg.consumer_config(), cfg.producer_config(), cfg.admin_config()):
        assert client["security.protocol"] == "SASL_SSL"
        assert client["sasl.username"] == "me"
        assert client["sasl.password"] == "hunter2"


@pytest.mark.parametrize("setting", ["group.id", "enable.auto.commit", "enable.auto.offset.store"])
def test_reserved_consumer_settings_are_rejected(setting: str) -> None:
    with pytest.raises(ConfigError, match=f"'consumer.{setting}' is set by the runtime"):
        StreamsConfig({**BASE, f"consumer.{setting}": "x"})


def test_a_prefix_alone_is_rejected() -> None:
    with pytest.raises(ConfigError, match="names no client setting"):
        StreamsConfig({**BASE, "consumer.": "x"})


def test_secrets_are_redacted() -> None:
    cfg = StreamsConfig({**BASE, "sasl.username": "me", "sasl.password": "hunter2",
                         "ssl.key.password": "s3cret", "producer.sasl.password": "hunter3",
                         "consumer.ssl.keystore.password": "s3cret2", "commit.interval.ms": 10})
    shown = cfg.redacted()
    assert shown["sasl.password"] == "***"
    assert shown["ssl.key.password"] == "***"
    assert shown["producer.sasl.password"] == "***"
    assert shown["consumer.ssl.keystore.password"] == "***"
    assert shown["sasl.username"] == "me"
    assert shown["commit.interval.ms"] == 10
    assert shown["application.id"] == "app"
    text = repr(shown)
    for secret in ("hunter2", "hunter3", "s3cret"):
        assert secret not in text
    assert shown["default.value.serde"] == "Serdes.Json()"


def test_secret_values_do_not_appear_in_errors() -> None:
    # a bad secret value must not be echoed back
    try:
        StreamsConfig({**BASE, "sasl.password": "hunter2", "commit.interval.ms": "x"})
    except ConfigError as exc:
        assert "hunter2" not in str(exc)
    else:  # pragma: no cover
        pytest.fail("expected a ConfigError")


@pytest.mark.parametrize(("extra", "message"), [
    ({"consumer.fetch.max.bytes": "lots"}, "invalid value 'lots' for config key 'consumer.fetch.max.bytes'"),
    ({"consumer.fetch.max.byts": 1}, "unknown config key 'consumer.fetch.max.byts'"),
    ({"sasl.passwd": "x"}, "unknown config key 'sasl.passwd'"),
    ({"sasl.mechanism": "NOPE"}, "invalid value 'NOPE' for config key 'sasl.mechanism'"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},
     "consumer settings are invalid together.*sasl.username.*security.protocol, sasl.mechanism"),
    ({"producer.linger.ms": "soon"}, "config key 'producer.linger.ms'"),
    ({"producer.acks": "1"}, "producer settings are invalid together.*acks.*producer.acks"),
    ({"admin.socket.timeout.ms": "x"}, "config key 'admin.socket.timeout.ms'"),
])
def test_client_settings_are_judged_at_construction(extra: dict, message: str) -> None:
    """Issue 6, item 9: librdkafka judges pass-through settings in the constructor (Kafka Streams builds its
    clients there), with a ConfigError naming the key, not a raw KafkaException in start()."""
    with pytest.raises(ConfigError, match=message):
        StreamsConfig({**BASE, **extra})


def test_a_secret_in_a_bad_client_setting_is_not_shown() -> None:
    with pytest.raises(ConfigError) as caught:
        StreamsConfig({**BASE, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                       "sasl.username": "u", "sasl.password": "hunter2", "consumer.fetch.max.bytes": "lots"})
    assert "hunter2" not in str(caught.value)


def test_fractional_integers_are_refused_not_truncated() -> None:
    with pytest.raises(ConfigError, match="'commit.interval.ms'.*expected an integer"):
        StreamsConfig({**BASE, "commit.interval.ms": 1.9})
    assert StreamsConfig({**BASE, "commit.interval.ms": 2.0})["commit.interval.ms"] == 2


def test_kafka_streams_refuses_bad_client_settings_in_its_constructor() -> None:
    from streaming import KafkaStreams, StreamsBuilder

    builder = StreamsBuilder()
    builder.stream("in").to("out")
    with pytest.raises(ConfigError, match="'consumer.fetch.max.bytes'"):
        KafkaStreams(builder.build(), {**BASE, "consumer.fetch.max.bytes": "lots"})


@pytest.mark.parametrize(("setting", "main", "restore"), [(None, "50", "20"), ("5", "5", "5"), ("500", "500", "20")])
def test_the_main_consumer_waits_50_ms_per_fetch_and_the_restore_consumer_at_most_20(
        setting: str | None, main: str, restore: str) -> None:
    """The embedded broker holds a fetch for the whole wait; a restore must never wait long at a partition's end."""
    from streaming.runtime.client_configs import restore_consumer_config

    config = StreamsConfig({**BASE, **({"consumer.fetch.wait.max.ms": setting} if setting else {})})
    assert str(config.consumer_config()["fetch.wait.max.ms"]) == main
    assert restore_consumer_config(config.consumer_config())["fetch.wait.max.ms"] == restore
