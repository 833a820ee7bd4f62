"""``make demo``'s load-shedding and idle-watchdog step: an order intake that sheds beyond its rate limit.

Both are runtime settings, not operators of a topology (docs/load-shedding.md), so the step runs
them on a small intake app of its own (``orders-intake``: ``orders-burst`` -> ``orders-burst-accepted``), keeping
the orders pipeline's outputs, which the demo checks against the oracle and reprocesses, free of shed orders:

1. Orders arrive at 3x the intake's rate limit (``processing.rate.limit.records``) for a few seconds, with
   ``processing.overflow.policy: shed`` and ``processing.overflow.shed.divert: true``: what exceeds the limit is
   shed, counted in ``brook_shed_records_total`` and written to ``orders-intake-shed``. Checked: processed + shed
   = input, every shed order is in the shed topic, every other one in the output, none in both.
2. Then no order comes for longer than ``processing.idle.timeout.ms``: the watchdog writes an ``idle`` alert to
   ``orders-intake-alerts``; one more order, and it writes ``resumed``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from streaming import KafkaStreams, Serdes, StreamsBuilder
from streaming.admin import create_topics
from streaming.naming import alerts_topic, shed_topic
from streaming.testing import generators
from streaming.testing.kafka import committed_offsets, produce, read_topic, wait_for

APPLICATION_ID = "orders-intake"
SOURCE, ACCEPTED = "orders-burst", "orders-burst-accepted"
PARTITIONS = 2
RATE = 1000  # records per second: the intake's rate limit
SECONDS = 3  # orders arrive at 3x the limit for this long
IDLE_TIMEOUT_MS = 2000


@dataclass
class OverflowSummary:
    """What the step saw (``checks``: name -> passed)."""

    sent: int = 0
    processed: int = 0
    shed: int = 0
    diverted: int = 0
    idle_ms: int | None = None
    resumed: bool = False
    checks: dict[str, bool] = field(default_factory=dict)
    error: str | None = None


def _shed_total(streams: KafkaStreams) -> int:
    return int(sum(sample.value for family in streams.metrics_registry.collect() for sample in family.samples
                   if sample.name == "brook_shed_records_total"))


def _alerts(bootstrap: str) -> list[dict[str, Any]]:
    return [r.value for r in read_topic(bootstrap, alerts_topic(APPLICATION_ID), Serdes.String(), Serdes.Json(), 1)]


def run_overflow(bootstrap: str) -> OverflowSummary:
    """The two parts of the module doc on the broker at ``bootstrap``."""
    summary = OverflowSummary()
    create_topics(bootstrap, {SOURCE: PARTITIONS, ACCEPTED: PARTITIONS})
    builder = StreamsBuilder()
    builder.stream(SOURCE, key_serde=Serdes.String(), value_serde=Serdes.Json()).to(ACCEPTED)
    streams = KafkaStreams(builder.build(), {
        "application.id": APPLICATION_ID, "bootstrap.servers": bootstrap, "commit.interval.ms": 200,
        "processing.rate.limit.records": RATE, "processing.overflow.policy": "shed",
        "processing.overflow.shed.divert": True, "processing.idle.timeout.ms": IDLE_TIMEOUT_MS})
    orders = generators.orders(3 * RATE * SECONDS + 1, seed=11)
    burst, last = orders[:-1], orders[-1:]
    summary.sent = len(orders)
    streams.start()
    try:
        wait_for(lambda: streams.state.value == "RUNNING", 60, "the intake to run")
        started, per_tick = time.monotonic(), 3 * RATE // 10
        for tick, start in enumerate(range(0, len(burst), per_tick)):  # 3x the limit, a tenth of a second at a time
            produce(bootstrap, SOURCE, burst[start:start + per_tick], Serdes.String(), Serdes.Json())
            time.sleep(max(started + (tick + 1) / 10 - time.monotonic(), 0))
        wait_for(lambda: streams.metrics()["records_processed"] + _shed_total(streams) >= len(burst), 60,
                 "every order of the burst to be processed or shed")
        wait_for(lambda: any(a["state"] == "idle" for a in _alerts(bootstrap)), 30, "the idle alert")
        produce(bootstrap, SOURCE, last, Serdes.String(), Serdes.Json())
        wait_for(lambda: any(a["state"] == "resumed" for a in _alerts(bootstrap)), 30, "the resumed alert")
        wait_for(lambda: sum(committed_offsets(bootstrap, APPLICATION_ID, SOURCE, PARTITIONS).values()) == len(orders),
                 30, "the offsets of processed and shed orders to be committed")
        summary.processed, summary.shed = streams.metrics()["records_processed"], _shed_total(streams)
    except AssertionError as exc:  # wait_for timed out, naming what it waited for
        summary.error = str(exc)
        return summary
    finally:
        streams.close()
    accepted = {r.value["order_id"] for r in read_topic(bootstrap, ACCEPTED, Serdes.String(), Serdes.Json(), PARTITIONS)}
    diverted = [r.value["order_id"] for r in read_topic(bootstrap, shed_topic(APPLICATION_ID), Serdes.String(),
                                                        Serdes.Json(), PARTITIONS)]
    summary.diverted = len(diverted)
    alerts = _alerts(bootstrap)
    idle = next(a for a in alerts if a["state"] == "idle")
    summary.idle_ms, summary.resumed = idle["idle_ms"], any(a["state"] == "resumed" for a in alerts)
    summary.checks = {
        f"load shedding at 3x a {RATE:,}/s limit: processed + shed = input, each shed order in "
        f"{shed_topic(APPLICATION_ID)} and the others in the output, none in both":
            summary.processed + summary.shed == summary.sent and summary.shed > 0
            and len(diverted) == len(set(diverted)) == summary.shed and not accepted & set(diverted)
            and accepted | set(diverted) == {o.value["order_id"] for o in orders},
        f"idle watchdog: an idle alert after {IDLE_TIMEOUT_MS / 1000:.0f} s without orders, resumed when they came":
            idle["idle_ms"] >= IDLE_TIMEOUT_MS and idle["topic"] == SOURCE and summary.resumed,
    }
    return summary
