"""``dagster asset materialize`` from the command line: archive partitions and their quality checks, and
changelog compaction.

The code location is the one ``workspace.yaml`` names (``dagster asset materialize`` takes no
workspace file, so the test reads the module and working directory from it), with a throwaway
``DAGSTER_HOME`` holding the repo's ``dagster.yaml``, the embedded broker through
``BROOK_BOOTSTRAP_SERVERS`` and a temp platform spec through ``BROOK_PLATFORM_SPEC``. The orders
pipeline's outputs come from its real topology (run by the test driver) on generated orders.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from datetime import date
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from apps.orders import ITEMS_TOPIC, LINES_TOPIC, ORDERS_TOPIC, REJECTED_TOPIC, USERS_TOPIC, topology
from assets.archive.keys import archive_asset_key
from assets.archive.layout import day_row_count
from assets.platform_spec import load_platform_spec
from streaming.admin import create_topics
from streaming.serdes import Serdes
from streaming.testing import TopologyTestDriver, generators
from streaming.testing.kafka import produce

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DAGSTER = Path(sys.executable).parent / "dagster"
DAY = "2023-11-14"  # generated orders start at 2023-11-14T22:00Z; 2,000 of them end before midnight


def _pipeline_records() -> dict[str, list[Any]]:
    """Generated orders, and the lines and rejections the orders pipeline makes of them (same keys,
    values, timestamps)."""
    orders = generators.orders(2_000, seed=3, out_of_order=0.05, invalid=0.05)
    with TopologyTestDriver(topology(), {"application.id": "orders"}) as driver:
        driver.create_input_topic(USERS_TOPIC, Serdes.String(), Serdes.Json()).pipe_record_list(generators.users())
        driver.create_input_topic(ITEMS_TOPIC, Serdes.String(), Serdes.Json()).pipe_record_list(generators.items())
        driver.create_input_topic(ORDERS_TOPIC, Serdes.String(), Serdes.Json()).pipe_record_list(orders)
        lines = driver.create_output_topic(LINES_TOPIC, Serdes.String(), Serdes.Json()).read_records_to_list()
        rejected = driver.create_output_topic(REJECTED_TOPIC, Serdes.String(), Serdes.Json()).read_records_to_list()
    return {ORDERS_TOPIC: orders, LINES_TOPIC: lines, REJECTED_TOPIC: rejected}


def _spec(tmp_path: Path, names: dict[str, str]) -> Path:
    """The repo's spec with the orders topics renamed to ``names`` (a broker shared with other tests),
    no apps (their code names the real topics), only the rules on those topics, the archive in tmp."""
    raw = yaml.safe_load((ROOT / "platform" / "platform.yaml").read_text())
    raw["topics"] = {names[t]: raw["topics"][t] for t in names}
    raw["apps"] = {}
    raw["quality"] = [rule for rule in raw["quality"] if rule["topic"] in names]
    for rule in raw["quality"]:
        rule["topic"] = names[rule["topic"]]
        if "baseline" in rule:
            rule["baseline"] = names[rule["baseline"]]
            rule["baseline_minus"] = [names[t] for t in rule.get("baseline_minus", [])]
    raw["archive"]["location"] = str(tmp_path / "archive")
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _materialize(tmp_path: Path, bootstrap: str, spec_path: Path, *args: str) -> Path:
    """Run ``dagster asset materialize`` over the code location workspace.yaml names, with a throwaway
    DAGSTER_HOME; returns that home."""
    home = tmp_path / "dagster_home"
    home.mkdir(exist_ok=True)
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    spark_conf = tmp_path / "spark-defaults.conf"
    spark_conf.write_text((ROOT / "platform" / "spark" / "spark-defaults.conf").read_text()
                          + "\nspark.master local[2]\nspark.sql.shuffle.partitions 4\n")
    [location] = yaml.safe_load((ROOT / "workspace.yaml").read_text())["load_from"]
    module = location["python_module"]
    env = {**os.environ, "DAGSTER_HOME": str(home), "BROOK_BOOTSTRAP_SERVERS": bootstrap,
           "BROOK_PLATFORM_SPEC": str(spec_path), "BROOK_SPARK_CONF": str(spark_conf)}
    result = subprocess.run(
        [str(DAGSTER), "asset", "materialize", "-m", module["module_name"], "-d", module["working_directory"], *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    return home


def test_cli_materializes_archive_partitions_and_runs_their_checks(tmp_path: Path, bootstrap: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    suffix = uuid.uuid4().hex[:8]
    names = {t: f"{t}-{suffix}" for t in (ORDERS_TOPIC, LINES_TOPIC, REJECTED_TOPIC)}
    records = _pipeline_records()
    create_topics(bootstrap, {name: 4 for name in names.values()})
    for topic, topic_records in records.items():
        produce(bootstrap, names[topic], topic_records, Serdes.String(), Serdes.Json())

    spec_path = _spec(tmp_path, names)
    selection = ",".join(f"archive/{name}" for name in names.values())
    home = _materialize(tmp_path, bootstrap, spec_path, "--select", selection, "--partition", DAY)

    spec = load_platform_spec(spec_path)
    midnight_ms = 1_700_006_400_000
    expected_rows = {names[t]: sum(1 for r in rs if r.timestamp < midnight_ms) for t, rs in records.items()}
    archived = {name: day_row_count(spec.archive.root(), name, date.fromisoformat(DAY)) for name in names.values()}
    assert archived == expected_rows

    monkeypatch.setenv("DAGSTER_HOME", str(home))  # dagster.yaml's storage reads it
    instance = dg.DagsterInstance.from_config(str(home))
    for name in names.values():
        event = instance.get_latest_materialization_event(archive_asset_key(name))
        assert event is not None and event.asset_materialization.partition == DAY
        assert event.asset_materialization.metadata["rows"].value == expected_rows[name]
    check_keys = [dg.AssetCheckKey(archive_asset_key(rule.topic), rule.name) for rule in spec.quality]
    executions = instance.event_log_storage.get_latest_asset_check_execution_by_key(check_keys)
    assert set(executions) == set(check_keys)
    for key, execution in executions.items():
        evaluation = execution.event.dagster_event.event_specific_data
        assert evaluation.passed, (key, evaluation.description)
        assert evaluation.metadata["day"].value == DAY


def test_cli_materializes_a_changelog_compaction(tmp_path: Path, bootstrap: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The word count's store compacted by `dagster asset materialize`: the snapshot holds the latest value
    of every key of the changelog (written here as a worker would), tombstoned keys gone."""
    from assets.compaction import compaction_asset_key
    from streaming.naming import changelog_topic
    from streaming.state import snapshots
    from streaming.testing.generators import GeneratedRecord

    application_id = f"wordcount-{uuid.uuid4().hex[:8]}"  # the broker is shared with other tests
    changelog = changelog_topic(application_id, "word-counts")
    create_topics(bootstrap, {changelog: 4})
    updates = [GeneratedRecord(f"w{i % 50}", i, 1_700_000_000_000 + i) for i in range(1_000)]
    deleted = [GeneratedRecord(f"w{i}", None, 1_700_000_001_000 + i) for i in range(5)]
    produce(bootstrap, changelog, updates + deleted, Serdes.String(), Serdes.Long())

    raw = yaml.safe_load((ROOT / "platform" / "platform.yaml").read_text())
    raw["apps"] = {"wordcount": {**raw["apps"]["wordcount"], "application_id": application_id}}
    raw["snapshots"]["location"] = str(tmp_path / "snapshots")
    spec_path = tmp_path / "platform.yaml"
    spec_path.write_text(yaml.safe_dump(raw, sort_keys=False))
    home = _materialize(tmp_path, bootstrap, spec_path, "--select", "snapshots/wordcount/word-counts")

    manifest = snapshots.latest_manifest(str(tmp_path / "snapshots"), application_id, "word-counts")
    assert manifest is not None and manifest.records_read == len(updates) + len(deleted)
    snapshot = {Serdes.String().deserialize(k): Serdes.Long().deserialize(v) for p in range(4)
                for batch in snapshots.read_partition(str(tmp_path / "snapshots"), manifest, p) for k, v, _ in batch}
    latest = {r.key: r.value for r in updates}
    assert snapshot == {k: v for k, v in latest.items() if k not in {r.key for r in deleted}}
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    event = dg.DagsterInstance.from_config(str(home)).get_latest_materialization_event(
        compaction_asset_key("wordcount", "word-counts"))
    assert event is not None and event.asset_materialization.metadata["keys_kept"].value == 45
