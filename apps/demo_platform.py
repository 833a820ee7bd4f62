"""The demo's platform half: Brook's Dagster assets materialized over what the demo's workers produced.

Through Dagster, in this process, on the Dagster instance ``make ui`` shows (``$DAGSTER_HOME``):
changelog compaction of the word count's store (Spark), the daily archive of the orders topics and of
the word counts with their Great Expectations checks; then a fresh word count instance restores its
store from the new snapshot. The platform spec is ``platform/platform.yaml`` with the snapshot and
archive locations moved under the demo's work directory, so every demo starts clean.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}  # the runs' event log stays complete


@dataclass
class PlatformSummary:
    """What the platform did, for the demo's report."""

    steps: list[tuple[str, str, str, float]] = field(default_factory=list)  # (asset, partition, result, seconds)
    checks: list[tuple[str, str, str, bool, str]] = field(default_factory=list)  # (check, day, severity, ok, detail)
    restore: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def demo_spec(work: Path) -> Path:
    """platform.yaml with the snapshot and archive locations under ``work``."""
    spec = yaml.safe_load((ROOT / "platform" / "platform.yaml").read_text())
    spec["snapshots"]["location"] = str(work / "snapshots")
    spec["archive"]["location"] = str(work / "archive")
    path = work / "platform.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def run_platform(bootstrap: str, work: Path, order_days: list[str], today: str,
                 expected_word_counts: dict[str, int]) -> PlatformSummary:
    """Materialize compaction, archives and checks; then restore a fresh word count from the snapshot."""
    os.environ["BROOK_BOOTSTRAP_SERVERS"] = bootstrap
    os.environ["BROOK_PLATFORM_SPEC"] = str(demo_spec(work))
    import dagster as dg

    from assets.archive.keys import archive_asset_key
    from assets.definitions import defs

    summary = PlatformSummary()
    instance = dg.DagsterInstance.get()  # $DAGSTER_HOME: `make ui` shows these runs
    everything = [*[a for a in defs.assets if isinstance(a, dg.AssetsDefinition)], *defs.asset_checks]

    def run(selection: dg.AssetSelection, partition: str | None) -> None:
        started = time.monotonic()
        result = dg.materialize(everything, selection=selection, partition_key=partition, resources=defs.resources,
                                instance=instance, raise_on_error=False, run_config=QUIET)
        seconds = time.monotonic() - started
        for event in result.get_asset_materialization_events():
            materialization = event.materialization
            summary.steps.append(("/".join(materialization.asset_key.path), partition or "-",
                                  _describe(materialization.metadata), seconds))
        for evaluation in result.get_asset_check_evaluations():
            summary.checks.append((evaluation.check_name, partition or "-", evaluation.severity.value,
                                   evaluation.passed, _failing(evaluation.metadata)))
        if not result.success:
            failed = [e for e in result.all_events if e.is_step_failure]
            summary.failures.extend(f"{e.step_key}: {e.step_failure_data.error.message.strip()}" for e in failed)

    run(dg.AssetSelection.groups("compaction"), None)
    order_topics = [archive_asset_key(topic) for topic in ("orders", "order-lines", "orders-rejected", "local-buyers-hourly")]
    for day in order_days:
        run(dg.AssetSelection.assets(*order_topics), day)
    run(dg.AssetSelection.assets(archive_asset_key("wordcount-counts")), today)
    summary.restore = restore_from_snapshot(bootstrap, work, expected_word_counts)
    return summary


def _describe(metadata: dict[str, Any]) -> str:
    def value(name: str) -> Any:
        entry = metadata.get(name)
        return None if entry is None else entry.value

    if value("keys_kept") is not None:
        return (f"{value('records_read'):,} changelog records -> {value('keys_kept'):,} keys "
                f"(ratio {value('compaction_ratio'):.1f})")
    if value("rows") is not None:
        return f"{value('rows'):,} rows archived" + (f", {value('undecodable')} undecodable"
                                                      if value("undecodable") else "")
    return ""


def _failing(metadata: dict[str, Any]) -> str:
    failing = {name.removeprefix("failing "): entry.value for name, entry in metadata.items()
               if name.startswith("failing ") and entry.value}
    return ", ".join(f"{name}: {count:,}" for name, count in failing.items())


def restore_from_snapshot(bootstrap: str, work: Path, expected: dict[str, int],
                          join_timeout: float = 60) -> dict[str, Any]:
    """A word count instance on an empty state directory restores its store from the newest snapshot."""
    log = logging.getLogger("streaming")
    handler = logging.FileHandler(work / "restore.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        return _restore(bootstrap, work, expected, join_timeout)
    finally:
        log.removeHandler(handler)
        handler.close()


def _restore(bootstrap: str, work: Path, expected: dict[str, int], join_timeout: float) -> dict[str, Any]:
    from apps.wordcount import STORE, topology
    from streaming import KafkaStreams
    from streaming.runtime.kafka_streams import State
    from streaming.testing import RestoreCounter

    counter = RestoreCounter()
    app = KafkaStreams(topology(), {"application.id": "wordcount", "bootstrap.servers": bootstrap,
                                    "state.dir": str(work / "state-restore"),
                                    "state.snapshot.location": str(work / "snapshots")})
    app.set_global_state_restore_listener(counter)
    started = time.monotonic()
    app.start()
    try:
        while app.state is not State.RUNNING:
            if app.exception is not None:
                return {"error": f"{app.exception} (see {work / 'restore.log'})"}
            if time.monotonic() - started > join_timeout:
                return {"error": f"no assignment in {join_timeout:.0f} s (see {work / 'restore.log'})"}
            time.sleep(0.05)
        seconds = time.monotonic() - started
        store = dict(app.store(STORE).all())
    finally:
        app.close(30)
    return {"snapshot_keys": counter.snapshot_keys, "tail_records": counter.changelog_records, "seconds": seconds,
            "equal": store == expected}
