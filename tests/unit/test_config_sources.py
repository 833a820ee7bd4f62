"""Config values from references (${env:NAME}, ${file:/path}) and BROOK_<KEY> environment variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming import ConfigError, StreamsConfig
from streaming.config import is_config_key
from streaming.config_sources import environment_config

BASE = {"application.id": "app", "bootstrap.servers": "127.0.0.1:9092"}


def test_references_reach_every_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "password"
    secret.write_text("from-a-file\n")
    monkeypatch.setenv("KAFKA_USER", "svc-orders")
    config = StreamsConfig({**BASE, "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                            "sasl.username": "${env:KAFKA_USER}", "sasl.password": f"${{file:{secret}}}",
                            "client.id": "brook-${env:KAFKA_USER}"})
    for client in (config.consumer_config(), config.producer_config(), config.admin_config()):
        assert (client["sasl.username"], client["sasl.password"]) == ("svc-orders", "from-a-file")
    assert config.consumer_config()["client.id"] == "brook-svc-orders"
    assert "from-a-file" not in str(config.redacted())


def test_a_missing_reference_names_the_key_not_a_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    with pytest.raises(ConfigError, match=r"'sasl.password' refers to \$\{env:NOT_SET_ANYWHERE\}, but .* not set"):
        StreamsConfig({**BASE, "sasl.password": "${env:NOT_SET_ANYWHERE}"})
    with pytest.raises(ConfigError, match=r"'sasl.password' refers to \$\{file:.*nope\}, which cannot be read"):
        StreamsConfig({**BASE, "sasl.password": f"${{file:{tmp_path / 'nope'}}}"})


def test_brook_environment_variables_map_to_config_keys() -> None:
    environ = {"BROOK_SASL_PASSWORD": "pw", "BROOK_BOOTSTRAP_SERVERS": "k:9093",
               "BROOK_CONSUMER_FETCH_MAX_BYTES": "2000000", "BROOK_COMMIT_INTERVAL_MS": "250",
               "BROOK_DEBUG": "1", "BROOK_PLATFORM_SPEC": "/x.yaml", "BROOK_CLUSTER": "production",
               "BROOK_LOG_LEVEL": "INFO", "OTHER_SASL_PASSWORD": "no"}
    assert environment_config(is_config_key, environ) == {
        "sasl.password": "pw", "bootstrap.servers": "k:9093", "consumer.fetch.max.bytes": "2000000",
        "commit.interval.ms": "250"}
