"""Dagster on PostgreSQL: ``dagster-daemon run`` with the project's workspace against an instance whose storage
(runs, event log, schedules) is ``dagster-postgres`` on a throwaway Debian ``postgresql`` server.

``$DAGSTER_HOME/dagster.yaml`` is ``platform/deploy/dagster-postgres.yaml`` as shipped, its ``DAGSTER_PG_*``
variables naming the test's server; the commands are the runbook's (``platform/runbooks/deploy.md``): a role and
a database for Dagster (``psql``, ``createdb``), ``dagster sensor start``, ``dagster schedule start``, ``dagster
job launch`` (a queued run: the word count's reset, a dry run, against an embedded broker of its own holding the
app's topics) and ``dagster-daemon run``. The daemon ticks the sensor and starts the queued run; both are then
read from the database with SQLAlchemy.
"""

from __future__ import annotations

import json
import os
import secrets
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
import sqlalchemy as sa

from assets.reprocess.automation import RECOMPUTE_SENSOR
from streaming.admin import create_topics
from streaming.broker import EmbeddedBroker
from streaming.testing.postgres import PostgresServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
WORKSPACE = ROOT / "workspace.yaml"
TEMPLATE = ROOT / "platform" / "deploy" / "dagster-postgres.yaml"
RESET_JOB = "reset_wordcount"
SCHEDULE = "nightly_compaction"
WORDCOUNT_TOPICS = ["wordcount-lines", "wordcount-words", "wordcount-counts"]
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, log: Path) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(1)
    raise AssertionError(f"no {what} after {timeout:.0f} s; daemon log:\n{log.read_text()[-4000:]}")


@pytest.fixture
def instance_env(postgres: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """The runbook's role and database ``dagster``, DAGSTER_HOME with the shipped Postgres dagster.yaml, DAGSTER_PG_*
    naming them, and an embedded broker of the test's own (the app's real topic names) as
    ``BROOK_BOOTSTRAP_SERVERS``; set here and returned for the commands' environment."""
    password = secrets.token_hex(12)
    postgres.client("psql", "-d", "postgres", "-c", f"CREATE ROLE dagster LOGIN PASSWORD '{password}'")
    postgres.client("createdb", "-O", "dagster", "dagster")
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(TEMPLATE, home / "dagster.yaml")
    broker = EmbeddedBroker(workdir=tmp_path / "broker")
    broker.start()
    try:
        create_topics(broker.bootstrap_servers, {topic: 4 for topic in WORDCOUNT_TOPICS})
        variables = {"DAGSTER_HOME": str(home), "DAGSTER_PG_HOST": postgres.host, "DAGSTER_PG_PORT": str(postgres.port),
                     "DAGSTER_PG_USER": "dagster", "DAGSTER_PG_PASSWORD": password,
                     "DAGSTER_PG_DB": "dagster", "BROOK_BOOTSTRAP_SERVERS": broker.bootstrap_servers}
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        yield {**os.environ, **variables}
    finally:
        broker.stop()


def dagster(env: dict[str, str], *args: str) -> None:
    result = subprocess.run([str(BIN / "dagster"), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=180, check=False)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]


def test_the_daemon_on_postgres_ticks_a_sensor_and_runs_a_queued_job(
        postgres: PostgresServer, instance_env: dict[str, str], tmp_path: Path) -> None:
    dagster(instance_env, "sensor", "start", RECOMPUTE_SENSOR, "-w", str(WORKSPACE))
    dagster(instance_env, "schedule", "start", SCHEDULE, "-w", str(WORKSPACE))
    run_config = {"ops": {f"{RESET_JOB}_op": {"config": {"plan_dir": str(tmp_path / "plans")}}}}
    dagster(instance_env, "job", "launch", "-w", str(WORKSPACE), "-j", RESET_JOB, "--config-json", json.dumps(run_config))

    instance = dg.DagsterInstance.get()
    assert type(instance.run_storage).__name__ == "PostgresRunStorage"
    [queued] = instance.get_runs(dg.RunsFilter(job_name=RESET_JOB))
    assert queued.status == dg.DagsterRunStatus.QUEUED, "nothing starts it but the daemon"

    log = tmp_path / "daemon.log"
    with log.open("w") as out:
        daemon = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", str(WORKSPACE)], cwd=ROOT,
                                  env=instance_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    engine = sa.create_engine(postgres.url("dagster", "dagster", instance_env["DAGSTER_PG_PASSWORD"]))
    try:
        with engine.connect() as db:
            selectors = {state.name: state.selector_id for state in instance.all_instigator_state()}
            started = db.execute(sa.text("SELECT selector_id, status FROM instigators WHERE selector_id IN :ids")
                                 .bindparams(sa.bindparam("ids", expanding=True)),
                                 {"ids": [selectors[RECOMPUTE_SENSOR], selectors[SCHEDULE]]})
            assert sorted(status for _, status in started) == ["RUNNING", "RUNNING"], "both turned on"

            def sensor_ticks() -> list[sa.Row[tuple[str, str]]]:
                ticks = list(db.execute(sa.text("SELECT status, type FROM job_ticks WHERE selector_id = :id"),
                                        {"id": selectors[RECOMPUTE_SENSOR]}))
                db.commit()
                return ticks

            def finished_run() -> str | None:
                status = db.execute(sa.text("SELECT status FROM runs WHERE run_id = :id"), {"id": queued.run_id})
                db.commit()  # a fresh snapshot for the next poll
                found = status.scalar()
                return found if found in ("SUCCESS", "FAILURE", "CANCELED") else None

            assert wait_for("finished reset run", finished_run, 240, log) == "SUCCESS", log.read_text()[-4000:]
            ticks = wait_for("sensor tick", sensor_ticks, 120, log)
            assert {tick.type for tick in ticks} == {"SENSOR"}
            assert all(tick.status != "FAILURE" for tick in ticks), ticks
            events = db.execute(sa.text("SELECT dagster_event_type, count(*) FROM event_logs WHERE run_id = :id "
                                        "AND dagster_event_type IS NOT NULL GROUP BY dagster_event_type"),
                                {"id": queued.run_id})
            counts = dict(events.tuples().all())
            launched_by_the_daemon = [dg.DagsterEventType.RUN_ENQUEUED, dg.DagsterEventType.RUN_STARTING,
                                      dg.DagsterEventType.RUN_SUCCESS,
                                      dg.DagsterEventType.ASSET_OBSERVATION]  # the dry run's record
            assert all(counts.get(kind.value) == 1 for kind in launched_by_the_daemon), sorted(counts.items())
    finally:
        engine.dispose()
        os.killpg(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()
    [plan] = (tmp_path / "plans").rglob("*.json")
    assert json.loads(plan.read_text())["application_id"] == "wordcount", "the dry run wrote its plan"
