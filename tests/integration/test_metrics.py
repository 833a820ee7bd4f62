"""Prometheus ``/metrics`` of a running KafkaStreams, scraped over HTTP on the embedded broker."""

from __future__ import annotations

import socket
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from streaming import KafkaStreams, Serdes, StreamsBuilder
from streaming.admin import create_topics
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import produce, wait_for

pytestmark = pytest.mark.integration

PARTITIONS = 2
RECORDS = 6_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``/metrics``: (sample name, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def values(sample: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> list[float]:
    return [v for (n, lbls), v in sample.items() if n == name and labels.items() <= dict(lbls).items()]


def lag_of(sample: dict[tuple[str, tuple[tuple[str, str], ...]], float], topic: str) -> dict[str, float]:
    return {dict(lbls)["partition"]: v for (n, lbls), v in sample.items()
            if n == "brook_consumer_lag" and dict(lbls)["topic"] == topic}


def slow(value: dict[str, int]) -> dict[str, int]:
    time.sleep(0.0003)  # ~3,000 records/s: the input takes a few seconds, so scrapes see it in progress
    return value


def test_metrics_show_a_process_rate_and_lag_falling_to_zero(bootstrap: str, unique_name: str) -> None:
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS})
    builder = StreamsBuilder()
    builder.stream(source, key_serde=Serdes.String(), value_serde=Serdes.Json()).map_values(slow).to(sink)
    records = [GeneratedRecord(f"k{i % 50}", {"n": i}, int(time.time() * 1000)) for i in range(RECORDS)]
    produce(bootstrap, source, records, Serdes.String(), Serdes.Json())
    port = free_port()
    streams = KafkaStreams(builder.build(), {"application.id": unique_name, "bootstrap.servers": bootstrap,
                                             "commit.interval.ms": 300, "metrics.port": port})
    streams.start()
    scrapes = []
    try:
        def caught_up() -> bool:
            scrapes.append((time.monotonic(), scrape(port)))
            last = scrapes[-1][1]
            lag = lag_of(last, source)
            return (len(lag) == PARTITIONS and not any(lag.values())
                    and sum(values(last, "brook_records_processed_total")) >= RECORDS)
        wait_for(caught_up, 60, "lag to fall to zero with every record processed", interval=0.25)
        final = scrape(port)
    finally:
        assert streams.close(30)
    assert streams.exception is None

    processed = [sum(values(s, "brook_records_processed_total", application_id=unique_name)) for _, s in scrapes]
    rates = [(b - a) / (tb - ta) for (ta, _), (tb, _), a, b in zip(scrapes, scrapes[1:], processed, processed[1:],
                                                                     strict=False)]
    assert max(rates) > 0, f"no scrape-to-scrape increase of brook_records_processed_total: {processed}"
    lags = [lag_of(s, source) for _, s in scrapes]
    assert any(v > 0 for lag in lags for v in lag.values()), f"lag was never seen above zero: {lags}"
    assert lag_of(final, source) == {"0": 0.0, "1": 0.0}

    assert values(final, "brook_commits_total")[0] > 0
    assert values(final, "brook_commit_latency_seconds_count")[0] > 0
    assert values(final, "brook_commit_latency_seconds_sum")[0] > 0
    assert values(final, "brook_process_batch_seconds_count")[0] > 0
    assert values(final, "brook_e2e_latency_seconds_count")[0] > 0
    assert values(final, "brook_tasks", kind="active") == [PARTITIONS]
    assert values(final, "brook_tasks", kind="restoring") == [0]
    assert values(final, "brook_state", state="RUNNING") == [1]
    assert values(final, "brook_rebalances_total")[0] >= 1
