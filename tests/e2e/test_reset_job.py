"""The Dagster job ``reset_<app>`` (issue 17, item 2) on a real Dagster instance and the embedded broker: a dry run
records the plan as an observation of ``resets/<app>``; a run with ``execute: true`` and that plan carries it out
and records a materialization of ``resets/<app>`` with the plan as metadata; a refusal fails the run with its one
line. Also the runbook's ``dagster job execute`` of the code location (``platform/runbooks/reset.md``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
import yaml

from apps.wordcount import INPUT_TOPIC, OUTPUT_TOPIC, WORDS_TOPIC
from apps.wordcount import topology as wordcount_topology
from assets.platform_spec import load_platform_spec
from assets.reset.jobs import reset_jobs
from assets.reset.records import reset_asset_key, reset_asset_spec
from assets.resources import KafkaResource, PlatformResource
from streaming import KafkaStreams
from streaming.admin import create_topics
from streaming.broker import EmbeddedBroker
from streaming.runtime.kafka_streams import State
from streaming.runtime.reset_epoch import read_reset_epoch
from streaming.serdes import Serdes
from streaming.testing import generators
from streaming.testing.kafka import group_lag, produce, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
DAGSTER = Path(sys.executable).parent / "dagster"


@pytest.fixture
def bootstrap_of_own_broker(tmp_path: Path) -> Iterator[str]:
    with EmbeddedBroker(workdir=tmp_path / "broker") as broker:
        yield broker.bootstrap_servers


def _word_count_ran(bootstrap: str, tmp_path: Path) -> None:
    create_topics(bootstrap, {topic: 2 for topic in (INPUT_TOPIC, WORDS_TOPIC, OUTPUT_TOPIC)})
    produce(bootstrap, INPUT_TOPIC, generators.words(100, seed=2), Serdes.String(), Serdes.String())
    streams = KafkaStreams(wordcount_topology(), {"application.id": "wordcount", "bootstrap.servers": bootstrap,
                                                  "state.dir": str(tmp_path / "state"), "commit.interval.ms": 200})
    streams.start()
    try:
        wait_for(lambda: streams.state is State.RUNNING and all(
            group_lag(bootstrap, "wordcount", topic, 2) == 0 for topic in (INPUT_TOPIC, WORDS_TOPIC)), 90,
            "the word count to process its input")
    finally:
        assert streams.close(60)


def _spec(tmp_path: Path) -> Path:
    raw = yaml.safe_load((ROOT / "platform" / "platform.yaml").read_text())
    raw["snapshots"]["location"] = str(tmp_path / "snapshots")
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_reset_job_dry_run_then_execute_records_the_plan(bootstrap_of_own_broker: str, tmp_path: Path) -> None:
    bootstrap = bootstrap_of_own_broker
    _word_count_ran(bootstrap, tmp_path)
    spec_path = _spec(tmp_path)
    spec = load_platform_spec(spec_path)
    defs = dg.Definitions(assets=[reset_asset_spec("wordcount", "wordcount")], jobs=reset_jobs(spec),
                          resources={"kafka": KafkaResource(bootstrap_servers=bootstrap),
                                     "platform": PlatformResource(path=str(spec_path))})
    job = defs.get_job_def("reset_wordcount")

    def run(config: dict, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
        return job.execute_in_process(run_config={"ops": {"reset_wordcount_op": {"config": config}}},
                                      instance=instance, raise_on_error=False)

    with dg.instance_for_test() as instance:
        dry = run({"to_earliest": True, "plan_dir": str(tmp_path / "plans")}, instance)
        assert dry.success
        [observation] = [event.event_specific_data.asset_observation for event in dry.all_events
                         if event.event_type_value == "ASSET_OBSERVATION"]
        assert observation.asset_key == reset_asset_key("wordcount")
        plan_path = observation.metadata["plan_path"].value
        plan = json.loads(Path(plan_path).read_text())
        assert observation.metadata["fingerprint"].value == plan["fingerprint"]
        assert read_reset_epoch({"bootstrap.servers": bootstrap}, "wordcount").epoch == "none"  # a dry run

        refused = run({"to_datetime": "2999-01-01T00:00:00"}, instance)
        assert not refused.success
        [failure] = [event.event_specific_data.error_display_string for event in refused.all_events
                     if event.event_type_value == "STEP_FAILURE"]
        assert "--to-datetime 2999-01-01T00:00:00 is in the future" in failure

        mixed = run({"execute": True, "plan": plan_path, "to_offset": 3}, instance)
        assert not mixed.success  # execute carries out a plan: no other choice with it

        executed = run({"execute": True, "plan": plan_path}, instance)
        assert executed.success
        assert read_reset_epoch({"bootstrap.servers": bootstrap}, "wordcount").epoch == "1"
        event = instance.get_latest_materialization_event(reset_asset_key("wordcount"))
        assert event is not None and event.run_id == executed.run_id
        metadata = event.asset_materialization.metadata
        assert metadata["plan"].value == plan
        assert metadata["epoch"].value == "none -> 1"
        assert metadata["topics_recreated"].value == ["wordcount-1-stream-time", "wordcount-word-counts-changelog",
                                                         "wordcount-word-counts-pending-changelog"]

        again = run({"execute": True, "plan": plan_path}, instance)  # the same plan again: the cluster moved on
        assert not again.success


def test_runbook_dagster_job_execute_dry_run(bootstrap_of_own_broker: str, tmp_path: Path) -> None:
    """``dagster job execute -m assets.definitions -j reset_wordcount -c reset.yaml``, as the runbook shows it."""
    bootstrap = bootstrap_of_own_broker
    _word_count_ran(bootstrap, tmp_path)
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    config = tmp_path / "reset.yaml"
    config.write_text("ops:\n  reset_wordcount_op:\n    config:\n      to_earliest: true\n")
    done = subprocess.run([str(DAGSTER), "job", "execute", "-m", "assets.definitions", "-j", "reset_wordcount",
                           "-c", str(config)], cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "DAGSTER_HOME": str(home), "BROOK_BOOTSTRAP_SERVERS": bootstrap,
                               "BROOK_PLATFORM_SPEC": str(_spec(tmp_path)), "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    [plan] = (tmp_path / ".brook" / "resets").glob("wordcount-*.json")
    assert json.loads(plan.read_text())["epoch"] == {"before": "none", "after": "1"}
