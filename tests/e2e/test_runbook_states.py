"""Runbooks run as written, from the state they create or name: platform/runbooks/archive-and-quality.md's
"Start here" blocks on a new broker of ``brook broker start`` (the worker line in the background until the
consume block shows the counts, then Ctrl-C), then its ``dagster asset materialize`` block; then
platform/runbooks/compaction.md's, which names that state as its start.

Kept apart from the checkout: the broker's workdir, the workers' state (``TMPDIR``), ``DAGSTER_HOME`` and the
archive live in a temporary directory (a copy of the platform spec through ``BROOK_PLATFORM_SPEC`` names the
archive and the broker's workdir there); nothing about the broker's address is in the environment.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from assets.archive.layout import day_row_count
from assets.platform_spec import load_platform_spec
from streaming.state import snapshots

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
RUNBOOKS = ROOT / "platform" / "runbooks"
BIN = str(Path(sys.executable).parent)


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, re.DOTALL)


def shell(code: str, env: dict[str, str], check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["bash", "-c", "set -euo pipefail\n" + code.replace(".venv/bin", BIN)], cwd=ROOT,
                            env=env, check=False, capture_output=True, text=True, timeout=timeout)
    if check:
        assert result.returncode == 0, f"{code}\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return result


def test_the_archive_and_compaction_runbooks_run_from_the_state_they_create(tmp_path: Path) -> None:
    start, inspect, *rest = sh_blocks((RUNBOOKS / "archive-and-quality.md").read_text().split("## Start here", 1)[1])
    [materialize] = [block for block in rest if "dagster asset materialize" in block]
    compaction = sh_blocks((RUNBOOKS / "compaction.md").read_text().split("## Run it", 1)[1])[0]
    assert "snapshots/wordcount/word-counts" in compaction
    assert "brook broker start" in start and "brook consume" in inspect

    spec = yaml.safe_load((ROOT / "platform" / "platform.yaml").read_text())
    spec["archive"]["location"] = str(tmp_path / "archive")
    spec["snapshots"]["location"] = str(tmp_path / "snapshots")
    spec["clusters"]["embedded"]["workdir"] = str(tmp_path / "broker")
    spec_path = tmp_path / "platform.yaml"
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    spark_conf = tmp_path / "spark-defaults.conf"
    spark_conf.write_text((ROOT / "platform" / "spark" / "spark-defaults.conf").read_text()
                          + "\nspark.master local[2]\nspark.sql.shuffle.partitions 4\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BROOK_", "DAGSTER_"))}
    env.update(BROOK_BROKER_WORKDIR=str(tmp_path / "broker"), TMPDIR=str(tmp_path), BROOK_PLATFORM_SPEC=str(spec_path),
               BROOK_SPARK_CONF=str(spark_conf))

    [worker_line] = [line for line in start.splitlines() if "brook worker run" in line]
    try:
        shell(start.replace(worker_line, ""), env)
        worker = subprocess.Popen(["bash", "-c", worker_line.split("#")[0].replace(".venv/bin", BIN)], cwd=ROOT,
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True)
        try:
            deadline = time.monotonic() + 120
            while not re.search(r"\bbe\s+3\s*$", shell(inspect, env, check=False).stdout, re.MULTILINE):
                assert worker.poll() is None, worker.communicate()[1][-3000:]
                assert time.monotonic() < deadline, "the runbook's worker wrote no counts"
                time.sleep(1)
        finally:
            os.killpg(worker.pid, signal.SIGINT)
            assert worker.wait(timeout=60) == 0
        shell(materialize.replace("$PWD/.dagster", str(tmp_path / "dagster_home")), env)
        shell(compaction.replace("$PWD/.dagster", str(tmp_path / "dagster_home")), env)
    finally:
        shell(".venv/bin/brook broker stop", env, check=False, timeout=60)

    root, today = load_platform_spec(spec_path).archive.root(), datetime.now(UTC).date()
    assert day_row_count(root, "wordcount-lines", today) == 3
    assert day_row_count(root, "wordcount-counts", today) >= 1
    manifest = snapshots.latest_manifest(str(tmp_path / "snapshots"), "wordcount", "word-counts")
    assert manifest is not None and manifest.records_read >= 1
