"""The ``brook_*`` metric families the collector exposes, parsed back from the Prometheus text format."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from streaming.metrics.collector import (
    BackpressureSample,
    IdleSample,
    InstanceSample,
    RestoreSample,
    StreamsCollector,
    TaskSample,
    ThreadSample,
)
from streaming.metrics.histogram import Histogram

DASHBOARD = Path(__file__).resolve().parents[2] / "platform/deploy/grafana-brook.json"


def histogram(*seconds: float) -> Histogram:
    h = Histogram()
    for s in seconds:
        h.observe(s)
    return h


def sample() -> InstanceSample:
    thread = ThreadSample(
        name="app-StreamThread-1", processed=1234, rebalances=2, commits=7,
        commit_latency=histogram(0.003, 0.004).snapshot(), process_latency=histogram(0.0002, 0.07).snapshot(),
        e2e_latency=histogram(0.02, 0.03, 90.0).snapshot(),
        tasks={"active": 2, "restoring": 1, "standby": 1}, lag={("in", 0): 5, ("in", 1): 0},
        task_samples=[TaskSample("0_0", dropped=3, late=2), TaskSample("0_1", dropped=0, late=0)],
        record_errors={("deserialization", "dead_letter"): 4, ("processing", "skipped"): 1},
        restored={("counts", "app-counts-changelog", 1): 500},
        restores=[RestoreSample("0_2", "counts", "app-counts-changelog", 2, remaining=120, standby=False)],
        backpressure=BackpressureSample(buffered=1500, paused=1, pauses=3, resumes=2, time_cap_hits=4,
                                        throttled_seconds=1.5, queue_full=6, queue_full_seconds=0.25),
        shed={("orders", 0): 40}, idle=[IdleSample("orders", idle=True, idle_seconds=31.5)])
    return InstanceSample("app", "RUNNING", ("CREATED", "RUNNING", "ERROR"), [thread])


def exposed() -> dict[str, object]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StreamsCollector(sample))
    text = generate_latest(registry).decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_every_family_with_its_type() -> None:
    types = {name: family.type for name, family in exposed().items()}  # type: ignore[attr-defined]
    assert types == {
        "brook_state": "gauge", "brook_records_processed": "counter", "brook_commits": "counter",
        "brook_rebalances": "counter", "brook_commit_latency_seconds": "histogram",
        "brook_process_batch_seconds": "histogram", "brook_e2e_latency_seconds": "histogram",
        "brook_tasks": "gauge", "brook_consumer_lag": "gauge", "brook_record_errors": "counter",
        "brook_dropped_records": "counter", "brook_late_records_dropped": "counter",
        "brook_restored_records": "counter", "brook_restore_remaining_records": "gauge",
        "brook_buffered_records": "gauge", "brook_paused_partitions": "gauge", "brook_backpressure_pauses": "counter",
        "brook_backpressure_resumes": "counter", "brook_processing_time_cap_hits": "counter",
        "brook_throttled_seconds": "counter", "brook_producer_queue_full": "counter",
        "brook_producer_queue_full_seconds": "counter", "brook_shed_records": "counter",
        "brook_source_idle": "gauge", "brook_source_idle_seconds": "gauge", "brook_sink_paused_partitions": "gauge",
        "brook_sink_pauses": "counter"}


def samples(name: str) -> dict[tuple[tuple[str, str], ...], float]:
    family = exposed()[name]
    return {tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("application_id", "thread"))): s.value
            for s in family.samples}  # type: ignore[attr-defined]


def test_counters_and_gauges_carry_their_labels_and_values() -> None:
    assert samples("brook_records_processed") == {(): 1234}
    assert samples("brook_state") == {(("state", "CREATED"),): 0, (("state", "RUNNING"),): 1, (("state", "ERROR"),): 0}
    assert samples("brook_consumer_lag") == {(("partition", "0"), ("topic", "in")): 5,
                                             (("partition", "1"), ("topic", "in")): 0}
    assert samples("brook_tasks") == {(("kind", "active"),): 2, (("kind", "restoring"),): 1, (("kind", "standby"),): 1}
    assert samples("brook_record_errors") == {(("action", "dead_letter"), ("stage", "deserialization")): 4,
                                              (("action", "skipped"), ("stage", "processing")): 1}
    assert samples("brook_late_records_dropped") == {(("task", "0_0"),): 2, (("task", "0_1"),): 0}
    assert samples("brook_restored_records")[
        (("partition", "1"), ("store", "counts"), ("topic", "app-counts-changelog"))] == 500
    assert samples("brook_restore_remaining_records") == {
        (("partition", "2"), ("standby", "false"), ("store", "counts"), ("task", "0_2"),
         ("topic", "app-counts-changelog")): 120}
    assert samples("brook_buffered_records") == {(): 1500}
    assert samples("brook_paused_partitions") == {(): 1}
    assert samples("brook_backpressure_pauses") == {(): 3}
    assert samples("brook_backpressure_resumes") == {(): 2}
    assert samples("brook_processing_time_cap_hits") == {(): 4}
    assert samples("brook_throttled_seconds") == {(): 1.5}
    assert samples("brook_producer_queue_full") == {(): 6}
    assert samples("brook_producer_queue_full_seconds") == {(): 0.25}
    family = exposed()["brook_records_processed"]
    assert {s.labels["application_id"] for s in family.samples} == {"app"}  # type: ignore[attr-defined]


def test_histograms_are_cumulative_with_sum_and_count() -> None:
    e2e = {(s.name, s.labels.get("le")): s.value for s in exposed()["brook_e2e_latency_seconds"].samples}  # type: ignore[attr-defined]
    assert e2e[("brook_e2e_latency_seconds_bucket", "0.01")] == 0
    assert e2e[("brook_e2e_latency_seconds_bucket", "0.025")] == 1
    assert e2e[("brook_e2e_latency_seconds_bucket", "0.05")] == 2
    assert e2e[("brook_e2e_latency_seconds_bucket", "60.0")] == 2
    assert e2e[("brook_e2e_latency_seconds_bucket", "+Inf")] == 3
    assert e2e[("brook_e2e_latency_seconds_count", None)] == 3
    assert abs(e2e[("brook_e2e_latency_seconds_sum", None)] - 90.05) < 1e-9


def test_a_bound_itself_falls_in_its_bucket() -> None:
    snapshot = histogram(0.001).snapshot()
    assert dict(snapshot.buckets)[0.001] == 1 and dict(snapshot.buckets)[0.0005] == 0


def test_the_grafana_dashboard_queries_only_exposed_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    names = {s.name for family in exposed().values() for s in family.samples}  # type: ignore[attr-defined]
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    queried = {name for expr in exprs for name in re.findall(r"\bbrook_[a-z0-9_]+", expr)}
    assert exprs and queried, "the dashboard queries nothing"
    assert queried <= names, f"the dashboard queries metrics /metrics does not expose: {sorted(queried - names)}"
    assert {f.name for f in exposed().values()} <= {  # type: ignore[attr-defined]
        re.sub(r"_(total|bucket|sum|count)$", "", n) for n in queried}, "a metric family has no panel"
    assert all('application_id=~"$application_id"' in expr for expr in exprs)
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource", "application_id"]
