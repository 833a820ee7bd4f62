"""python.gc.threshold0: raised while instances run, given back when the last one closes."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from streaming.config import StreamsConfig
from streaming.errors import ConfigError
from streaming.runtime import gc_tuning
from streaming.runtime.gc_tuning import raise_threshold0


@pytest.fixture(autouse=True)
def default_thresholds(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The interpreter's defaults, and no holder (an instance another test left running would be one)."""
    monkeypatch.setattr(gc_tuning, "_holders", 0)
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*before)


def test_raised_while_held_and_given_back_by_the_last_holder() -> None:
    first = raise_threshold0(50_000)
    assert gc.get_threshold() == (50_000, 10, 10)  # the older generations' thresholds stay
    second = raise_threshold0(80_000)
    assert gc.get_threshold() == (80_000, 10, 10)
    first()
    assert gc.get_threshold() == (80_000, 10, 10)  # the second instance still runs
    first()  # a second call of one release changes nothing
    assert gc.get_threshold() == (80_000, 10, 10)
    second()
    assert gc.get_threshold() == (700, 10, 10)


def test_never_lowers_a_higher_threshold_and_zero_leaves_the_collector_alone() -> None:
    gc.set_threshold(100_000, 10, 10)
    release = raise_threshold0(50_000)
    assert gc.get_threshold() == (100_000, 10, 10)
    release()
    assert gc.get_threshold() == (100_000, 10, 10)
    gc.set_threshold(700, 10, 10)
    release = raise_threshold0(0)
    assert gc.get_threshold() == (700, 10, 10)
    release()
    assert gc.get_threshold() == (700, 10, 10)


def test_a_threshold_someone_else_set_meanwhile_is_kept() -> None:
    release = raise_threshold0(50_000)
    gc.set_threshold(20_000, 5, 5)
    release()
    assert gc.get_threshold() == (20_000, 5, 5)


def test_the_key_defaults_to_50000_and_rejects_a_negative_value() -> None:
    base = {"application.id": "gc", "bootstrap.servers": "localhost:9092"}
    assert StreamsConfig(base)["python.gc.threshold0"] == 50_000
    assert StreamsConfig({**base, "python.gc.threshold0": "0"})["python.gc.threshold0"] == 0
    with pytest.raises(ConfigError, match="python.gc.threshold0"):
        StreamsConfig({**base, "python.gc.threshold0": "-1"})
