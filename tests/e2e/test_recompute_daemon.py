"""The recompute sensor end to end: ``dagster-daemon`` against a temporary DAGSTER_HOME (the repo's dagster.yaml:
SQLite storage, queued runs), the sensor turned on with ``dagster sensor start``, a final archive whose ERROR check
fails -> the daemon launches a run of ``reprocessed/orders`` for that day, which materializes it.

The code location is :mod:`recompute_standins` (stand-in archive and reprocessed assets; the real
``reprocessed/<app>`` asset lives in ``assets/reprocess/`` once merged).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import dagster as dg
import pytest

from assets.reprocess.automation import RECOMPUTE_SENSOR
from tests.e2e.recompute_standins import COMPLETE_TAG, FAILING_TAG, defs

ROOT = Path(__file__).resolve().parents[2]
STANDINS = Path(__file__).with_name("recompute_standins.py")
DAY = "2024-03-10"
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, log: Path) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"no {what} after {timeout:.0f} s; daemon log:\n{log.read_text()[-4000:]}")


@pytest.fixture
def dagster_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "dagster"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


@pytest.fixture
def daemon(dagster_home: Path, tmp_path: Path) -> Iterator[Path]:
    """``dagster-daemon run`` on the stand-in code location, with the recompute sensor turned on; yields its log."""
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home)}
    subprocess.run([bin_dir / "dagster", "sensor", "start", RECOMPUTE_SENSOR, "-f", str(STANDINS)],
                   cwd=ROOT, env=env, check=True, capture_output=True, timeout=120)
    log = tmp_path / "daemon.log"
    with log.open("w") as out:
        process = subprocess.Popen([bin_dir / "dagster-daemon", "run", "-f", str(STANDINS)], cwd=ROOT, env=env,
                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield log
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _sensor_cursor(instance: dg.DagsterInstance) -> str | None:
    states = [s for s in instance.all_instigator_state() if s.name == RECOMPUTE_SENSOR]
    return states[0].instigator_data.cursor if states and states[0].instigator_data else None


def _recompute_run(instance: dg.DagsterInstance) -> dg.DagsterRun | None:
    runs = instance.get_runs(dg.RunsFilter(tags={"dagster/sensor_name": RECOMPUTE_SENSOR}))
    return runs[0] if runs else None


def _archive_run(instance: dg.DagsterInstance, tags: dict[str, str]) -> None:
    defs.resolve_job_def("archive_standins").execute_in_process(
        instance=instance, partition_key=DAY, tags=tags, raise_on_error=False)


def _read_past(instance: dg.DagsterInstance, storage_id: int) -> bool:
    cursor = _sensor_cursor(instance)
    return cursor is not None and json.loads(cursor)["after"] >= storage_id


@pytest.mark.slow
def test_daemon_launches_a_recompute_for_a_failed_final_check(daemon: Path) -> None:
    instance = dg.DagsterInstance.get()
    wait_for("first sensor tick", lambda: _sensor_cursor(instance), 120, daemon)

    _archive_run(instance, {FAILING_TAG: "lines_unique"})  # WARN
    _archive_run(instance, {FAILING_TAG: "lines_complete", COMPLETE_TAG: "false"})  # an hourly partial run
    evaluations = instance.event_log_storage.get_logs_for_all_runs_by_log_id(
        dagster_event_type={dg.DagsterEventType.ASSET_CHECK_EVALUATION})
    wait_for("sensor tick past the quiet runs' checks", lambda: _read_past(instance, max(evaluations)), 120, daemon)
    assert _recompute_run(instance) is None

    _archive_run(instance, {FAILING_TAG: "lines_complete"})

    run = wait_for("recompute run", lambda: _recompute_run(instance), 120, daemon)
    assert run.tags["dagster/partition"] == DAY
    assert run.tags["dagster/run_key"] == f"reprocessed/orders/{DAY}/attempt-1"
    assert run.asset_selection == {dg.AssetKey(["reprocessed", "orders"])}
    finished = wait_for("finished recompute run", lambda: (r := instance.get_run_by_id(run.run_id)) and r.is_finished
                        and r, 180, daemon)
    assert finished.status == dg.DagsterRunStatus.SUCCESS
    materialized = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(["reprocessed", "orders"]), asset_partitions=[DAY]), limit=1)
    assert [r.event_log_entry.run_id for r in materialized.records] == [run.run_id]
