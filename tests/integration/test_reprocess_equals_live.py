"""Batch equals streaming: the live workers on the embedded broker, the real archive of their input, the
``reprocessed/<app>`` asset over three days on Spark, launched from the command line as the runbook shows it (the
orders: one backfill run of the three days; the word count: a backfill of two, then the third day alone), and each
output compared record for record.

For each app: generated input over three days (and the first hours of a fourth, which the third day's run reads up
to its frontier) is fed to ``brook worker run`` processes; their output topics are read back; the input topics are
archived day by day through the ``archive/<topic>`` assets; the three days are reprocessed in order through the
``reprocessed/<app>`` asset; and per output topic and key, the records the three runs wrote, in order (day by day,
each day by partition offset), must be the first records the live workers wrote for that key — same key and value
bytes, same timestamp, same order — with only records of the fourth day's input after them.

How the live input is fed (docs/reprocessing.md: what batch can and cannot equal): in event-time order, a batch of
at most 10 minutes of event time at a time, the workers never more than two batches behind (``produce_paced``), so
they read their partitions at a pace the orders pipeline's 30-minute grace absorbs; between busy hours the feed
waits until every stage has committed everything (a gap of hours in event time would otherwise let one partition's
task jump hours ahead while another's lines are still on their way). What a live run does not determine either is
compared without order: records of one key with the same timestamp (two lines of one late order reach the late
topic from two tasks), one word's records in the word count's repartition topic (sent by several line tasks within
one tick), and records with a null key (rejected orders without a user: a random partition live, partition 0 in
batch).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any
from unittest import mock

import dagster as dg
import pytest
import yaml

import apps.wordcount as wordcount_app
from apps.orders import pipeline as orders_app
from apps.orders.protection import ClearJsonSerde
from assets.archive.assets import archive_assets
from assets.archive.keys import archive_asset_key
from assets.platform_spec import ArchiveSpec, PlatformSpec, ReprocessSpec, load_platform_spec
from assets.reprocess import reprocess_asset_key
from assets.reprocess.compare import OutputRecord, compare_outputs, live_records, reprocessed_records
from assets.resources import KafkaResource, PlatformResource, spark_resource
from streaming.admin import create_topics
from streaming.broker import EmbeddedBroker
from streaming.serdes import Serdes
from streaming.testing import GeneratedRecord, generators
from streaming.testing.kafka import group_lag, produce, produce_paced, read_topic, wait_for
from streaming.testing.workers import start_worker, stop_workers

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 4
DAGSTER = Path(sys.executable).parent / "dagster"
DAYS = [date(2023, 11, 14), date(2023, 11, 15), date(2023, 11, 16)]
TAIL_DAY = date(2023, 11, 17)
HOUR, MINUTE = 3_600_000, 60_000
String, Json, Bytes = Serdes.String(), Serdes.Json(), Serdes.Bytes()


def at(day: date, hours: float) -> int:
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000 + hours * HOUR)


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[str]:
    """A broker of the test's own: the apps' topic names are fixed, and other tests use them too."""
    with EmbeddedBroker(workdir=tmp_path / "broker") as broker:
        yield broker.bootstrap_servers


def start(target: str, config: str, bootstrap: str, tmp_path: Path, index: int) -> subprocess.Popen[bytes]:
    return start_worker(bootstrap, target, ROOT / config, tmp_path, index, ROOT, {"commit.interval.ms": 200})


def drained(bootstrap: str, group: str, topics: list[str], workers: list[subprocess.Popen[bytes]],
            tmp_path: Path) -> None:
    """Wait until ``group`` has committed every record of ``topics`` (its input and what it repartitions)."""
    for index, worker in enumerate(workers):
        assert worker.poll() is None, (tmp_path / f"worker-{index}.log").read_text()[-3000:]
    wait_for(lambda: all(group_lag(bootstrap, group, topic, PARTITIONS) == 0 for topic in topics), 120,
             f"{group} to commit {topics}")


def platform(tmp_path: Path, bootstrap: str) -> tuple[PlatformSpec, dict[str, Any]]:
    """The repo's platform spec with the archive and reprocessing under ``tmp_path``; the Dagster resources."""
    spec = load_platform_spec(ROOT / "platform" / "platform.yaml").model_copy(update={
        "archive": ArchiveSpec(location=str(tmp_path / "archive"), start_date=DAYS[0], max_disorder_minutes=15),
        "reprocess": ReprocessSpec(location=str(tmp_path / "reprocessed")), "quality": []})
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(spec.model_dump(mode="json")))
    return spec, {"kafka": KafkaResource(bootstrap_servers=bootstrap), "platform": PlatformResource(path=str(path)),
                  "pyspark": spark_resource()}


def reprocess_from_the_command_line(spec: PlatformSpec, resources: dict[str, Any], bootstrap: str, app: str,
                                    topics: list[str], tmp_path: Path, runs: list[list[str]]) -> str:
    """Archive ``topics`` for the three days and the fourth, then reprocess the three days with the runbook's
    commands (``platform/runbooks/reprocess-and-backfill.md``): ``dagster asset materialize`` with each of ``runs``'
    partition options (``--partition-range A...B`` is a backfill, one run; ``--partition D`` one day). The fourth
    day is archived with the runbook's command too, the others in this process (a Spark start less each)."""
    for day in DAYS:
        result = dg.materialize(archive_assets(spec), selection=[archive_asset_key(t) for t in topics],
                                partition_key=day.isoformat(), resources=resources)
        assert result.success
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home), "BROOK_PLATFORM_SPEC": str(resources["platform"].path),
           "BROOK_BOOTSTRAP_SERVERS": bootstrap}

    def materialize(selection: str, *partitions: str) -> None:
        command = [str(DAGSTER), "asset", "materialize", "-m", "assets.definitions", "--select", selection, *partitions]
        done = subprocess.run(command, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    materialize(",".join(f"archive/{topic}" for topic in topics), "--partition", TAIL_DAY.isoformat())
    for partitions in runs:
        materialize(f"reprocessed/{app}", *partitions)
    with mock.patch.dict(os.environ, {"DAGSTER_HOME": str(home)}), dg.DagsterInstance.get() as instance:
        records = instance.fetch_materializations(reprocess_asset_key(app), limit=10).records
    assert sorted(r.partition_key or "" for r in records) == [d.isoformat() for d in DAYS]
    assert len({r.run_id for r in records}) == len(runs), "a backfill's days are one run (one Spark session)"
    figures: dict[str, dict[str, Any]] = {}
    for record in records:
        metadata = {k: v.value for k, v in record.asset_materialization.metadata.items()}  # type: ignore[union-attr]
        figures.update(metadata.get("per_day", {record.partition_key: metadata}))
    assert [figures[d.isoformat()]["started_from"] for d in DAYS] == [
        "empty state (first day)", *(f"the state of {d - timedelta(days=1)}" for d in DAYS[1:])]
    assert all(figures[d.isoformat()]["records_in"] > 0 for d in DAYS)
    return (f"batch: {sum(f['records_in'] for f in figures.values())} records in "
            f"{sum(f['duration_s'] for f in figures.values()):.1f} s ({len(runs)} run(s) from the command line)")


def batch_outputs(spec: PlatformSpec, app: str, topic: str) -> list[OutputRecord]:
    """What the three days' runs wrote to ``topic``: day by day, each by partition and offset."""
    assert spec.reprocess is not None
    return reprocessed_records(spec.reprocess.root(), app, topic, DAYS)


def assert_batch_equals_live(batch: list[OutputRecord], live: list[Any], topic: str, ordered: bool = True,
                             clear_value: Callable[[bytes | None], bytes | None] | None = None) -> None:
    """Per key, the batch's records are the live ones, in order, up to where the fourth day's input starts
    (``ordered=False``: as many of each, in any order): ``assets.reprocess.compare``, as ``make demo`` checks."""
    result = compare_outputs(batch, live_records(live), topic, ordered=ordered, clear_value=clear_value)
    assert result.equal, f"{topic}: {result.different_keys} keys differ: {result.differences}"
    assert result.leftover < len(batch) // 5, f"{topic}: {result.leftover} live records after the batch's"


# -- the orders pipeline --------------------------------------------------------------------------------------------

#: Busy hours of orders (start, end): the rest of each day is quiet. Two cross midnight, the last runs past the third
#: day's frontier (midnight plus the orders' 180-minute disorder bound). No order falls before the first day, whose
#: day before cannot be archived (it is before the archive's start_date).
SEGMENTS = [(at(DAYS[0], 2.2), at(DAYS[0], 5)), (at(DAYS[0], 11), at(DAYS[0], 14)), (at(DAYS[0], 22.5), at(DAYS[1], 2.5)),
            (at(DAYS[1], 12), at(DAYS[1], 15)), (at(DAYS[1], 22.5), at(DAYS[2], 2.5)), (at(DAYS[2], 12), at(DAYS[2], 15)),
            (at(DAYS[2], 22.5), at(TAIL_DAY, 3.5))]
ORDERS_STEP_MS = 2 * MINUTE
ORDERS_PER_BATCH = 5  # 10 minutes of event time


def orders_of(segment: int, start: int, end: int) -> list[GeneratedRecord]:
    """The segment's orders (order ids prefixed with the segment): 10% up to 5 min out of order, some 2.5 hours late,
    duplicates and invalid orders.

    A late order is kept only if its own time is in the segment: then the hourly task has seen the segment's lines
    up to its window's close (at most 1.5 h after it) well before the order arrives (2.5 h after it), so it is late
    live whatever the timing. One whose time falls in the quiet hours before the segment meets a stream time set by
    the first lines of the segment, which live depends on which task sends first."""
    orders = generators.orders((end - start) // ORDERS_STEP_MS, seed=segment, users=60, items=40, catalog_seed=5,
                               start_ms=start, step_ms=ORDERS_STEP_MS, out_of_order=0.1, max_disorder_ms=5 * MINUTE,
                               late=0.1, lateness_ms=150 * MINUTE, duplicates=0.05, invalid=0.05)
    return [dataclasses.replace(o, value={**o.value, "order_id": f"s{segment}-{o.value['order_id']}"}) for o in orders
            if not o.late or o.timestamp >= start]


def test_the_orders_pipeline_reprocessed_over_three_days_equals_the_live_workers(own_broker: str, tmp_path: Path,
                                                                                 spark: Any) -> None:
    bootstrap = own_broker
    outputs = list(orders_app.OUTPUT_TOPICS)
    inputs = [orders_app.ORDERS_TOPIC, orders_app.USERS_TOPIC, orders_app.ITEMS_TOPIC]
    create_topics(bootstrap, dict.fromkeys([*inputs, *outputs], PARTITIONS))
    produce(bootstrap, orders_app.USERS_TOPIC, generators.users(60, seed=5, start_ms=at(DAYS[0], 0)), String, Json)
    produce(bootstrap, orders_app.ITEMS_TOPIC, generators.items(40, seed=5, start_ms=at(DAYS[0], 0)), String, Json)
    segments = [orders_of(n, start, end) for n, (start, end) in enumerate(SEGMENTS)]
    assert sum(o.late for s in segments for o in s) > 10 and any(o.late for o in segments[2] if o.timestamp <
                                                               at(DAYS[1], 0) < max(p.timestamp for p in segments[2]))
    stages = [orders_app.ORDERS_TOPIC] + [f"{orders_app.APPLICATION_ID}-{name}-repartition"
                                          for name in ("lines-by-item-left", "lines-by-region")]
    workers = [start("apps.orders:topology", "apps/orders/config.yaml", bootstrap, tmp_path, i) for i in range(2)]
    started = time.monotonic()
    try:
        for orders in segments:
            produce_paced(bootstrap, orders_app.ORDERS_TOPIC, orders, String, Json, orders_app.APPLICATION_ID,
                          PARTITIONS, ORDERS_PER_BATCH, timeout=120)
            drained(bootstrap, orders_app.APPLICATION_ID, stages, workers, tmp_path)
        live_seconds = time.monotonic() - started
        live = {topic: read_topic(bootstrap, topic, Bytes, Bytes, PARTITIONS) for topic in outputs}
    finally:
        stop_workers(workers)

    spec, resources = platform(tmp_path, bootstrap)
    batch = reprocess_from_the_command_line(spec, resources, bootstrap, "orders", inputs, tmp_path,
                                            [["--partition-range", f"{DAYS[0]}...{DAYS[-1]}"]])
    print(f"orders: live: {sum(map(len, segments))} orders fed (paced) in {live_seconds:.1f} s; {batch}")
    clear = ClearJsonSerde().clear_bytes  # encrypted fields differ run to run (random nonces): compare them in clear
    for topic in outputs:
        assert_batch_equals_live(batch_outputs(spec, "orders", topic), live[topic], topic, clear_value=clear)
    late = batch_outputs(spec, "orders", orders_app.LATE_LINES_TOPIC)
    finals = batch_outputs(spec, "orders", orders_app.HOURLY_TOPIC)
    assert len(late) > 5 and len(finals) > 40, (len(late), len(finals))


# -- the word count -------------------------------------------------------------------------------------------------

#: Event times of the word count's ticks: each tick's lines fall in one emit interval (1 s), and every stage has
#: committed a tick before the next is fed. Some ticks come right after midnight, within the lines' 15-minute bound.
TICKS = [at(day, hours) for day in DAYS for hours in (0.1, 3, 8.5, 12, 17, 23.9, 24.05, 24.2)] + \
        [at(TAIL_DAY, 0.3), at(TAIL_DAY, 1)]


def lines_of(tick: int, index: int) -> list[GeneratedRecord]:
    """12 lines within the tick's emit interval (from 50 to 800 ms into it), some out of order within it."""
    lines = generators.words(12, seed=index, step_ms=50, start_ms=tick + 250, out_of_order=0.2, max_disorder_ms=200,
                             vocabulary=["to", "be", "or", "not", "river", "stone", "water"])
    return [dataclasses.replace(line, key=f"t{index}-{line.key}") for line in lines]


def test_the_word_count_reprocessed_over_three_days_equals_the_live_worker(own_broker: str, tmp_path: Path,
                                                                          spark: Any) -> None:
    bootstrap = own_broker
    topics = [wordcount_app.INPUT_TOPIC, wordcount_app.WORDS_TOPIC, wordcount_app.OUTPUT_TOPIC]
    create_topics(bootstrap, dict.fromkeys(topics, PARTITIONS))
    ticks = sorted(set(TICKS))
    assert all(later - earlier >= 1000 for earlier, later in pairwise(ticks))
    # One worker: a task moving between workers emits its pending counts early (a clean close does).
    workers = [start("apps.wordcount:topology", "apps/wordcount/config.yaml", bootstrap, tmp_path, 0)]
    started = time.monotonic()
    try:
        for index, tick in enumerate(ticks):
            produce(bootstrap, wordcount_app.INPUT_TOPIC, lines_of(tick, index), String, String)
            drained(bootstrap, "wordcount", [wordcount_app.INPUT_TOPIC, wordcount_app.WORDS_TOPIC], workers, tmp_path)
        live_seconds = time.monotonic() - started
        live = {topic: read_topic(bootstrap, topic, Bytes, Bytes, PARTITIONS) for topic in topics[1:]}
    finally:
        stop_workers(workers)

    spec, resources = platform(tmp_path, bootstrap)
    batch = reprocess_from_the_command_line(spec, resources, bootstrap, "wordcount", [wordcount_app.INPUT_TOPIC],
                                            tmp_path, [["--partition-range", f"{DAYS[0]}...{DAYS[1]}"],
                                                       ["--partition", DAYS[2].isoformat()]])
    print(f"wordcount: live: {12 * len(ticks)} lines fed tick by tick in {live_seconds:.1f} s; {batch}")
    counts, words = wordcount_app.OUTPUT_TOPIC, wordcount_app.WORDS_TOPIC
    assert_batch_equals_live(batch_outputs(spec, "wordcount", counts), live[counts], counts)
    # One word's records from different line tasks at the same stream time: no determined order live.
    assert_batch_equals_live(batch_outputs(spec, "wordcount", words), live[words], words, ordered=False)
