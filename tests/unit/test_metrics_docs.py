"""The metric table of docs/operations.md is what the collector exposes: every family, its type and its labels."""

from __future__ import annotations

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

DOC = Path(__file__).resolve().parents[2] / "docs/operations.md"
SUFFIXES = {"counter": "_total", "gauge": "", "histogram": ""}


def sample() -> InstanceSample:
    """One of everything, so every family has a sample and shows its labels."""
    h = Histogram()
    h.observe(0.01)
    thread = ThreadSample(
        name="t1", processed=1, rebalances=1, commits=1, commit_latency=h.snapshot(), process_latency=h.snapshot(),
        e2e_latency=h.snapshot(), tasks={"active": 1}, lag={("in", 0): 1}, task_samples=[TaskSample("0_0", 1, 1)],
        record_errors={("processing", "skipped"): 1}, restored={("counts", "c", 0): 1},
        restores=[RestoreSample("0_0", "counts", "c", 0, remaining=1, standby=False)],
        backpressure=BackpressureSample(1, 1, 1, 1, 1, 1.0, 1, 1.0, 1, 1), shed={("in", 0): 1},
        idle=[IdleSample("in", idle=True, idle_seconds=1.0)])
    return InstanceSample("app", "RUNNING", ("RUNNING",), [thread])


def exposed() -> dict[str, tuple[str, set[str]]]:
    """Exposed metric name (as a query names it: counters with ``_total``) -> (type, label names)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StreamsCollector(sample))
    families = text_string_to_metric_families(generate_latest(registry).decode())
    return {family.name + SUFFIXES[family.type]: (family.type, {label for s in family.samples for label in s.labels
                                                                if label != "le"})
            for family in families}


def documented() -> dict[str, tuple[str, set[str]]]:
    rows = re.findall(r"^\| `(brook_\w+)` \| (\w+) \| ([^|]*) \|", DOC.read_text(), re.MULTILINE)
    return {name: (kind, set(re.findall(r"`(\w+)`", labels))) for name, kind, labels in rows}


def test_the_docs_metric_table_lists_every_family_with_its_type_and_labels() -> None:
    docs, metrics = documented(), exposed()
    assert docs, f"no metric table in {DOC}"
    assert sorted(set(metrics) - set(docs)) == [], "exposed but not documented"
    assert sorted(set(docs) - set(metrics)) == [], "documented but not exposed"
    wrong = {name: (docs[name], metrics[name]) for name in docs if docs[name] != metrics[name]}
    assert wrong == {}, "documented (type, labels) != exposed"
