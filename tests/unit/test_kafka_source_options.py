"""Option parsing of the brook-kafka data source (no broker, no Spark)."""

from __future__ import annotations

import pytest

from assets.resources import KafkaResource, kafka_source_options
from assets.spark.options import EARLIEST, LATEST, KafkaSourceError, client_options, parse_options

BASE = {"kafka.bootstrap.servers": "k:9092", "subscribe": "a, b"}


def test_defaults_and_pass_through() -> None:
    options = parse_options({**BASE, "kafka.security.protocol": "SASL_SSL", "kafka.sasl.password": "pw"})
    assert options.topics == ["a", "b"]
    assert options.client_config == {"bootstrap.servers": "k:9092", "security.protocol": "SASL_SSL",
                                     "sasl.password": "pw"}
    assert (options.starting.default, options.ending.default) == (EARLIEST, LATEST)
    assert "pw" not in repr(options) and options.redacted_client_config()["sasl.password"] == "***"


def test_json_offsets_and_timestamps() -> None:
    options = parse_options({**BASE, "startingoffsets": '{"a": {"0": 23, "1": -2}}',
                             "endingTimestamp": "1700000000000"})
    assert options.starting.offset_for("a", 0) == 23
    assert options.starting.offset_for("a", 1) == EARLIEST
    assert options.starting.offset_for("b", 0) == EARLIEST  # not named: the default
    assert options.ending_timestamp == 1_700_000_000_000


def test_client_options_prefix_and_stringify() -> None:
    assert client_options({"bootstrap.servers": "k:1", "enable.idempotence": True, "linger.ms": 5}) == {
        "kafka.bootstrap.servers": "k:1", "kafka.enable.idempotence": "true", "kafka.linger.ms": "5"}


def test_the_kafka_resource_security_settings_reach_the_source() -> None:
    kafka = KafkaResource(bootstrap_servers="k:9093", security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                          sasl_username="svc", sasl_password="pw", ssl_ca_location="/ca.pem")
    options = parse_options({**kafka_source_options(kafka), "subscribe": "a"})
    assert options.client_config == {"bootstrap.servers": "k:9093", "security.protocol": "SASL_SSL",
                                     "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "svc",
                                     "sasl.password": "pw", "ssl.ca.location": "/ca.pem"}


@pytest.mark.parametrize(("change", "message"), [
    ({"kafka.bootstrap.servers": ""}, "'kafka.bootstrap.servers' is required"),
    ({"subscribe": " , "}, "'subscribe' is required"),
    ({"subscribe": "a,a"}, "names a topic twice"),
    ({"assign": '{"a": [0]}'}, "unknown option 'assign'"),
    ({"kafka.group.id": "g"}, "'kafka.group.id' is not supported"),
    ({"kafka.auto.offset.reset": "latest"}, "'kafka.auto.offset.reset' is not supported"),
    ({"startingOffsets": "newest"}, "option 'startingOffsets' must be 'earliest', 'latest' or JSON"),
    ({"startingOffsets": '{"c": {"0": 1}}'}, "names topic 'c', which is not in 'subscribe'"),
    ({"endingOffsets": '{"a": {"x": 1}}'}, "has partition 'x', not a number"),
    ({"endingOffsets": '{"a": {"0": -3}}'}, "offset must be an integer >= 0, or -2"),
    ({"endingOffsets": '[1]'}, "JSON must map topic"),
    ({"startingTimestamp": "yesterday"}, "'startingTimestamp' must be an integer"),
    ({"startingTimestamp": "-5"}, "must not be negative"),
    ({"startingTimestamp": "10", "endingTimestamp": "5"}, "is before 'startingTimestamp'"),
    ({"startingTimestamp": "10", "startingOffsets": "earliest"}, "mutually exclusive"),
])
def test_bad_options_name_the_option(change: dict[str, str], message: str) -> None:
    with pytest.raises(KafkaSourceError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse_options({**BASE, **change})
