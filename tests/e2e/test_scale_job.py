"""Issue 18's must-show: an app grown from 2 to 4 partitions through the Dagster job ``scale_<app>`` (migrate), then
shrunk from 4 to 2, on the embedded broker with real workers (``brook worker run`` with the platform spec).

The app (``tests/integration/workloads/scaling_app.py``) counts clicks per user (a key-value store), per user and
minute (a window store), and joins clicks with the same user's views within 10 minutes (a stream-stream join's two
window-store buffers). Every record of the run is within 10 minutes of every other, so every click pairs with every
view of its user. After each scaling, new input is produced to the new generation and processed by restarted
workers; then, against an oracle computed here from every record produced:

* every input record of the new generation sits on the partition murmur2 gives its key for the new count, and every
  changelog key on its record key's;
* each user's count (the last update on the output) is exactly the number of its clicks, old and new: the state
  moved, and nothing was processed twice (a record processed again would count twice);
* each (user, minute) count in the new window store's changelog is exactly the oracle's;
* the join's output is exactly one record per (click, view) pair of a user: a new click pairs with the views from
  before the scaling (the buffers moved), and no pair is emitted twice.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import dagster as dg
import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import SparkSession

from assets.platform_spec import PlatformSpec, load_platform_spec
from assets.resources import KafkaResource, PlatformResource, SparkResource, spark_resource
from assets.scaling.jobs import scale_definitions, scale_job, scaling_asset_key
from assets.scaling.lag_sensor import lag_sensor
from streaming import Serdes
from streaming.admin import create_topics, partition_counts, watermarks
from streaming.naming import changelog_topic, generation_name
from streaming.runtime.membership import live_workers
from streaming.runtime.partitioning import partition_for_key
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import group_lag, produce, read_topic, wait_for
from streaming.testing.workers import start_worker, stop_workers

pytestmark = [pytest.mark.slow, pytest.mark.integration]
ROOT = Path(__file__).resolve().parents[2]
STRING, LONG, BYTES = Serdes.String(), Serdes.Long(), Serdes.Bytes()
USERS = 40
BASE = 1_700_000_000_000
STORES = ("counts", "per-minute", "seen-this-join-store", "seen-other-join-store")


class Scenario:
    def __init__(self, bootstrap: str, app_id: str, tmp_path: Path, scaling: dict[str, float] | None = None) -> None:
        self.bootstrap, self.app_id, self.tmp = bootstrap, app_id, tmp_path
        self.clicks, self.views = f"{app_id}-clicks", f"{app_id}-views"
        self.counts, self.joined = f"{app_id}-counts", f"{app_id}-joined"
        self.spec_path = tmp_path / "platform.yaml"
        self.config = tmp_path / "worker.yaml"
        self.produced: dict[str, list[GeneratedRecord]] = {self.clicks: [], self.views: []}
        self.config.write_text(yaml.safe_dump({"application.id": app_id, "commit.interval.ms": 200,
                                               "state.snapshot.location": str(tmp_path / "snapshots")}))
        self.spec_path.write_text(yaml.safe_dump({
            "version": 1, "default_cluster": "embedded",
            "clusters": {"embedded": {"bootstrap_servers": bootstrap, "embedded": True}},
            "topics": {t: {"partitions": 2, "key": "string", "value": "long" if t == self.counts else "string"}
                       for t in (self.clicks, self.views, self.counts, self.joined)},
            "apps": {"counter": {"application_id": app_id,
                                 "topology": "tests.integration.workloads.scaling_app:topology",
                                 "config": str(self.config), "inputs": [self.clicks, self.views],
                                 "outputs": [self.counts, self.joined], "co_partitioned": [[self.clicks, self.views]]}},
            "snapshots": {"location": str(tmp_path / "snapshots")}, "scaling": scaling or {},
        }))

    def spec(self) -> PlatformSpec:
        return load_platform_spec(self.spec_path)

    def physical(self, topic: str) -> str:
        return self.spec().apps["counter"].physical_topic(topic)

    def partitions(self) -> int:
        return self.spec().topics[self.clicks].partitions

    def produce(self, start: int, count: int) -> None:
        """``count`` clicks and as many views, numbered from ``start``, 250 ms apart, to the current generation."""
        clicks = [GeneratedRecord(f"user-{i % USERS}", f"c{i}", BASE + i * 250) for i in range(start, start + count)]
        views = [GeneratedRecord(f"user-{i * 7 % USERS}", f"v{i}", BASE + i * 250 + 100)
                 for i in range(start, start + count)]
        for topic, records in ((self.clicks, clicks), (self.views, views)):
            produce(self.bootstrap, self.physical(topic), records, STRING, STRING)
            self.produced[topic].extend(records)

    def start_workers(self, workdir: Path) -> list[subprocess.Popen[bytes]]:
        """Two ``brook worker run`` of the app here, logging to ``workdir/worker-<i>.log``."""
        return [start_worker(self.bootstrap, "tests.integration.workloads.scaling_app:topology", self.config, workdir,
                             i, ROOT) for i in range(2)]

    def process(self) -> str:
        """Two workers run until the group committed every input of the current generation, then stop; their logs."""
        workdir = self.tmp / f"workers-{self.partitions()}-{len(self.produced[self.clicks])}"
        workdir.mkdir()
        workers = self.start_workers(workdir)
        try:
            n = self.partitions()
            wait_for(lambda: all(group_lag(self.bootstrap, self.app_id, self.physical(t), n) == 0
                                 for t in (self.clicks, self.views))
                     or any(w.poll() is not None for w in workers), 120, "the workers to commit every input")
            assert all(w.poll() is None for w in workers), (workdir / "worker-0.log").read_text()[-3000:]
        finally:
            stop_workers(workers)  # one after the other (a rolling stop)
        return "".join((workdir / f"worker-{i}.log").read_text(errors="replace") for i in range(2))

    def scale(self, partitions: int, spark: SparkSession, *, dry_run: bool = False, mode: str = "migrate",
              topics: list[str] | None = None) -> dg.ExecuteInProcessResult:
        defs = dg.Definitions.merge(scale_definitions(self.spec()), dg.Definitions(resources={
            "kafka": KafkaResource(bootstrap_servers=self.bootstrap),
            "platform": PlatformResource(path=str(self.spec_path)),
            # the job's session is ``spark`` (the local one, or one on a cluster), made with its conf
            "pyspark": SparkResource(spark_config={k: str(v) for k, v in spark.sparkContext.getConf().getAll()})}))
        return defs.resolve_job_def("scale_counter").execute_in_process(run_config={"ops": {"scale_counter_op": {
            "config": {"partitions": partitions, "dry_run": dry_run, "mode": mode, "topics": topics}}}},
            raise_on_error=False)

    def check(self) -> None:
        """The module doc's checks against the oracle of everything produced so far."""
        n = self.partitions()
        clicks, views = self.produced[self.clicks], self.produced[self.views]
        for topic in (self.clicks, self.views):
            assert all(r.partition == partition_for_key(r.key.encode(), n)
                       for r in read_topic(self.bootstrap, self.physical(topic), STRING, STRING, n))
        last_count = {r.key: r.value for r in read_topic(self.bootstrap, self.counts, STRING, LONG, 2)}
        assert last_count == Counter(r.key for r in clicks)
        per_minute = self.spec().apps["counter"].physical_changelog("per-minute")
        windows = {}
        for r in read_topic(self.bootstrap, per_minute, BYTES, LONG, n):
            key = bytes(r.key)
            assert r.partition == partition_for_key(key[:-12], n)
            windows[(key[:-12].decode(), int.from_bytes(key[-12:-4], "big"))] = r.value
        assert windows == Counter((r.key, r.timestamp - r.timestamp % 60_000) for r in clicks)
        joined = Counter(r.value for r in read_topic(self.bootstrap, self.joined, STRING, STRING, 2))
        assert joined == Counter(f"{c.value}|{v.value}" for c in clicks for v in views if c.key == v.key)


def start(bootstrap: str, app_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
          scaling: dict[str, float] | None = None, scenario: type[Scenario] = Scenario) -> Scenario:
    """A :class:`Scenario` with the app's topics created (2 partitions) and named in the environment, its spec in
    ``BROOK_PLATFORM_SPEC``."""
    s = scenario(bootstrap, app_id, tmp_path, scaling)
    for name, topic in (("CLICKS", s.clicks), ("VIEWS", s.views), ("COUNTS", s.counts), ("JOINED", s.joined)):
        monkeypatch.setenv(f"SCALE_{name}", topic)
    monkeypatch.setenv("BROOK_PLATFORM_SPEC", str(s.spec_path))
    create_topics(bootstrap, {s.clicks: 2, s.views: 2, s.counts: 2, s.joined: 2})
    return s


def scale_and_resume(s: Scenario, partitions: int, generation: int, spark: SparkSession) -> str:
    """Scale through the job to ``partitions`` (the app's ``generation``), check the moved state, produce new input,
    process it with restarted workers and check again: every store of every new task restored from the scaling's
    fresh snapshots of the new generation. The workers' logs."""
    before = s.partitions()
    result = s.scale(partitions, spark)
    assert result.success, failure(result)
    materialization = result.asset_materializations_for_node("scale_counter_op")[0]
    assert materialization.asset_key == scaling_asset_key("counter")
    assert materialization.metadata["partitions"].value == f"{before} -> {partitions}"
    app = s.spec().apps["counter"]
    assert s.partitions() == partitions and app.physical_topic(s.clicks) == generation_name(s.clicks, generation)
    assert app.physical_changelog("counts") == generation_name(changelog_topic(s.app_id, "counts"), generation)
    s.check()  # before new input: the moved state is the old state
    s.produce(400 * (generation - 1), 200)
    logs = s.process()
    s.check()
    loaded = re.findall(r"store '([\w-]+)': loaded snapshot \w+ of (\S+)\[(\d+)\]", logs)
    assert {(store, topic, int(p)) for store, topic, p in loaded} == {
        (store, app.physical_changelog(store), p) for store in STORES for p in range(partitions)}
    return logs


def test_an_app_grows_from_2_to_4_partitions_and_shrinks_back_through_the_scale_job(
        bootstrap: str, unique_name: str, tmp_path: Path, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    s = start(bootstrap, unique_name, tmp_path, monkeypatch)
    s.produce(0, 400)
    s.process()
    s.check()
    for partitions, generation in ((4, 2), (2, 3)):
        scale_and_resume(s, partitions, generation, spark)


def failure(result: dg.ExecuteInProcessResult) -> str:
    """The one line a failed run gave (its step failure's description)."""
    assert not result.success
    event = next(e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE)
    return event.step_failure_data.user_failure_data.description  # type: ignore[union-attr]


def test_scaling_is_refused_with_one_line_and_nothing_changed(bootstrap: str, unique_name: str, tmp_path: Path,
                                                              spark: SparkSession,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    s = start(bootstrap, unique_name, tmp_path, monkeypatch)
    s.produce(0, 50)
    s.process()
    before = s.spec_path.read_text()
    assert "must be an integer of 1 or more, got 0" in failure(s.scale(0, spark, dry_run=True))
    assert "already has 2 partitions: nothing to scale" in failure(s.scale(2, spark, dry_run=True))
    split = failure(s.scale(4, spark, dry_run=True, topics=[s.clicks]))
    assert "alone would split co-partition group" in split and "name the whole group" in split
    refused = failure(s.scale(4, spark, dry_run=True, mode="in_place"))
    assert "CreatePartitions" in refused and "migrate" in refused
    workdir = tmp_path / "live"
    workdir.mkdir()
    worker = start_worker(bootstrap, "tests.integration.workloads.scaling_app:topology", s.config, workdir, 0, ROOT)
    try:
        wait_for(lambda: bool(live_workers({"bootstrap.servers": bootstrap}, unique_name)), 60,
                 "the worker's announcement")
        live = failure(s.scale(4, spark))
        assert "alive" in live and "\n" not in live, live
    finally:
        stop_workers([worker])
    assert s.spec_path.read_text() == before
    new = [generation_name(t, 2) for t in (s.clicks, s.views)]
    assert partition_counts(bootstrap, new) == dict.fromkeys(new)  # no topic of a new generation was created


def brook(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streaming.cli.main", *args], check=False, cwd=ROOT,
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=600)


def test_the_runbook_commands_plan_execute_and_delete_the_old_generation(
        bootstrap: str, unique_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """platform/runbooks/scale-partitions.md, steps 2, 3 and 5, from a shell."""
    s = start(bootstrap, unique_name, tmp_path, monkeypatch)
    env = {"BROOK_BOOTSTRAP_SERVERS": bootstrap}
    s.produce(0, 100)
    s.process()
    plan = tmp_path / "plan.json"

    planned = brook("app", "scale", "counter", "--partitions", "4", "--plan", str(plan), env=env)
    assert planned.returncode == 0, planned.stderr[-2000:]
    assert f"brook app scale counter --execute --plan {plan}" in planned.stdout and plan.is_file()
    assert s.partitions() == 2  # a dry run changes nothing
    executed = brook("app", "scale", "counter", "--execute", "--plan", str(plan), env=env)
    assert executed.returncode == 0, executed.stdout[-2000:] + executed.stderr[-2000:]
    assert "counter scaled 2 -> 4 partitions" in executed.stdout
    assert s.partitions() == 4 and s.physical(s.clicks) == generation_name(s.clicks, 2)
    s.check()

    in_use = brook("topics", "delete", generation_name(s.clicks, 2), env=env)
    assert in_use.returncode != 0 and "in use now" in in_use.stderr, in_use.stderr
    old = [s.clicks, s.views, *(changelog_topic(unique_name, store) for store in STORES)]
    deleted = brook("topics", "delete", *old, env=env)
    assert deleted.returncode == 0, deleted.stderr[-2000:]
    assert partition_counts(bootstrap, old) == dict.fromkeys(old)


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """The group's offsets, committed as the group's workers would (the group has no members)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def test_sustained_lag_requests_one_dry_run_sized_from_the_measured_rates(
        bootstrap: str, unique_name: str, tmp_path: Path, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    s = start(bootstrap, unique_name, tmp_path, monkeypatch, scaling={"lag_records": 1_000, "sustained_minutes": 1,
                                                                      "headroom": 1.5, "drain_minutes": 30})
    now = [1_800_000_000.0]
    job = scale_job("counter", unique_name)
    sensor = lag_sensor(s.spec(), {"counter": job}, clock=lambda: now[0])
    defs = dg.Definitions(jobs=[job], sensors=[sensor], resources={
        "kafka": KafkaResource(bootstrap_servers=bootstrap), "platform": PlatformResource(path=str(s.spec_path)),
        "pyspark": spark_resource()})
    cursor: list[str | None] = [None]

    def tick(after_s: float) -> tuple[list[dg.RunRequest], str | None]:
        now[0] += after_s
        data = sensor.evaluate_tick(dg.build_sensor_context(cursor=cursor[0], definitions=defs,
                                                            resources={"kafka": KafkaResource(bootstrap_servers=bootstrap)}))
        cursor[0] = data.cursor
        return list(data.run_requests or []), data.skip_message

    def ends() -> dict[tuple[str, int], int]:
        return {(t, p): n for t in (s.clicks, s.views) for (_, p), (_, n) in
                watermarks(bootstrap, [(t, 0), (t, 1)]).items()}

    s.produce(0, 300)  # 600 records behind: under the threshold
    assert tick(0) == ([], "no app lags long enough to plan a scaling: counter: lag 600")
    s.produce(300, 300)  # 1,200 behind: over, for 0 of the 1 minute
    requests, skipped = tick(30)
    assert requests == [] and skipped is not None and "counter: lag 1,200 for 0 of 1 min" in skipped
    # 60 s on: 200 processed (3.3/s, 1.7/s per partition), 400 arrived (6.7/s): 1.5 * (6.7 + 1,400 / 1,800) / 1.7
    # = 6.7 -> 7 partitions.
    commit(bootstrap, unique_name, {tp: 50 for tp in ends()})
    s.produce(600, 200)
    requests, skipped = tick(60)
    assert skipped is None and len(requests) == 1, skipped
    request = requests[0]
    config = request.run_config["ops"]["scale_counter_op"]["config"]
    assert config == {"partitions": 7, "dry_run": True, "preview": True}
    assert request.job_name == "scale_counter" and request.tags["brook/lag"] == "1400"
    # one plan per episode; quiet once the lag is under the threshold, and again over without progress
    requests, skipped = tick(60)
    assert requests == [] and skipped is not None and "planned already" in skipped
    commit(bootstrap, unique_name, ends())
    assert tick(60) == ([], "no app lags long enough to plan a scaling: counter: lag 0")
    s.produce(800, 600)
    tick(60)
    requests, skipped = tick(120)
    assert requests == [] and skipped is not None and "nothing was processed since the last tick" in skipped

    # the requested dry run, while a worker runs (a preview): its plan is in the run's observation of scalings/<app>
    workdir = tmp_path / "running"
    workdir.mkdir()
    worker = start_worker(bootstrap, "tests.integration.workloads.scaling_app:topology", s.config, workdir, 0, ROOT)
    try:
        wait_for(lambda: f"worker {unique_name} started" in (workdir / "worker-0.log").read_text(errors="replace"), 60,
                 "the worker to start")
        result = defs.resolve_job_def("scale_counter").execute_in_process(run_config=request.run_config)
    finally:
        stop_workers([worker])
    assert result.success
    observation = next(e.event_specific_data.asset_observation for e in result.all_events  # type: ignore[union-attr]
                       if e.event_type == dg.DagsterEventType.ASSET_OBSERVATION)
    assert observation.asset_key == scaling_asset_key("counter")
    assert observation.metadata["partitions"].value == "2 -> 7"
    assert any("a preview made while workers run" in note for note in observation.metadata["plan"].value["notes"])
    assert s.partitions() == 2  # a dry run changes nothing
