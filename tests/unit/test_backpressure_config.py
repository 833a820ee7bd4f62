"""Throttling and backpressure keys: defaults, and invalid values refused at construction naming the key."""

from __future__ import annotations

from typing import Any

import pytest

from streaming import ConfigError, StreamsConfig

BASE = {"application.id": "app", "bootstrap.servers": "127.0.0.1:9092"}


def test_defaults() -> None:
    cfg = StreamsConfig(BASE)
    assert cfg["buffered.records.per.partition"] == 1000
    assert cfg["max.poll.processing.ms"] == 1000
    assert cfg["processing.rate.limit.records"] == 0
    assert cfg["processing.rate.limit.bytes"] == 0
    assert cfg.max_poll_records == 2000


def test_values_are_converted() -> None:
    cfg = StreamsConfig({**BASE, "buffered.records.per.partition": "50", "max.poll.processing.ms": 0,
                         "processing.rate.limit.records": "2500", "processing.rate.limit.bytes": 1_000_000,
                         "consumer.max.poll.records": "500"})
    assert cfg["buffered.records.per.partition"] == 50
    assert cfg["max.poll.processing.ms"] == 0
    assert cfg["processing.rate.limit.records"] == 2500
    assert cfg["processing.rate.limit.bytes"] == 1_000_000
    assert cfg.max_poll_records == 500


@pytest.mark.parametrize(("key", "value", "why"), [
    ("buffered.records.per.partition", 0, "must be >= 1"),
    ("buffered.records.per.partition", "many", "invalid literal"),
    ("max.poll.processing.ms", -1, "must be >= 0"),
    ("max.poll.processing.ms", 2.5, "expected an integer"),
    ("processing.rate.limit.records", -5, "must be >= 0"),
    ("processing.rate.limit.records", True, "boolean"),
    ("processing.rate.limit.bytes", "1MB", "invalid literal"),
    ("consumer.max.poll.records", 0, "must be >= 1"),
    ("consumer.max.poll.records", 2_000_000, "at most 1,000,000"),
])
def test_invalid_values_name_the_key(key: str, value: Any, why: str) -> None:
    with pytest.raises(ConfigError, match=f"config key '{key}'") as info:
        StreamsConfig({**BASE, key: value})
    assert why in str(info.value)


def test_a_near_miss_suggests_the_key() -> None:
    with pytest.raises(ConfigError, match="Did you mean 'processing.rate.limit.records'"):
        StreamsConfig({**BASE, "processing.rate.limit.record": 10})
