"""Static group membership (``static.membership`` with ``instance.name``): one ``group.instance.id`` per stream
thread."""

from __future__ import annotations

import pytest

from streaming import ConfigError, StreamsConfig

BASE = {"application.id": "orders", "bootstrap.servers": "127.0.0.1:9092"}


def test_each_stream_thread_gets_its_own_static_member_id() -> None:
    config = StreamsConfig({**BASE, "instance.name": "worker-0", "static.membership": "true"})
    assert [config.group_instance_id(n) for n in (1, 2)] == ["orders-worker-0-1", "orders-worker-0-2"]


def test_members_are_dynamic_unless_static_membership_is_on() -> None:
    assert StreamsConfig(BASE).group_instance_id(1) is None
    assert StreamsConfig({**BASE, "instance.name": "worker-0"}).group_instance_id(1) is None


def test_static_membership_without_an_instance_name_is_refused_naming_both_keys() -> None:
    with pytest.raises(ConfigError, match=r"static\.membership.*instance\.name"):
        StreamsConfig({**BASE, "static.membership": True})
    with pytest.raises(ConfigError, match="static.membership"):
        StreamsConfig({**BASE, "instance.name": "w", "static.membership": "maybe"})


def test_setting_the_consumer_group_instance_id_directly_is_refused_naming_instance_name() -> None:
    with pytest.raises(ConfigError, match=r"consumer\.group\.instance\.id.*instance\.name"):
        StreamsConfig({**BASE, "consumer.group.instance.id": "x"})


def test_an_instance_name_that_cannot_be_part_of_a_member_id_is_refused() -> None:
    with pytest.raises(ConfigError, match="instance.name"):
        StreamsConfig({**BASE, "instance.name": "worker 0"})


def test_the_worker_flag_sets_the_instance_name() -> None:
    from typer.testing import CliRunner

    from streaming.cli.main import app

    result = CliRunner().invoke(app, ["worker", "run", "apps.wordcount.topology:topology", "--set",
                                      "application.id=wc", "--set", "bootstrap.servers=127.0.0.1:1",
                                      "--instance-name", "worker 0"])
    assert result.exit_code == 2
    assert "instance.name" in result.output and "worker 0" in result.output
