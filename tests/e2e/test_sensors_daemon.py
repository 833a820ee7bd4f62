"""Issue 18's sensors end to end: ``dagster-daemon run`` with the project's workspace (``assets.definitions``) on the
Postgres-backed instance of ``tests/e2e/test_dagster_postgres.py`` (whose fixture makes it, with an embedded broker
of its own), the platform spec a temporary one with low thresholds: the scaling test's counting app
(``tests/e2e/test_scale_job.py``'s :class:`Scenario`) with its store ``counts`` listed, compaction when its
changelog grew 20 records, a scaling plan when the lag stays at 500 records for 3 s, both sensors looking every 2 s.

Both sensors are turned on with ``dagster sensor start``; then, with the daemon running:

1. nothing to do: both skip (their ticks say why);
2. the workers process a little input (the lag stays under its threshold): the ``counts`` changelog grows past its
   threshold, the daemon launches the compaction run, which materializes ``snapshots/counter/counts`` (a snapshot
   holding every user's count); the growth sensor is quiet afterwards (nothing past the new snapshot) and the lag
   sensor never fired;
3. input piles up while the group commits only a little each second (a slow consumer): once the lag has stayed
   over the threshold, the daemon launches one dry run of ``scale_counter`` sized from the measured rates, which
   records an observation of ``scalings/counter`` and changes nothing; later ticks say the episode is planned.

Every run and tick is read back from the instance on PostgreSQL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
import yaml

from assets.compaction import compaction_asset_key
from assets.compaction_growth import GROWTH_SENSOR
from assets.scaling.jobs import scaling_asset_key
from assets.scaling.lag_sensor import LAG_SENSOR
from streaming.admin import watermarks
from streaming.state.snapshots import latest_manifest
from streaming.testing.postgres import PostgresServer
from tests.e2e.test_dagster_postgres import BIN, ROOT, WORKSPACE, dagster, instance_env, wait_for  # noqa: F401
from tests.e2e.test_scale_job import Scenario, commit, start

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SENSORS = (GROWTH_SENSOR, LAG_SENSOR)


@pytest.fixture
def daemon(scenario: Scenario, tmp_path: Path) -> Iterator[Path]:
    """``dagster-daemon run`` on the workspace, with the environment as :func:`scenario` set it; yields its log."""
    log = tmp_path / "daemon.log"
    with log.open("w") as out:
        process = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", str(WORKSPACE)], cwd=ROOT,
                                   env=dict(os.environ), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield log
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def ticks(instance: dg.DagsterInstance, sensor: str) -> list[tuple[str, str | None, list[str]]]:
    """(status, skip reason, run ids) of ``sensor``'s finished ticks, oldest first."""
    [state] = [s for s in instance.all_instigator_state() if s.name == sensor]
    found = instance.get_ticks(state.instigator_origin_id, state.selector_id)
    return [(t.status.value, t.skip_reason, list(t.run_ids)) for t in sorted(found, key=lambda t: t.timestamp)
            if t.status.value != "STARTED"]


def quiet_since(instance: dg.DagsterInstance, sensor: str, since: int, saying: str) -> bool:
    """Whether ``sensor`` skipped every tick after its ``since`` first ones, and one of them said ``saying``."""
    later = ticks(instance, sensor)[since:]
    assert all(status == "SKIPPED" for status, _, _ in later), later
    return any(reason is not None and saying in reason for _, reason, _ in later)


def sensor_runs(instance: dg.DagsterInstance, sensor: str) -> list[dg.DagsterRun]:
    return list(instance.get_runs(dg.RunsFilter(tags={"dagster/sensor_name": sensor})))


def finished(instance: dg.DagsterInstance, run_id: str) -> dg.DagsterRun | None:
    run = instance.get_run_by_id(run_id)
    return run if run is not None and run.is_finished else None


@pytest.fixture
def scenario(postgres: PostgresServer, instance_env: dict[str, str], unique_name: str, tmp_path: Path,  # noqa: F811
             monkeypatch: pytest.MonkeyPatch) -> Scenario:
    """The counting app on the instance's broker, its spec (low thresholds, store ``counts`` listed) in
    ``BROOK_PLATFORM_SPEC``, both sensors turned on."""
    s = start(instance_env["BROOK_BOOTSTRAP_SERVERS"], unique_name, tmp_path, monkeypatch,
              scaling={"lag_records": 500, "sustained_minutes": 0.05, "drain_minutes": 0.5, "max_partitions": 8,
                       "check_every_seconds": 2})
    spec = yaml.safe_load(s.spec_path.read_text())
    spec["apps"]["counter"]["stores"] = [{"name": "counts", "partitions_from": s.clicks}]
    spec["snapshots"]["growth"] = {"records": 20, "at_most_every_minutes": 60, "check_every_seconds": 2}
    s.spec_path.write_text(yaml.safe_dump(spec))
    for sensor in SENSORS:
        dagster(dict(os.environ), "sensor", "start", sensor, "-w", str(WORKSPACE))
    return s


def test_the_daemon_runs_a_compaction_and_a_scaling_dry_run_when_their_sensors_fire(
        scenario: Scenario, daemon: Path) -> None:
    s = scenario
    instance = dg.DagsterInstance.get()
    assert type(instance.run_storage).__name__ == "PostgresRunStorage"
    started = time.monotonic()

    # 1. Nothing to do: both sensors skip, saying why.
    wait_for("a tick of each sensor", lambda: all(ticks(instance, sensor) for sensor in SENSORS), 120, daemon)
    [(status, growth_reason, _), *_] = ticks(instance, GROWTH_SENSOR)
    assert status == "SKIPPED" and growth_reason is not None and "no changelog grew past its threshold" in growth_reason
    [(status, lag_reason, _), *_] = ticks(instance, LAG_SENSOR)
    assert (status, lag_reason) == ("SKIPPED", "no app lags long enough to plan a scaling: counter: lag 0")

    # 2. The changelog grows (the lag stays under 500): the daemon compacts that store.
    s.produce(0, 120)
    s.process()
    [compaction] = wait_for("the compaction run", lambda: sensor_runs(instance, GROWTH_SENSOR), 120, daemon)
    assert compaction.asset_selection == {compaction_asset_key("counter", "counts")}
    done = wait_for("the compaction run to finish", lambda: finished(instance, compaction.run_id), 240, daemon)
    assert done.status == dg.DagsterRunStatus.SUCCESS, daemon.read_text()[-4000:]
    [record] = instance.fetch_materializations(compaction_asset_key("counter", "counts"), limit=5).records
    assert record.event_log_entry.run_id == compaction.run_id
    manifest = latest_manifest(str(s.tmp / "snapshots"), s.app_id, "counts")
    assert manifest is not None and manifest.keys == len(Counter(r.key for r in s.produced[s.clicks]))
    compacted_at = len(ticks(instance, GROWTH_SENSOR))
    wait_for("a growth tick finding nothing past the new snapshot", lambda: quiet_since(
        instance, GROWTH_SENSOR, compacted_at, f"counter/counts: 0 records in {s.app_id}-counts-changelog past snapshot"),
        60, daemon)
    assert sensor_runs(instance, LAG_SENSOR) == []

    # 3. Input piles up while the group commits one record per partition a second: one dry run, sized from the rates.
    topics = (s.clicks, s.views)
    committed = {(t, p): end for t in topics for (_, p), (_, end) in watermarks(s.bootstrap, [(t, 0), (t, 1)]).items()}
    s.produce(120, 400)  # 800 records behind

    def dry_run_requested() -> list[dg.DagsterRun]:
        for tp in committed:
            committed[tp] += 1
        commit(s.bootstrap, s.app_id, committed)
        return sensor_runs(instance, LAG_SENSOR)

    [dry_run] = wait_for("the scaling dry run", dry_run_requested, 120, daemon)
    assert dry_run.job_name == "scale_counter" and dry_run.tags["brook/scaling_trigger"] == "consumer lag"
    assert dry_run.run_config["ops"]["scale_counter_op"]["config"] == {"partitions": 8, "dry_run": True,
                                                                        "preview": True}
    done = wait_for("the dry run to finish", lambda: finished(instance, dry_run.run_id), 180, daemon)
    assert done.status == dg.DagsterRunStatus.SUCCESS, daemon.read_text()[-4000:]
    [observation] = instance.fetch_observations(scaling_asset_key("counter"), limit=5).records
    assert observation.event_log_entry.run_id == dry_run.run_id
    assert observation.asset_observation is not None
    assert observation.asset_observation.metadata["partitions"].value == "2 -> 8"
    assert s.partitions() == 2 and s.physical(s.clicks) == s.clicks  # a dry run changes nothing
    requested_at = len(ticks(instance, LAG_SENSOR))
    wait_for("a lag tick saying the episode is planned",
             lambda: quiet_since(instance, LAG_SENSOR, requested_at, "counter: lag "), 60, daemon)
    assert "planned already" in ticks(instance, LAG_SENSOR)[-1][1], ticks(instance, LAG_SENSOR)[-1]
    assert len(sensor_runs(instance, LAG_SENSOR)) == 1 and len(sensor_runs(instance, GROWTH_SENSOR)) == 1
    print(f"\nsensors end to end with the daemon on PostgreSQL: {time.monotonic() - started:.0f} s; "
          f"growth ticks {Counter(t[0] for t in ticks(instance, GROWTH_SENSOR))}, "
          f"lag ticks {Counter(t[0] for t in ticks(instance, LAG_SENSOR))}")
