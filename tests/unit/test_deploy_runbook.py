"""``platform/runbooks/deploy.md`` gives the commands and files the cluster tests run: the same ``spark-class``
classes and flags as :mod:`streaming.testing.spark_cluster`, the same code zip, the same Dagster commands and
instance file as ``tests/e2e/test_dagster_postgres.py``."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from streaming.testing.spark_cluster import CODE_PACKAGES, MASTER_CLASS, WORKER_CLASS, SparkStandaloneCluster
from tests.e2e.test_dagster_postgres import RESET_JOB, SCHEDULE, TEMPLATE

ROOT = Path(__file__).resolve().parents[2]
RUNBOOK = (ROOT / "platform" / "runbooks" / "deploy.md").read_text()


def flags(words: list[str]) -> set[str]:
    return {word for word in words if word.startswith("--")}


def runbook_command(marker: str) -> list[str]:
    """The runbook's command line containing ``marker`` (continuation lines joined, comment dropped), split into
    words."""
    joined = RUNBOOK.replace("\\\n", " ")
    [line] = [line for line in joined.splitlines() if marker in line and not line.lstrip().startswith("#")]
    return line.split(" #", 1)[0].split()


def test_the_spark_commands_are_the_clusters(tmp_path: Path) -> None:
    cluster = SparkStandaloneCluster(tmp_path)
    for command, marker in ((cluster.master_command(), MASTER_CLASS), (cluster.worker_command(0), WORKER_CLASS)):
        documented = runbook_command(marker)
        assert documented[0] == "$SPARK_HOME/bin/spark-class" and command[0].endswith("/bin/spark-class")
        assert flags(documented) == flags(command), marker
    assert runbook_command("-m zipfile")[-len(CODE_PACKAGES):] == list(CODE_PACKAGES)
    assert "SPARK_HOME=$(python -c 'import pyspark,os;print(os.path.dirname(pyspark.__file__))')" in RUNBOOK


def test_the_dagster_steps_are_the_tests() -> None:
    for command in ("CREATE ROLE dagster LOGIN PASSWORD", "-O dagster dagster", "dagster-daemon run -w workspace.yaml",
                    "dagster sensor start recompute_failed_days -w workspace.yaml",
                    f"dagster schedule start {SCHEDULE} -w workspace.yaml",
                    f"dagster job launch -w workspace.yaml -j {RESET_JOB}",
                    f"cp platform/deploy/{TEMPLATE.name} \"$DAGSTER_HOME/dagster.yaml\""):
        assert command in RUNBOOK, command
    storage = yaml.safe_load(TEMPLATE.read_text())["storage"]["postgres"]["postgres_db"]
    from_env = {value["env"] for value in storage.values() if isinstance(value, dict)}
    exported = set(re.findall(r"(DAGSTER_PG_[A-Z]+)=", RUNBOOK))
    assert from_env == exported == {"DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD",
                                    "DAGSTER_PG_DB"}
