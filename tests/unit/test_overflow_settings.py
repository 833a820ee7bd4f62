"""Load shedding and the idle watchdog as runtime settings: their config checks, their internal topics, the
shedder's admission and commit rules, and batch reprocessing, which ignores them."""

from __future__ import annotations

from typing import Any

import pytest

from streaming import Serdes, StreamsBuilder
from streaming.batch import BatchPlan
from streaming.config import StreamsConfig
from streaming.errors import ConfigError
from streaming.runtime.internal_topics import ALERTS_RETENTION_MS, internal_topic_specs
from streaming.runtime.load_shedding import SOURCE_OFFSET, LoadShedder
from streaming.runtime.rate_limit import InputRateLimiter
from streaming.testing import GeneratedRecord
from tests.unit.batch_inputs import as_partitions, run_days

BASE = {"application.id": "shop", "bootstrap.servers": "127.0.0.1:9092"}


def test_shed_without_a_rate_limit_is_an_error_naming_both_keys() -> None:
    with pytest.raises(ConfigError, match=r"processing\.overflow\.policy.*processing\.rate\.limit\.records"):
        StreamsConfig({**BASE, "processing.overflow.policy": "shed"})
    with pytest.raises(ConfigError, match=r"processing\.overflow\.shed\.divert.*processing\.overflow\.policy"):
        StreamsConfig({**BASE, "processing.overflow.shed.divert": True, "processing.rate.limit.records": 10})
    with pytest.raises(ConfigError, match="processing.overflow.policy"):
        StreamsConfig({**BASE, "processing.overflow.policy": "drop"})
    config = StreamsConfig({**BASE, "processing.overflow.policy": "shed", "processing.rate.limit.bytes": 1000,
                            "processing.overflow.shed.divert": "true", "processing.idle.timeout.ms": 30000})
    assert (config["processing.overflow.policy"], config["processing.overflow.shed.divert"],
            config["processing.idle.timeout.ms"]) == ("shed", True, 30000)
    defaults = StreamsConfig(BASE)
    assert (defaults["processing.overflow.policy"], defaults["processing.idle.timeout.ms"]) == ("backpressure", 0)


def test_the_shed_and_alerts_topics_are_created_with_their_configs() -> None:
    builder = StreamsBuilder()
    builder.stream(["a", "b"]).to("out")
    topology = builder.build()
    specs = internal_topic_specs(topology, "shop", {"a": 3, "b": 2, "out": 4}, shed=True, alerts=True)
    assert (specs["shop-shed"].kind, specs["shop-shed"].partitions, specs["shop-shed"].configs) == \
        ("shed", 3, {"cleanup.policy": "delete"})
    assert (specs["shop-alerts"].kind, specs["shop-alerts"].partitions, specs["shop-alerts"].configs) == \
        ("alerts", 1, {"cleanup.policy": "delete", "retention.ms": str(ALERTS_RETENTION_MS)})
    assert not set(internal_topic_specs(topology, "shop", {"a": 3, "b": 2, "out": 4})) & {"shop-shed", "shop-alerts"}


class Message:
    def __init__(self, partition: int, offset: int) -> None:
        self._partition, self._offset = partition, offset

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return "in"

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return b"k%d" % self._offset

    def value(self) -> bytes:
        return b"v"

    def headers(self) -> list[tuple[str, bytes]]:
        return [("h", b"1")]

    def timestamp(self) -> tuple[int, int]:
        return (1, 1000 + self._offset)


class Task:
    def __init__(self, buffered: int = 0) -> None:
        self.initialized = True
        self.consumed: dict[tuple[str, int], int] = {}
        self.buffered = buffered

    def buffered_count(self, tp: tuple[str, int]) -> int:
        return self.buffered


def test_the_shedder_admits_what_the_limit_allows_and_commits_past_the_rest_once_nothing_waits_before_it() -> None:
    now = [0.0]
    sent: list[tuple[Any, ...]] = []
    limiter = InputRateLimiter(100, None, clock=lambda: now[0])  # a burst of 10 tokens
    shedder = LoadShedder(limiter, (lambda *record: sent.append(record), "shop-shed", 2), clock=lambda: now[0])
    task = Task(buffered=10)
    admitted = shedder.admit([Message(1, offset) for offset in range(25)], {("in", 1): task})
    assert [m.offset() for m in admitted] == list(range(10))
    assert shedder.shed == {("in", 1): 15}
    assert [(r[0], r[1], r[3], r[5], dict(r[4])[SOURCE_OFFSET]) for r in sent] == \
        [("shop-shed", b"k%d" % o, 1000 + o, 1, str(o).encode()) for o in range(10, 25)]
    shedder.settle({("in", 1): task})  # the admitted records still wait: not yet
    assert task.consumed == {}
    task.buffered = 0
    shedder.settle({("in", 1): task})
    assert task.consumed == {("in", 1): 25}
    now[0] = 0.05  # half the burst refilled
    assert len(shedder.admit([Message(1, offset) for offset in range(25, 35)], {("in", 1): task})) == 5
    assert shedder.shed == {("in", 1): 20}


def test_batch_reprocessing_ignores_shedding_and_the_idle_watchdog() -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=Serdes.String(), value_serde=Serdes.Json()).map_values(
        lambda v: {**v, "seen": True}).to("out")
    plan = BatchPlan(builder.build(), "shop", {"in": 2, "out": 2})
    records = [GeneratedRecord(f"k{i % 7}", {"n": i}, 1_700_000_000_000 + i) for i in range(500)]
    inputs = as_partitions("in", records, 2, Serdes.String(), Serdes.Json())
    plain = run_days(plan, {"application.id": "shop"}, inputs, [2**62])
    runtime_only = run_days(plan, {"application.id": "shop", "processing.rate.limit.records": 1,
                                   "processing.overflow.policy": "shed", "processing.overflow.shed.divert": True,
                                   "processing.idle.timeout.ms": 1}, inputs, [2**62])
    assert len(plain["out"]) == len(records)
    assert [(r.key, r.value) for r in runtime_only["out"]] == [(r.key, r.value) for r in plain["out"]]
    assert set(runtime_only) == {"out"}  # nothing shed, no alerts


def test_the_watchdog_watches_the_named_source_topics_and_refuses_one_the_topology_does_not_read() -> None:
    from apps.orders import topology as orders_topology
    from streaming.runtime.idle_watchdog import watched_topics

    topology = orders_topology()
    topology.bind("orders")

    def watched(topics: str) -> set[str]:
        return watched_topics(StreamsConfig({**BASE, "application.id": "orders", "processing.idle.topics": topics}),
                              topology)

    assert watched("") == {"orders", "users", "items"}  # every source topic the app does not own
    assert watched("orders") == {"orders"}
    with pytest.raises(ConfigError, match=r"'processing.idle.topics' names 'order', which the topology does not "
                                          r"read \(its source topics: items, orders, users\)"):
        watched("orders, order")
