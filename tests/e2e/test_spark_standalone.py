"""The platform's Spark jobs on a Spark standalone cluster (a master and two workers started with pyspark's
``spark-class``), not ``local[*]``: changelog compaction through its Dagster asset, one day of the orders
pipeline reprocessed from the archive, and an app scaled from 2 to 4 partitions through ``scale_<app>``
(migrate), each checked as its local-mode test checks it (``tests/e2e/test_compaction.py``,
``tests/integration/test_reprocess_spark.py``, ``tests/e2e/test_scale_job.py``, whose helpers these reuse).

The session is made as ``platform/runbooks/deploy.md`` says (``BROOK_SPARK_MASTER``, ``BROOK_SPARK_CONF`` with
``spark.submit.pyFiles`` naming Brook's zipped code); the executors import Brook from that zip, and their task
logs in the workers' directories show that the jobs' tasks ran there.
"""

from __future__ import annotations

import os
import re
import time
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from apps.orders import pipeline
from assets.reprocess.inputs import frontier_of
from assets.reprocess.job import reprocess_days
from streaming import KafkaStreams
from streaming.admin import create_topics
from streaming.batch import BatchPlan, BatchRecord, run_day, select_day
from streaming.testing.kafka import produce
from streaming.testing.spark_cluster import SparkStandaloneCluster
from tests.e2e.test_compaction import (
    PARTITIONS,
    Platform,
    String,
    failure_message,
    metadata,
    process_all,
    records,
    store_contents,
    topology,
)
from tests.e2e.test_scale_job import scale_and_resume, start
from tests.integration.test_reprocess_spark import (
    CLEAR,
    DAYS,
    OUTPUTS,
    inputs,
    spark_outputs,
    spec_for,
    write_archive,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
_FINISHED_TASK = re.compile(r"Executor: Finished task")


def finished_tasks(cluster: SparkStandaloneCluster, app_id: str) -> dict[int, int]:
    """Tasks each worker's executors of application ``app_id`` finished, from their logs (``<work-dir>/<app>/*/stderr``)."""
    return {index: sum(len(_FINISHED_TASK.findall(log.read_text(errors="replace")))
                       for log in (cluster.worker_dir(index) / app_id).glob("*/stderr"))
            for index in range(cluster.workers)}


def where_tasks_run(spark: SparkSession) -> list[tuple[str, str]]:
    """(working directory, the file ``streaming`` was imported from) of two concurrent tasks."""

    def locate(_: Any) -> tuple[str, str]:
        import streaming

        time.sleep(1)  # both tasks at once: one per executor
        return os.getcwd(), streaming.__file__ or ""

    return spark.sparkContext.parallelize(range(2), 2).map(locate).collect()


def test_the_session_runs_on_the_cluster_with_brook_shipped_as_a_zip(
        spark_cluster_session: SparkSession, spark_cluster: SparkStandaloneCluster) -> None:
    sc = spark_cluster_session.sparkContext
    assert sc.master == spark_cluster.master_url
    [app] = spark_cluster.state()["activeapps"]
    assert app["id"] == sc.applicationId and app["cores"] == 2, "one core on each of the two workers"
    located = where_tasks_run(spark_cluster_session)
    assert {Path(cwd).parents[1].name for cwd, _ in located} == {"worker-0", "worker-1"}, located
    assert all("brook-code.zip" in path for _, path in located), located


def test_compaction_on_the_cluster_snapshots_the_store(
        spark_cluster_session: SparkSession, spark_cluster: SparkStandaloneCluster, bootstrap: str,
        unique_name: str, tmp_path: Path) -> None:
    source = f"{unique_name}-lines"
    create_topics(bootstrap, {source: PARTITIONS})
    platform = Platform(bootstrap, unique_name, source, tmp_path / "snapshots", spark_cluster_session)
    assert platform.resources["pyspark"].spark_config["spark.master"] == spark_cluster.master_url
    updates = {f"k{i:02d}": 1 + i % 7 for i in range(60)}
    deletes = [f"k{i:02d}" for i in range(10)]
    ends = produce(bootstrap, source, records(updates, deletes, seed=1), String, String)
    app = KafkaStreams(topology(source), {"application.id": unique_name, "bootstrap.servers": bootstrap,
                                          "commit.interval.ms": 200, "state.dir": str(tmp_path / "state")})
    app.start()
    try:
        process_all(app, bootstrap, unique_name, source, ends)
        store = store_contents(app)
    finally:
        assert app.close(30)
    assert store == {k: n for k, n in updates.items() if k not in deletes}

    app_id = spark_cluster_session.sparkContext.applicationId
    before = sum(finished_tasks(spark_cluster, app_id).values())
    result = platform.materialize()
    assert result.success, failure_message(result)
    manifest, rows = platform.snapshot()
    assert {k: v for part in rows.values() for k, v in part.items()} == store
    partition_of, _ = platform.changelog_partition_of_keys(bootstrap)
    assert all(partition_of[k] == p for p, part in rows.items() for k in part), "keys stay in their partition"
    assert metadata(result)["keys_kept"] == manifest.keys == len(store) == 50
    assert sum(finished_tasks(spark_cluster, app_id).values()) > before, "the compaction's tasks ran on executors"


def test_reprocessing_a_day_on_the_cluster_gives_what_run_day_gives(
        spark_cluster_session: SparkSession, spark_cluster: SparkStandaloneCluster, tmp_path: Path) -> None:
    day = DAYS[0]
    spec = spec_for(tmp_path)
    assert spec.archive is not None
    partitions = inputs()
    by_topic: dict[str, dict[int, list[BatchRecord]]] = defaultdict(dict)
    for (topic, partition), partition_records in partitions.items():
        by_topic[topic][partition] = partition_records
    for archived in (day, day + timedelta(days=1)):  # the day's run reads into the next day's archive
        for topic, topic_partitions in by_topic.items():
            write_archive(spec.archive.root(), topic, topic_partitions, archived,
                          spec.topics[topic].disorder_bound_minutes(spec.archive))

    app_id = spark_cluster_session.sparkContext.applicationId
    before = finished_tasks(spark_cluster, app_id)
    [done] = reprocess_days(spec, "orders", day, day, spark_cluster_session)
    after = finished_tasks(spark_cluster, app_id)

    plan = BatchPlan(pipeline.topology(), "orders", {t: 4 for t in [*by_topic, *OUTPUTS]})
    selected, stops = select_day(partitions, frontier_of(day, 180), {})
    expected = run_day(plan, {"application.id": "orders", "commit.interval.ms": 1000}, selected, None, chunk=500)
    assert done.stops == stops and done.records_in == sum(len(r) for r in selected.values())
    for topic in OUTPUTS:
        want = sorted((r.partition, r.offset, r.timestamp, r.key, CLEAR.clear_bytes(r.value))
                      for r in expected.outputs.get(topic, []))  # encrypted fields in clear (random nonces)
        assert spark_outputs(spec, topic, day, clear=True) == want, topic
        assert done.records_out[topic] == len(want)
    assert all(after[w] > before[w] for w in after), f"tasks on both workers' executors: {before} -> {after}"


def test_scaling_on_the_cluster_moves_every_store_from_2_to_4_partitions(
        spark_cluster_session: SparkSession, spark_cluster: SparkStandaloneCluster, bootstrap: str,
        unique_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job's copy, re-shard and snapshots run on the executors; the new workers restore from those snapshots
    (written by the executors to the shared snapshot directory) and count on exactly."""
    s = start(bootstrap, unique_name, tmp_path, monkeypatch)
    s.produce(0, 400)
    s.process()
    s.check()
    app_id = spark_cluster_session.sparkContext.applicationId
    before = finished_tasks(spark_cluster, app_id)
    scale_and_resume(s, 4, 2, spark_cluster_session)
    after = finished_tasks(spark_cluster, app_id)
    assert all(after[w] > before[w] for w in after), f"the scaling's tasks on both workers' executors: {before} -> {after}"
