"""Where a command's broker and a worker's state directory come from, without a broker: the one
``bootstrap.servers`` order (flag, environment, config file, embedded broker, default), the numbered
``state.dir`` a worker takes and takes again after a restart, the remembered failure, and the data commands'
refusals of bad input."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import typer

import streaming.bootstrap as bootstrap_module
from streaming.bootstrap import resolve_bootstrap, with_bootstrap
from streaming.cli import worker_state
from streaming.cli.data import _from_text
from streaming.cli.logs import TextFormatter
from streaming.cli.settings import load_settings, parse_overrides
from streaming.cli.worker import cleanup_command, describe_failure
from streaming.cli.worker_state import claim_state_dir, forget_failure, last_failure, remember_failure
from streaming.errors import ChangelogMissingError, DeserializationError
from streaming.naming import is_legal_topic_name
from streaming.serdes import JsonSerde

EMBEDDED = "127.0.0.1:45678"


@pytest.fixture
def embedded_broker(monkeypatch: pytest.MonkeyPatch) -> str:
    """As if ``brook broker start`` ran in the working directory."""
    monkeypatch.setattr(bootstrap_module, "embedded_bootstrap", lambda broker_dir=None: EMBEDDED)
    return EMBEDDED


@pytest.fixture(autouse=True)
def no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BROOK_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.delenv("BROOK_STATE_DIR", raising=False)


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_the_order_is_flag_environment_config_embedded_broker(embedded_broker: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    config = write_config(tmp_path, "application.id: a\nbootstrap.servers: file:9092\n")
    monkeypatch.setenv("BROOK_BOOTSTRAP_SERVERS", "env:9092")
    assert load_settings(config, [], "flag:9092")[1].servers == "flag:9092"
    assert load_settings(config, ["bootstrap.servers=set:9092"])[1].source == "--set bootstrap.servers"
    settings, chosen = load_settings(config, [])
    assert (settings["bootstrap.servers"], chosen.source) == ("env:9092", "BROOK_BOOTSTRAP_SERVERS")
    monkeypatch.delenv("BROOK_BOOTSTRAP_SERVERS")
    settings, chosen = load_settings(config, [])
    assert (settings["bootstrap.servers"], chosen.source) == ("file:9092", f"config file {config}")
    settings, chosen = load_settings(write_config(tmp_path, "application.id: a\n"), [])
    assert settings["bootstrap.servers"] == EMBEDDED
    assert chosen.describe() == f"bootstrap.servers={EMBEDDED} (from the embedded broker in .brook/broker)"


def test_without_any_source_a_local_kafka(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no .brook/broker here
    assert resolve_bootstrap().servers == "127.0.0.1:9092"


def test_kafka_streams_config_keeps_its_own_and_else_finds_the_broker(embedded_broker: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    assert with_bootstrap({"application.id": "a", "bootstrap.servers": "own:9092"})["bootstrap.servers"] == "own:9092"
    assert with_bootstrap({"application.id": "a"})["bootstrap.servers"] == EMBEDDED
    monkeypatch.setenv("BROOK_BOOTSTRAP_SERVERS", "env:9092")
    assert with_bootstrap({"application.id": "a"})["bootstrap.servers"] == "env:9092"


def test_the_readme_tour_kafka_streams_needs_no_environment(embedded_broker: str) -> None:
    from streaming import KafkaStreams, Serdes, StreamsBuilder

    builder = StreamsBuilder()
    builder.stream("orders", key_serde=Serdes.String(), value_serde=Serdes.Json()).to("big-orders")
    app = KafkaStreams(builder.build(), {"application.id": "tour"})  # no KeyError, no ConfigError
    assert app.config["bootstrap.servers"] == EMBEDDED


def test_a_worker_without_a_state_dir_takes_the_first_free_one_and_again_after_a_restart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_state, "default_state_dir", lambda: str(tmp_path))
    first = claim_state_dir({}, "app")
    second = claim_state_dir({}, "app")  # the same command in another terminal
    assert (first.path, second.path) == (str(tmp_path / "app" / "0"), str(tmp_path / "app" / "1"))
    assert first.chosen and second.chosen
    first.release()  # the first worker restarts
    again = claim_state_dir({}, "app")
    assert again.path == first.path
    second.release()
    again.release()
    assert claim_state_dir({}, "app").path == first.path  # a lone worker restarts on its own directory


def test_a_state_dir_of_its_own_is_used_as_given(tmp_path: Path) -> None:
    own = claim_state_dir({"state.dir": str(tmp_path / "mine")}, "app")
    assert (own.path, own.chosen) == (str(tmp_path / "mine"), False)


def test_the_last_failure_is_remembered_until_a_clean_stop(tmp_path: Path) -> None:
    assert remember_failure(str(tmp_path), "app", "poison at offset 5") is None
    before = remember_failure(str(tmp_path), "app", "poison at offset 5")
    assert before is not None and before.endswith("+00:00")
    assert remember_failure(str(tmp_path), "app", "another failure") is None
    forget_failure(str(tmp_path), "app")
    assert last_failure(str(tmp_path), "app") is None
    assert remember_failure(str(tmp_path), "app", "changelog gone", needs_cleanup=True) is None
    remembered = last_failure(str(tmp_path), "app")
    assert remembered is not None and (remembered.reason, remembered.needs_cleanup) == ("changelog gone", True)


def test_failures_name_their_fix() -> None:
    poison = DeserializationError("cannot deserialize", "events", 0, 7)
    line = describe_failure(poison, "brook worker cleanup")
    assert "topic=events, partition=0, offset=7" in line
    assert "default.deserialization.exception.handler: dead_letter" in line
    missing = ChangelogMissingError("long\nstory", summary="cannot restore store 'n'", app_dir="/x")
    assert describe_failure(missing, "brook worker cleanup --config c.yaml") == \
        "cannot restore store 'n'. To start again, delete the old local state: brook worker cleanup --config c.yaml"
    assert describe_failure(RuntimeError("first\nsecond"), "") == "first"


def test_the_cleanup_command_names_what_the_worker_was_given(tmp_path: Path) -> None:
    config = write_config(tmp_path, "application.id: words\n")
    assert cleanup_command(config, "words", "/tmp/brook-streams/words/0", True) == \
        f"brook worker cleanup --config {config}"
    assert cleanup_command(None, "words", "/data/w2", False) == \
        "brook worker cleanup --set application.id=words --set state.dir=/data/w2"


def test_unknown_set_keys_are_refused_naming_the_nearest() -> None:
    assert parse_overrides(["commit.interval.ms=5", "consumer.fetch.max.bytes=1"]) == \
        {"commit.interval.ms": "5", "consumer.fetch.max.bytes": "1"}
    with pytest.raises(typer.BadParameter, match="unknown config key 'comit.interval.ms': did you mean "
                                                 "'commit.interval.ms'"):
        parse_overrides(["comit.interval.ms=5"])
    with pytest.raises(typer.BadParameter, match="expected key=value"):
        parse_overrides(["state.dir"])


def test_topic_names_kafka_refuses() -> None:
    assert is_legal_topic_name("orders.v2_x-1")
    for bad in ("bad/name", "a b", ".", "..", "x" * 250, ""):
        assert not is_legal_topic_name(bad), bad


def test_a_non_json_value_names_the_serde_option() -> None:
    with pytest.raises(ValueError, match=r"'hello' is not JSON.*--value-serde String"):
        _from_text("hello", JsonSerde(), "--value-serde")


def test_text_logs_carry_tracebacks_only_when_debugging(monkeypatch: pytest.MonkeyPatch) -> None:
    def formatted() -> str:
        try:
            raise ValueError("boom")
        except ValueError as exc:
            info: Any = (type(exc), exc, exc.__traceback__)
        return TextFormatter().format(logging.LogRecord("x", logging.ERROR, "f", 1, "closing failed", None, info))

    monkeypatch.delenv("BROOK_DEBUG", raising=False)
    assert formatted().endswith("closing failed (ValueError: boom)")
    monkeypatch.setenv("BROOK_DEBUG", "1")
    assert "Traceback" in formatted()
