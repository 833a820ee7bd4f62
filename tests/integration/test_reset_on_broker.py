"""Application reset on the embedded broker (issue 17, item 2), through the runbook's commands
(``platform/runbooks/reset.md``): ``brook app reset APP`` (a dry run writing the plan), then
``brook app reset APP --execute --plan FILE``, then the app started again.

- The word count reset to earliest: its rebuilt counts equal the originals; the worker started again on its old
  state directory (a real checkpoint from before the reset) wipes it first; the store's snapshot of the old epoch
  is never loaded (through the snapshot source, with a real manifest) and is retired; the reset is recorded in
  Dagster.
  A dry run to a time moves each of its 4 input partitions (out-of-order timestamps) to the first offset whose
  record is at or after it (a model of Kafka's offsetsForTimes rule, computed here from the records); to a time
  after every record (``--by-duration``) or an offset past the end, each to its end.
- The orders pipeline reset to a time T in the middle (tables to earliest): the hourly windows that start at or
  after T equal the originals, and no input record before T is read again: the order partition restarts at the
  first offset whose record is at or after T (the same model), the offsets committed before the restart are
  exactly those, and every order line the restarted app writes comes from an order at or after that offset. One
  partition per topic: see ``ORDERS_PARTITIONS``.
- Bad input, each refused with one line and nothing changed: a live worker (a real worker process, named), a time
  in the future, an input topic listed as internal, a stale plan.

Each test runs its own broker: the apps' topic names and application ids are fixed.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from confluent_kafka.admin import AdminClient, ConfigResource

from apps.orders import topology as orders_topology
from apps.orders.pipeline import (
    HOURLY_TOPIC,
    ITEMS_TOPIC,
    LINES_TOPIC,
    ORDERS_TOPIC,
    OUTPUT_TOPICS,
    USERS_TOPIC,
    WINDOW,
)
from apps.wordcount import INPUT_TOPIC, OUTPUT_TOPIC, WORDS_TOPIC
from apps.wordcount import topology as wordcount_topology
from streaming import KafkaStreams
from streaming.admin import create_topics
from streaming.broker import EmbeddedBroker
from streaming.reset.cluster import observe
from streaming.runtime.kafka_streams import State
from streaming.runtime.reset_epoch import read_reset_epoch
from streaming.runtime.snapshots import ParquetSnapshots
from streaming.serdes import Serdes
from streaming.state import snapshots
from streaming.state.store_identity import live_identity
from streaming.testing import generators
from streaming.testing.kafka import group_lag, produce, produce_paced, read_topic, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
BROOK = str(Path(sys.executable).parent / "brook")
PARTITIONS = 4
# The orders test runs on one partition per topic. After a reset the app reads hours of orders at once, and the
# hourly task, which reads one repartition partition fed by every upstream task, gets each upstream task's whole
# share of the backlog as it comes: its stream time runs to the end of the first share, and the others' lines
# arrive hours behind it. Measured with 4 partitions: 1,397 of 4,469 rerun lines dropped as late with the app's
# 30 min grace (1,441 with 4 stream threads), 395 with a 6 h grace. That is docs/orders-pipeline.md's rule (grace must
# cover how unevenly partitions are read), not the reset's: on one partition the rerun reads its backlog in
# offset order and its windows are comparable (platform/runbooks/reset.md, "Windows after a reset").
ORDERS_PARTITIONS = 1
ORDERS_TOPICS = (ORDERS_TOPIC, USERS_TOPIC, ITEMS_TOPIC, *OUTPUT_TOPICS)
ORDERS_REPARTITION = tuple(f"orders-{name}-repartition" for name in ("lines-by-item-left", "lines-by-region"))
ORDERS_CONSUMED = [ORDERS_TOPIC, USERS_TOPIC, ITEMS_TOPIC, *ORDERS_REPARTITION]
String, Json, Long = Serdes.String(), Serdes.Json(), Serdes.Long()


@pytest.fixture
def bootstrap_of_own_broker(tmp_path: Path) -> Iterator[str]:
    with EmbeddedBroker(workdir=tmp_path / "broker") as broker:
        yield broker.bootstrap_servers


def platform_spec(tmp_path: Path) -> Path:
    """The repo's spec with snapshots under ``tmp_path``."""
    raw = yaml.safe_load((ROOT / "platform" / "platform.yaml").read_text())
    raw["snapshots"]["location"] = str(tmp_path / "snapshots")
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def brook(tmp_path: Path, bootstrap: str, spec: Path, *args: str, check: bool = True,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a runbook command ``brook ...`` from ``tmp_path`` against the test's broker and spec."""
    done = subprocess.run([BROOK, *args], cwd=tmp_path, capture_output=True, text=True, timeout=180, check=False,
                          env={**os.environ, "BROOK_BOOTSTRAP_SERVERS": bootstrap, "BROOK_PLATFORM_SPEC": str(spec),
                               "PYTHONPATH": str(ROOT), **(env or {})})
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def run_until_caught_up(streams: KafkaStreams, bootstrap: str, group: str, topics: list[str],
                        timeout: float = 120, partitions: int = PARTITIONS) -> None:
    streams.start()
    try:
        wait_for(lambda: streams.state is State.RUNNING, 60, "the app to run")
        wait_for(lambda: all(group_lag(bootstrap, group, topic, partitions) == 0 for topic in topics), timeout,
                 f"{group} to commit all of {topics}")
    finally:
        assert streams.close(60)
    assert streams.exception is None


def ends(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> dict[int, int]:
    from streaming.admin import watermarks

    return {p: end for (_, p), (_, end) in watermarks(bootstrap, [(topic, p) for p in range(partitions)]).items()}


def topic_configs(bootstrap: str, topic: str) -> dict[str, str]:
    """The configs the broker reports for ``topic`` (the embedded broker reports those set at creation)."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the answer: its end cancels the request
    described = admin.describe_configs([resource])[resource].result(30)
    return {name: entry.value for name, entry in described.items()}


def after(records: list[Any], offsets: dict[int, int]) -> list[Any]:
    """The records at or after ``offsets`` (what was written since)."""
    return [r for r in records if r.offset >= offsets[r.partition]]


def latest_by_key(records: list[Any]) -> dict[Any, Any]:
    return {r.key: r.value for r in sorted(records, key=lambda r: (r.partition, r.offset))}


def write_snapshot(location: Path, bootstrap: str, app_id: str, store: str) -> snapshots.SnapshotManifest:
    """A real snapshot of ``store`` (one row in partition 0) made under the changelog's current identity and reset
    epoch ``none``, in the layout compaction writes."""
    changelog = f"{app_id}-{store}-changelog"
    identity = live_identity({"bootstrap.servers": bootstrap}, app_id, store, changelog)
    snapshot_id = snapshots.claim_snapshot_id(str(location), app_id, store)
    data = location / app_id / store / "data" / snapshot_id / "partition=0"
    data.mkdir(parents=True)
    key, value = String.serialize("to"), Long.serialize(1)
    pq.write_table(pa.table({"key": [key], "value": [value], "offset": [0], "timestamp": [0]}),
                   data / "part-0.parquet")
    manifest = snapshots.SnapshotManifest(
        snapshot_id, app_id, store, changelog, snapshots.utc_now_iso(),
        {0: snapshots.PartitionSnapshot(1, 1, 1, snapshots.row_checksum(key, value))}, 1, 1, 0.1,
        identity=identity)
    snapshots.write_manifest(str(location), manifest)
    return manifest


# -- the word count, to earliest ------------------------------------------------------------------------------------
def test_word_count_reset_to_earliest_rebuilds_its_outputs(bootstrap_of_own_broker: str, tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    bootstrap = bootstrap_of_own_broker
    spec = platform_spec(tmp_path)
    create_topics(bootstrap, {topic: PARTITIONS for topic in (INPUT_TOPIC, WORDS_TOPIC, OUTPUT_TOPIC)})
    produce(bootstrap, INPUT_TOPIC, generators.words(3_000, seed=17, start_ms=generators.ORDERS_START_MS, out_of_order=0.2,
                                                     max_disorder_ms=60_000),
            String, String)
    config = {"application.id": "wordcount", "bootstrap.servers": bootstrap, "state.dir": str(tmp_path / "state"),
              "commit.interval.ms": 200}
    run_until_caught_up(KafkaStreams(wordcount_topology(), config), bootstrap, "wordcount", [INPUT_TOPIC, WORDS_TOPIC])
    original = latest_by_key(read_topic(bootstrap, OUTPUT_TOPIC, String, Long, PARTITIONS))
    outputs_before = ends(bootstrap, OUTPUT_TOPIC)
    checkpoints = sorted(p.parent.name for p in (tmp_path / "state" / "wordcount").glob("*/.checkpoint"))
    assert checkpoints == [f"1_{p}" for p in range(PARTITIONS)], "the worker left checkpoints of its counts"

    # a snapshot of the counts made before the reset: valid now, never loaded under the next epoch
    location = tmp_path / "snapshots"
    manifest = write_snapshot(location, bootstrap, "wordcount", "word-counts")
    source = ParquetSnapshots(str(location), "wordcount", {"bootstrap.servers": bootstrap})
    assert [s.snapshot_id for s in source.candidates("wordcount-word-counts-changelog", 0)] == [manifest.snapshot_id]
    with caplog.at_level(logging.ERROR, logger="streaming.runtime.snapshots"):
        assert list(source.at_reset_epoch("1").candidates("wordcount-word-counts-changelog", 0)) == []
    assert "it was made under reset epoch none, the application is at reset epoch 1" in caplog.text

    # a dry run to a time: each partition to its first record at or after it, whatever the disorder
    lines = read_topic(bootstrap, INPUT_TOPIC, String, String, PARTITIONS)
    middle = sorted(r.timestamp for r in lines)[len(lines) // 2]
    timed = tmp_path / "reset-wordcount-timed.json"
    brook(tmp_path, bootstrap, spec, "app", "reset", "wordcount", "--to-datetime",
          datetime.fromtimestamp(middle / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3], "--plan", str(timed))
    lines_end = ends(bootstrap, INPUT_TOPIC)
    model = {p: first_at_or_after([r for r in lines if r.partition == p], middle, lines_end[p])
             for p in range(PARTITIONS)}
    assert {o["partition"]: o["after"] for o in json.loads(timed.read_text())["offsets"]
            if o["topic"] == INPUT_TOPIC} == model
    assert all(0 < offset < lines_end[p] for p, offset in model.items()), "the time falls inside every partition"
    # nothing at or after the time (a minute ago: the lines are from 2023): every partition to its end; an offset
    # past the end: clamped to it
    for option in (("--by-duration", "PT1M"), ("--to-offset", "999999")):
        brook(tmp_path, bootstrap, spec, "app", "reset", "wordcount", *option, "--plan", str(timed))
        assert {o["partition"]: o["after"] for o in json.loads(timed.read_text())["offsets"]
                if o["topic"] == INPUT_TOPIC} == lines_end, option

    plan_path = tmp_path / "reset-wordcount.json"
    dry = brook(tmp_path, bootstrap, spec, "app", "reset", "wordcount", "--to-earliest", "--plan", str(plan_path))
    plan = json.loads(plan_path.read_text())
    lines = dry.stdout.splitlines()
    assert any(line.split()[:4] == ["wordcount-words[0]", "intermediate", str(plan["offsets"][4]["before"]), "->"]
               for line in lines), dry.stdout
    assert "  wordcount-word-counts-changelog (changelog, 4 partition(s))" in lines
    assert f"  word-counts {manifest.snapshot_id} (epoch none)" in lines
    inputs_end = ends(bootstrap, INPUT_TOPIC)
    words_end = ends(bootstrap, WORDS_TOPIC)
    assert {(o["topic"], o["partition"]): o["after"] for o in plan["offsets"]} == {
        **{(INPUT_TOPIC, p): 0 for p in range(PARTITIONS)}, **{(WORDS_TOPIC, p): words_end[p] for p in range(PARTITIONS)}}
    assert all(o["before"] == inputs_end[o["partition"]] for o in plan["offsets"] if o["topic"] == INPUT_TOPIC)

    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    done = brook(tmp_path, bootstrap, spec, "app", "reset", "wordcount", "--execute", "--plan", str(plan_path),
                 env={"DAGSTER_HOME": str(home)})
    assert f"recorded in Dagster ({home}) as a materialization of resets/wordcount" in done.stdout
    assert read_reset_epoch({"bootstrap.servers": bootstrap}, "wordcount").epoch == "1"
    assert snapshots.list_snapshot_ids(str(location), "wordcount", "word-counts") == []
    assert (location / "wordcount" / "word-counts" / "retired" / "none" / "manifests" /
            f"{manifest.snapshot_id}.json").exists()
    for topic in ("wordcount-word-counts-changelog", "wordcount-word-counts-pending-changelog",
                  "wordcount-1-stream-time"):  # re-created as the runtime would
        assert ends(bootstrap, topic) == {p: 0 for p in range(PARTITIONS)}
        assert topic_configs(bootstrap, topic)["cleanup.policy"] == "compact"

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="streaming.runtime.reset_epoch"):
        run_until_caught_up(KafkaStreams(wordcount_topology(), config), bootstrap, "wordcount",
                            [INPUT_TOPIC, WORDS_TOPIC])
    [wiped] = [r.getMessage() for r in caplog.records if r.name == "streaming.runtime.reset_epoch"]
    assert wiped.startswith(f"state directory {tmp_path / 'state' / 'wordcount'} was written under reset epoch none, "
                            f"the application is at reset epoch 1")
    rebuilt = latest_by_key(after(read_topic(bootstrap, OUTPUT_TOPIC, String, Long, PARTITIONS), outputs_before))
    assert rebuilt == original

    import dagster as dg

    os.environ.setdefault("DAGSTER_HOME", str(home))  # dagster.yaml's storage reads it
    with dg.DagsterInstance.from_config(str(home)) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey(["resets", "wordcount"]))
    assert event is not None
    recorded = event.asset_materialization.metadata
    assert recorded["fingerprint"].value == plan["fingerprint"] and recorded["epoch"].value == "none -> 1"
    assert recorded["plan"].value["offsets"] == plan["offsets"]


# -- the orders pipeline, to a time in the middle --------------------------------------------------------------------
def first_at_or_after(records: list[Any], time_ms: int, end: int) -> int:
    """Kafka's offsetsForTimes rule, record by record: the first offset whose timestamp is at or after the time,
    else the partition's end."""
    return next((r.offset for r in sorted(records, key=lambda r: r.offset) if r.timestamp >= time_ms), end)


def test_orders_reset_to_a_time_rebuilds_the_windows_after_it_and_reads_nothing_before_it(
        bootstrap_of_own_broker: str, tmp_path: Path) -> None:
    bootstrap = bootstrap_of_own_broker
    spec = platform_spec(tmp_path)
    create_topics(bootstrap, {topic: ORDERS_PARTITIONS for topic in ORDERS_TOPICS})
    catalog_from = generators.ORDERS_START_MS - 24 * 3_600_000
    produce(bootstrap, USERS_TOPIC, generators.users(60, seed=5, start_ms=catalog_from), String, Json)
    produce(bootstrap, ITEMS_TOPIC, generators.items(40, seed=5, start_ms=catalog_from), String, Json)
    orders = generators.orders(2_400, seed=5, users=60, items=40, catalog_seed=5, step_ms=20_000, out_of_order=0.1,
                               max_disorder_ms=5 * 60_000, invalid=0.03)
    config = {"application.id": "orders", "bootstrap.servers": bootstrap, "state.dir": str(tmp_path / "state"),
              "commit.interval.ms": 200}
    streams = KafkaStreams(orders_topology(), config)
    streams.start()
    try:
        wait_for(lambda: streams.state is State.RUNNING, 60, "the app to run")
        produce_paced(bootstrap, ORDERS_TOPIC, orders, String, Json, "orders", ORDERS_PARTITIONS, batch_size=200)
        wait_for(lambda: all(group_lag(bootstrap, "orders", topic, ORDERS_PARTITIONS) == 0
                             for topic in ORDERS_CONSUMED), 120, "the app to commit everything")
    finally:
        assert streams.close(60)
    hourly_before = ends(bootstrap, HOURLY_TOPIC, ORDERS_PARTITIONS)
    lines_before = ends(bootstrap, LINES_TOPIC, ORDERS_PARTITIONS)
    originals = {(r.value["region"], r.value["window_start"]): r.value
                 for r in read_topic(bootstrap, HOURLY_TOPIC, String, Json, ORDERS_PARTITIONS)}

    at = datetime.fromtimestamp(generators.ORDERS_START_MS / 1000, UTC) + timedelta(hours=3)
    time_ms = int(at.timestamp() * 1000)
    assert any(start >= time_ms for _, start in originals), "windows after T closed in the first run"
    plan_path = tmp_path / "reset-orders.json"
    brook(tmp_path, bootstrap, spec, "app", "reset", "orders", "--to-datetime", at.strftime("%Y-%m-%dT%H:%M:%S"),
          "--plan", str(plan_path))
    plan = json.loads(plan_path.read_text())
    inputs = read_topic(bootstrap, ORDERS_TOPIC, String, Json, ORDERS_PARTITIONS)
    orders_end = ends(bootstrap, ORDERS_TOPIC, ORDERS_PARTITIONS)
    model = {p: first_at_or_after([r for r in inputs if r.partition == p], time_ms, orders_end[p])
             for p in range(ORDERS_PARTITIONS)}
    planned = {(o["topic"], o["partition"]): o["after"] for o in plan["offsets"]}
    assert {p: planned[(ORDERS_TOPIC, p)] for p in range(ORDERS_PARTITIONS)} == model
    assert all(0 < offset < orders_end[p] for p, offset in model.items()), "T falls inside every partition"
    assert {planned[(topic, p)] for topic in (USERS_TOPIC, ITEMS_TOPIC) for p in range(ORDERS_PARTITIONS)} == {0}
    assert all(planned[(topic, p)] == 0 for topic in ORDERS_REPARTITION for p in range(ORDERS_PARTITIONS))

    brook(tmp_path, bootstrap, spec, "app", "reset", "orders", "--execute", "--plan", str(plan_path))
    committed = observe({"bootstrap.servers": bootstrap}, "orders", [], None, []).committed
    assert {key: committed[key] for key in (f"{o['topic']}[{o['partition']}]" for o in plan["offsets"])} == {
        f"{o['topic']}[{o['partition']}]": o["after"] for o in plan["offsets"]}

    run_until_caught_up(KafkaStreams(orders_topology(), config), bootstrap, "orders", ORDERS_CONSUMED,
                        partitions=ORDERS_PARTITIONS)
    offset_of = {r.value["order_id"]: (r.partition, r.offset) for r in inputs if isinstance(r.value, dict)}
    reread = [offset_of[r.value["order_id"]] for r in after(read_topic(bootstrap, LINES_TOPIC, String, Json,
                                                                       ORDERS_PARTITIONS), lines_before)]
    assert reread, "the restarted app wrote order lines"
    for p in range(ORDERS_PARTITIONS):
        mine = [offset for partition, offset in reread if partition == p]
        assert min(mine) >= model[p], f"orders[{p}]: an order before T was read again"
    rebuilt = {(r.value["region"], r.value["window_start"]): r.value
               for r in after(read_topic(bootstrap, HOURLY_TOPIC, String, Json, ORDERS_PARTITIONS), hourly_before)}
    after_t = {window: final for window, final in originals.items() if window[1] >= time_ms}
    assert {window: rebuilt.get(window) for window in after_t} == after_t
    window_ms = int(WINDOW.total_seconds() * 1000)
    assert len(after_t) >= 4 and all(start % window_ms == 0 for _, start in after_t)


# -- bad input ----------------------------------------------------------------------------------------------------------
def test_bad_input_is_refused_in_one_line_and_changes_nothing(bootstrap_of_own_broker: str, tmp_path: Path) -> None:
    bootstrap = bootstrap_of_own_broker
    spec = platform_spec(tmp_path)
    create_topics(bootstrap, {topic: PARTITIONS for topic in (INPUT_TOPIC, WORDS_TOPIC, OUTPUT_TOPIC)})
    produce(bootstrap, INPUT_TOPIC, generators.words(200, seed=3), String, String)
    config = {"application.id": "wordcount", "bootstrap.servers": bootstrap, "state.dir": str(tmp_path / "state"),
              "commit.interval.ms": 200}
    run_until_caught_up(KafkaStreams(wordcount_topology(), config), bootstrap, "wordcount", [INPUT_TOPIC, WORDS_TOPIC])
    involved = [INPUT_TOPIC, WORDS_TOPIC, OUTPUT_TOPIC, "wordcount-word-counts-changelog",
                "wordcount-word-counts-pending-changelog", "wordcount-1-stream-time",
                "wordcount-epoch"]

    def cluster() -> Any:
        return observe({"bootstrap.servers": bootstrap}, "wordcount", involved, str(tmp_path / "snapshots"),
                       ["word-counts"])

    def refused(*args: str) -> str:
        before = cluster()
        done = brook(tmp_path, bootstrap, spec, "app", "reset", "wordcount", *args, check=False)
        assert done.returncode != 0, done.stdout
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
        assert cluster() == before, "a refused reset changed nothing"
        return errors[0]

    plan_path = tmp_path / "plan.json"
    brook(tmp_path, bootstrap, spec, "app", "reset", "wordcount", "--plan", str(plan_path))  # a good dry run
    produce(bootstrap, INPUT_TOPIC, generators.words(1, seed=4), String, String)  # ...and then the cluster moves
    stale = refused("--execute", "--plan", str(plan_path))
    assert stale.startswith("error: the plan of ") and "is stale, nothing was changed: wordcount-lines[" in stale
    assert stale.endswith("Make a new plan with a dry run")

    future = refused("--to-datetime", "2999-01-01T00:00:00")
    assert future.startswith("error: --to-datetime 2999-01-01T00:00:00 is in the future (now is ")

    internal = refused("--internal-topics", f"wordcount-word-counts-changelog,{INPUT_TOPIC}")
    assert internal == ("error: topic 'wordcount-lines' cannot be listed as internal: it is an input of application "
                        "'wordcount', and a reset deletes only its internal topics (wordcount-1-stream-time, "
                        "wordcount-word-counts-changelog, wordcount-word-counts-pending-changelog)")

    log = tmp_path / "worker.log"
    worker = subprocess.Popen(
        [BROOK, "worker", "run", "apps.wordcount:topology", "--config", str(ROOT / "apps/wordcount/config.yaml"),
         "--set", f"bootstrap.servers={bootstrap}", "--set", f"state.dir={tmp_path / 'state'}"],
        cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        wait_for(lambda: "REBALANCING -> RUNNING" in log.read_text(), 60, "the worker to run")
        wait_for(lambda: all(group_lag(bootstrap, "wordcount", topic, PARTITIONS) == 0
                             for topic in (INPUT_TOPIC, WORDS_TOPIC)), 60, "the worker to commit the new line")
        live = refused("--to-earliest")
        assert live.startswith("error: cannot reset application 'wordcount': 1 instance(s) of application "
                               "'wordcount' are alive: instance-")
        assert f", pid {worker.pid})" in live and "last seen" in live, live
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(60) == 0, log.read_text()[-3000:]
    brook(tmp_path, bootstrap, spec, "app", "reset", "wordcount", "--plan", str(plan_path))  # stopped: a plan again
