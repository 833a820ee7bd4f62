"""Security settings given once reach the settings of every client Brook builds: the runtime's main
consumer, producer, admin, restore, global and interactive-query metadata clients, the CLI's clients,
and the Spark data source's readers. The configs are built as the runtime builds them; no client is
mocked (and none connects)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from assets.resources import KafkaResource, kafka_source_options
from assets.spark.offsets import reader_config
from assets.spark.options import parse_options
from streaming import ConfigError, Serdes, StreamsConfig
from streaming.cli.connection import client_config as cli_client_config
from streaming.runtime.client_configs import (
    global_consumer_config,
    metadata_publisher_config,
    metadata_reader_config,
    restore_consumer_config,
)
from streaming.runtime.http_server import key_from_text, key_to_text
from streaming.testing.tls import make_authority

MECHANISMS: dict[str, dict[str, str]] = {
    "PLAIN": {"sasl.mechanism": "PLAIN", "sasl.username": "svc", "sasl.password": "pw-plain"},
    "SCRAM-SHA-256": {"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "svc", "sasl.password": "pw-256"},
    "SCRAM-SHA-512": {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "svc", "sasl.password": "pw-512"},
    "OAUTHBEARER": {"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
                    "sasl.oauthbearer.client.id": "svc", "sasl.oauthbearer.client.secret": "oidc-secret",
                    "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
                    "sasl.oauthbearer.scope": "kafka"},
}


def security(mechanism: str, tmp_path: Path) -> dict[str, str]:
    """SASL_SSL settings with real PEM files (librdkafka loads them when a client is built)."""
    files = make_authority(tmp_path / "tls")
    return {"security.protocol": "SASL_SSL", **MECHANISMS[mechanism], "ssl.ca.location": str(files.ca),
            "ssl.certificate.location": str(files.certificate), "ssl.key.location": str(files.key),
            "ssl.key.password": "key-pw"}


def runtime_client_configs(config: StreamsConfig) -> dict[str, dict[str, Any]]:
    """Every client config the runtime builds from ``config``, by client."""
    metadata_topic = f"{config.application_id}-metadata"
    return {
        "main consumer": config.consumer_config(),
        "producer": config.producer_config(),
        "admin": config.admin_config(),
        "restore consumer": restore_consumer_config(config.consumer_config()),
        "global consumer": global_consumer_config(config.consumer_config(), config.application_id),
        "metadata reader": metadata_reader_config(config.consumer_config(), metadata_topic),
        "metadata publisher": metadata_publisher_config(config.producer_config()),
    }


def assert_carries(settings: dict[str, Any], expected: dict[str, str], client: str) -> None:
    missing = {key: value for key, value in expected.items() if settings.get(key) != value}
    assert not missing, f"{client} lacks {sorted(missing)}"


@pytest.mark.parametrize("mechanism", list(MECHANISMS))
def test_every_runtime_client_carries_the_security_settings(mechanism: str, tmp_path: Path) -> None:
    expected = security(mechanism, tmp_path)
    config = StreamsConfig({"application.id": "app", "bootstrap.servers": "kafka:9093", **expected})
    assert config.client_security() == expected
    clients = runtime_client_configs(config)
    for client, settings in clients.items():
        assert_carries(settings, expected, client)
    # Each keeps its own job: only the main consumer is a group member.
    assert clients["restore consumer"]["group.id"] == "app-restore"
    assert "session.timeout.ms" not in clients["global consumer"]
    assert clients["main consumer"]["group.id"] == "app"


@pytest.mark.parametrize("mechanism", list(MECHANISMS))
def test_the_cli_clients_carry_the_security_settings(mechanism: str, tmp_path: Path) -> None:
    expected = security(mechanism, tmp_path)
    worker_config = tmp_path / "worker.yaml"
    worker_config.write_text(yaml.safe_dump({"application.id": "app", "commit.interval.ms": 100, **expected}))
    settings = cli_client_config("kafka:9093", worker_config, None)
    assert_carries(settings, expected, "the CLI's clients")
    assert "application.id" not in settings and "commit.interval.ms" not in settings


@pytest.mark.parametrize("mechanism", list(MECHANISMS))
def test_the_spark_source_readers_carry_the_security_settings(mechanism: str, tmp_path: Path) -> None:
    expected = security(mechanism, tmp_path)
    fields = {"security_protocol": "SASL_SSL", "ssl_ca_location": expected["ssl.ca.location"],
              "ssl_certificate_location": expected["ssl.certificate.location"],
              "ssl_key_location": expected["ssl.key.location"], "ssl_key_password": "key-pw"}
    if mechanism == "OAUTHBEARER":
        resource = KafkaResource(bootstrap_servers="kafka:9093", **fields,
                                 client_settings={k: v for k, v in expected.items() if k.startswith("sasl.")})
    else:
        resource = KafkaResource(bootstrap_servers="kafka:9093", **fields, sasl_mechanism=mechanism,
                                 sasl_username="svc", sasl_password=expected["sasl.password"])
    options = parse_options({**kafka_source_options(resource), "subscribe": "orders"})
    assert_carries(reader_config(options.client_config, "read"), expected, "the Spark reader")
    shown = repr(options) + repr(resource)
    assert not any(expected[key] in shown for key in expected if "password" in key or "secret" in key)


def test_a_tls_file_that_does_not_exist_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'ssl.ca.location' names .*missing-ca.pem, which does not exist"):
        StreamsConfig({"application.id": "app", "bootstrap.servers": "kafka:9093", "security.protocol": "SSL",
                       "ssl.ca.location": str(tmp_path / "missing-ca.pem")})
    with pytest.raises(ConfigError, match=r"'ssl.key.location' names .* which is a directory"):
        StreamsConfig({"application.id": "app", "bootstrap.servers": "kafka:9093", "security.protocol": "SSL",
                       "ssl.key.location": str(tmp_path)})


def test_the_query_endpoint_keys_are_checked_and_the_token_is_a_secret(tmp_path: Path) -> None:
    files = make_authority(tmp_path / "tls")
    base = {"application.id": "app", "bootstrap.servers": "kafka:9093", "application.server": "127.0.0.1:8080"}
    with pytest.raises(ConfigError, match="'application.server.tls.cert' and 'application.server.tls.key' go together"):
        StreamsConfig({**base, "application.server.tls.cert": str(files.certificate)})
    with pytest.raises(ConfigError, match="'application.server.tls.key'.*not a readable file"):
        StreamsConfig({**base, "application.server.tls.cert": str(files.certificate),
                       "application.server.tls.key": str(tmp_path / "missing.key")})
    config = StreamsConfig({**base, "application.server.token": "t0ken-value"})
    assert config["application.server.token"] == "t0ken-value"
    assert config.redacted()["application.server.token"] == "***"
    assert "t0ken-value" not in repr(config.redacted())


@pytest.mark.parametrize(("serde", "key"), [(Serdes.String(), "user 1/ä"), (Serdes.Long(), -42),
                                            (Serdes.Integer(), 7), (Serdes.Double(), 2.5),
                                            (Serdes.Json(), {"id": "u1", "n": [1, 2]}), (Serdes.Bytes(), b"raw")])
def test_a_key_goes_to_another_instance_and_back(serde: Any, key: Any) -> None:
    assert key_from_text(key_to_text(key, serde), serde) == key
