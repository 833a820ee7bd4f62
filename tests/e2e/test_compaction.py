"""Changelog compaction end to end: a stateful app on the embedded broker, its compaction asset
materialized by Dagster with real Spark, and the snapshot compared with the store's contents."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from pyspark.sql import SparkSession

from assets.compaction import compaction_asset_key, compaction_assets
from assets.platform_spec import load_platform_spec
from assets.resources import KafkaResource, PlatformResource, SparkResource
from streaming import KafkaStreams, Serdes, Stores, Topology
from streaming.admin import create_topics, delete_topics
from streaming.processor import Processor, ProcessorContext, Record
from streaming.runtime.kafka_streams import State
from streaming.state import snapshots
from streaming.testing import RestoreCounter
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import committed_offsets, produce, read_topic, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]
PARTITIONS = 4
STORE = "counts"
String, Long = Serdes.String(), Serdes.Long()


class CountOrDelete(Processor[str, str]):
    """Counts records per key; the value ``delete`` deletes the key (a tombstone in the changelog)."""

    def init(self, context: ProcessorContext) -> None:
        self.store = context.get_state_store(STORE)

    def process(self, record: Record[str, str]) -> None:
        if record.value == "delete":
            self.store.delete(record.key)
        else:
            self.store.put(record.key, (self.store.get(record.key) or 0) + 1)


def topology(source: str) -> Topology:
    return (Topology()
            .add_source("lines", source, key_serde=String, value_serde=String)
            .add_processor("count", CountOrDelete, "lines")
            .add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store(STORE), String, Long),
                             "count"))


def records(updates: dict[str, int], deletes: list[str], seed: int) -> list[GeneratedRecord]:
    batch = [GeneratedRecord(key, "x", 0) for key, n in updates.items() for _ in range(n)]
    random.Random(seed).shuffle(batch)
    batch = [GeneratedRecord(r.key, r.value, 1_700_000_000_000 + seed * 100_000 + i) for i, r in enumerate(batch)]
    return batch + [GeneratedRecord(key, "delete", 1_700_000_000_000) for key in deletes]


class Platform:
    """A platform spec with one app and its store, a snapshot location, and the Dagster resources."""

    def __init__(self, bootstrap: str, app_id: str, source: str, location: Path, spark: SparkSession) -> None:
        self.app_id, self.location, self.bootstrap = app_id, location, bootstrap
        self.changelog = f"{app_id}-{STORE}-changelog"
        self.spec_path = location.parent / "platform.yaml"
        self.spec_path.write_text(yaml.safe_dump({
            "version": 1,
            "default_cluster": "test",
            # Not declared embedded: truncation must be refused from what the broker itself reports.
            "clusters": {"test": {"bootstrap_servers": bootstrap}},
            "topics": {source: {"partitions": PARTITIONS}},
            "apps": {"counter": {"application_id": app_id, "topology": "tests.e2e.test_compaction:topology",
                                 "config": "unused.yaml", "inputs": [source],
                                 "stores": [{"name": STORE, "partitions_from": source}]}},
            "snapshots": {"location": str(location), "keep": 2},
        }))
        [self.asset] = compaction_assets(load_platform_spec(self.spec_path))
        conf = {k: str(v) for k, v in spark.sparkContext.getConf().getAll()}
        self.resources = {"kafka": KafkaResource(bootstrap_servers=bootstrap),
                          "platform": PlatformResource(path=str(self.spec_path)),
                          "pyspark": SparkResource(spark_config=conf)}

    def materialize(self, **config: Any) -> dg.ExecuteInProcessResult:
        run_config = {"ops": {self.asset.op.name: {"config": config}}} if config else None
        return dg.materialize([self.asset], resources=self.resources, run_config=run_config, raise_on_error=False)

    def snapshot(self) -> tuple[snapshots.SnapshotManifest, dict[int, dict[str, int]]]:
        """The newest snapshot: its manifest and its rows per partition, decoded."""
        manifest = snapshots.latest_manifest(str(self.location), self.app_id, STORE)
        assert manifest is not None
        rows = {p: {String.deserialize(k): Long.deserialize(v)
                    for batch in snapshots.read_partition(str(self.location), manifest, p, batch_size=50)
                    for k, v, _ in batch}
                for p in range(PARTITIONS)}
        return manifest, rows

    def snapshot_timestamps(self) -> dict[str, int]:
        """The timestamp the newest snapshot keeps with each key."""
        manifest = snapshots.latest_manifest(str(self.location), self.app_id, STORE)
        assert manifest is not None
        return {String.deserialize(k): timestamp for p in range(PARTITIONS)
                for batch in snapshots.read_partition(str(self.location), manifest, p) for k, _, timestamp in batch}

    def changelog_timestamps(self) -> dict[str, int]:
        """The timestamp of each key's latest changelog record."""
        changelog = sorted(read_topic(self.bootstrap, self.changelog, String, Long, PARTITIONS), key=lambda r: r.offset)
        return {r.key: r.timestamp for r in changelog}

    def changelog_partition_of_keys(self, bootstrap: str) -> tuple[dict[str, int], dict[int, int]]:
        """Which changelog partition each key is in, and each partition's end offset."""
        changelog = read_topic(bootstrap, self.changelog, String, Long, PARTITIONS)
        ends = {p: 1 + max((r.offset for r in changelog if r.partition == p), default=-1) for p in range(PARTITIONS)}
        return {r.key: r.partition for r in changelog}, ends


def metadata(result: dg.ExecuteInProcessResult) -> dict[str, Any]:
    [materialization] = result.asset_materializations_for_node(result.job_def.all_node_defs[0].name)
    return {key: value.value for key, value in materialization.metadata.items()}


def failure_message(result: dg.ExecuteInProcessResult) -> str:
    assert not result.success
    [event] = [e for e in result.all_events if e.is_step_failure]
    error = event.step_failure_data.error
    return f"{error.message} {error.cause.message if error.cause else ''}"


def store_contents(app: KafkaStreams) -> dict[str, int]:
    return dict(app.store(STORE).all())


def process_all(app: KafkaStreams, bootstrap: str, app_id: str, source: str, ends: dict[int, int]) -> None:
    wait_for(lambda: committed_offsets(bootstrap, app_id, source, PARTITIONS) == ends, 90,
             "the app to process and commit all input")


@contextlib.contextmanager
def read_only(*directories: Path) -> Iterator[None]:
    """Make directories unwritable, even for root (immutable attribute), and restore them after."""
    immutable = os.geteuid() == 0
    if immutable and not shutil.which("chattr"):
        pytest.skip("running as root without chattr: cannot make a directory unwritable")
    for directory in directories:
        directory.chmod(0o555)
        if immutable:
            subprocess.run(["chattr", "+i", str(directory)], check=True)
    try:
        yield
    finally:
        for directory in directories:
            if immutable:
                subprocess.run(["chattr", "-i", str(directory)], check=True)
            directory.chmod(0o755)


def test_compaction_snapshots_the_store_then_reads_only_the_tail(
        spark: SparkSession, bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    source = f"{unique_name}-lines"
    create_topics(bootstrap, {source: PARTITIONS})
    platform = Platform(bootstrap, unique_name, source, tmp_path / "snapshots", spark)
    first_updates = {f"k{i:03d}": 1 + i % 20 for i in range(100)}
    first_deletes = [f"k{i:03d}" for i in range(20)]
    ends = produce(bootstrap, source, records(first_updates, first_deletes, seed=1), String, String)

    app = KafkaStreams(topology(source), {"application.id": unique_name, "bootstrap.servers": bootstrap,
                                          "commit.interval.ms": 200, "state.dir": str(tmp_path / "state")})
    app.start()
    try:
        process_all(app, bootstrap, unique_name, source, ends)
        first_store = store_contents(app)
        assert first_store == {k: n for k, n in first_updates.items() if k not in first_deletes}

        first = platform.materialize()
        assert first.success, failure_message(first)
        manifest, rows = platform.snapshot()
        partition_of, changelog_ends = platform.changelog_partition_of_keys(bootstrap)
        assert {k: v for part in rows.values() for k, v in part.items()} == first_store
        assert all(partition_of[k] == p for p, part in rows.items() for k in part), "keys stay in their partition"
        latest_times = platform.changelog_timestamps()
        assert platform.snapshot_timestamps() == {k: latest_times[k] for k in first_store}, "record timestamps kept"
        changelog_records = sum(changelog_ends.values())
        meta = metadata(first)
        assert meta["records_read"] == manifest.records_read == changelog_records
        assert meta["keys_kept"] == manifest.keys == len(first_store) == 80
        assert meta["start_offsets"] == {str(p): 0 for p in range(PARTITIONS)}
        assert meta["next_offsets"] == {str(p): o for p, o in changelog_ends.items()} == \
            {str(p): o for p, o in manifest.next_offsets.items()}
        assert meta["compaction_ratio"] == pytest.approx(changelog_records / 80, rel=1e-3)
        assert meta["previous_snapshot"] == "none" and meta["snapshot_path"].endswith(f"data/{manifest.snapshot_id}")
        assert meta["duration_s"] > 0

        # More input: new keys, updates of kept keys, deletes of keys the first snapshot holds.
        second_updates = {f"k{i:03d}": 3 for i in range(50, 150)}
        second_deletes = [f"k{i:03d}" for i in range(60, 65)] + ["k000"]
        more = produce(bootstrap, source, records(second_updates, second_deletes, seed=2), String, String)
        process_all(app, bootstrap, unique_name, source, {p: max(ends[p], more.get(p, 0)) for p in ends})
        second_store = store_contents(app)
        expected = dict(first_store)
        for key, n in second_updates.items():
            expected[key] = expected.get(key, 0) + n
        for key in second_deletes:
            expected.pop(key, None)
        assert second_store == expected

        second = platform.materialize()
        assert second.success, failure_message(second)
        manifest2, rows2 = platform.snapshot()
        _, changelog_ends2 = platform.changelog_partition_of_keys(bootstrap)
        assert {k: v for part in rows2.values() for k, v in part.items()} == second_store
        meta2 = metadata(second)
        assert meta2["start_offsets"] == meta["next_offsets"], "the second run starts where the first ended"
        assert meta2["records_read"] == sum(changelog_ends2.values()) - changelog_records, "only the tail"
        assert meta2["previous_snapshot"] == manifest.snapshot_id and meta2["previous_keys"] == 80
        assert manifest2.previous == manifest.snapshot_id

        # An unwritable location: the run fails naming the path, the newest snapshot stays as it was.
        store_dir = tmp_path / "snapshots" / unique_name / STORE
        with read_only(store_dir / "data", store_dir / "manifests"):
            failed = platform.materialize()
            message = failure_message(failed)
        assert f"snapshot location {store_dir}/data is not writable" in message
        assert platform.snapshot() == (manifest2, rows2)

        # Truncation is refused on the embedded broker, before anything is sent or written.
        refused = platform.materialize(truncate=True)
        message = failure_message(refused)
        assert "truncate of changelog" in message and "cluster id 'tansu_cluster'" in message
        assert "nothing was compacted" in message
        assert platform.snapshot()[0].snapshot_id == manifest2.snapshot_id
        assert app.state is State.RUNNING
        assert create_topics(bootstrap, {source: PARTITIONS}) is None, "the broker still answers"
    finally:
        assert app.close(30)


def test_the_code_location_has_a_compaction_asset_per_store_in_the_spark_pool() -> None:
    from assets.definitions import defs

    graph = defs.resolve_asset_graph()
    node = graph.get(compaction_asset_key("wordcount", "word-counts"))
    assert [k.to_user_string() for k in node.parent_keys] == ["kafka/wordcount-word-counts-changelog"]
    assert defs.get_assets_def(node.key).op.pool == "spark"
    assert isinstance(defs.resources["pyspark"], SparkResource)
    dagster_yaml = yaml.safe_load((Path(__file__).resolve().parents[2] / "dagster.yaml").read_text())
    assert dagster_yaml["concurrency"]["pools"]["default_limit"] == 1, "one Spark-pool step at a time"


def test_a_fresh_instance_restores_the_snapshot_then_only_the_tail(
        spark: SparkSession, bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    """Issue 7, item 4: a task without local state loads the newest snapshot (state.snapshot.location) and
    replays only the changelog after it; the state equals a full restore's."""
    source = f"{unique_name}-lines"
    create_topics(bootstrap, {source: PARTITIONS})
    platform = Platform(bootstrap, unique_name, source, tmp_path / "snapshots", spark)
    config = {"application.id": unique_name, "bootstrap.servers": bootstrap, "commit.interval.ms": 200}
    app = KafkaStreams(topology(source), {**config, "state.dir": str(tmp_path / "state-a")})
    app.start()
    try:
        # Twelve rounds, each committed: a changelog of about a record per key per round (the changelog
        # holds each key's latest value per commit), of which the snapshot keeps one per key.
        for round_ in range(12):
            ends = produce(bootstrap, source, records({f"k{i:03d}": 3 for i in range(100)},
                                                      ["k000", "k001"] if round_ == 11 else [], seed=round_), String,
                           String)
            process_all(app, bootstrap, unique_name, source, ends)
        result = platform.materialize()
        assert result.success, failure_message(result)
        tail = produce(bootstrap, source, records({f"k{i:03d}": 2 for i in range(90, 120)}, ["k050"], seed=4),
                       String, String)
        process_all(app, bootstrap, unique_name, source, {p: max(ends[p], tail.get(p, 0)) for p in ends})
        expected = store_contents(app)
    finally:
        assert app.close(30)
    manifest, _ = platform.snapshot()
    _, changelog_ends = platform.changelog_partition_of_keys(bootstrap)
    tail_records = sum(changelog_ends[p] - manifest.partitions[p].next_offset for p in changelog_ends)
    assert 0 < tail_records < sum(changelog_ends.values()) / 10

    restored: dict[str, tuple[RestoreCounter, dict[str, int]]] = {}
    for name, extra in (("snapshot", {"state.snapshot.location": str(platform.location)}), ("changelog", {})):
        counter = RestoreCounter()
        fresh = KafkaStreams(topology(source), {**config, "state.dir": str(tmp_path / f"state-{name}"), **extra})
        fresh.set_global_state_restore_listener(counter)
        fresh.start()
        try:
            wait_for(lambda fresh=fresh: fresh.state is State.RUNNING, 60, f"the {name} restore")
            restored[name] = (counter, store_contents(fresh))
        finally:
            assert fresh.close(30)
    with_snapshot, from_changelog = restored["snapshot"][0], restored["changelog"][0]
    assert with_snapshot.snapshots == {manifest.snapshot_id}
    assert with_snapshot.snapshot_keys == manifest.keys
    assert with_snapshot.changelog_records == tail_records
    assert from_changelog.snapshot_keys == 0 and from_changelog.changelog_records == sum(changelog_ends.values())
    assert restored["snapshot"][1] == restored["changelog"][1] == expected


class SnapshotsPerPartition(RestoreCounter):
    """Which snapshot each changelog partition was loaded from."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded: dict[int, str] = {}

    def on_snapshot_restored(self, topic_partition: tuple[str, int], store_name: str, snapshot_id: str,
                             next_offset: int, num_restored: int) -> None:
        super().on_snapshot_restored(topic_partition, store_name, snapshot_id, next_offset, num_restored)
        self.loaded[topic_partition[1]] = snapshot_id


def restore_fresh(source: str, config: dict[str, Any], state_dir: Path,
                  location: Path) -> tuple[SnapshotsPerPartition, dict[str, int]]:
    """A fresh instance with snapshots: it must reach RUNNING; what it loaded, and its store."""
    listener = SnapshotsPerPartition()
    fresh = KafkaStreams(topology(source), {**config, "state.dir": str(state_dir),
                                            "state.snapshot.location": str(location)})
    fresh.set_global_state_restore_listener(listener)
    fresh.start()
    try:
        wait_for(lambda: fresh.state is State.RUNNING, 60, "the restore")
        return listener, store_contents(fresh)
    finally:
        assert fresh.close(30)


def rows_of(location: Path, app_id: str, manifest: snapshots.SnapshotManifest) -> list[tuple[int, str, int]]:
    """Every row of a snapshot as (partition, key, value), duplicates kept."""
    return sorted((p, String.deserialize(k), Long.deserialize(v)) for p in manifest.partitions
                  for batch in snapshots.read_partition(str(location), manifest, p) for k, v, _ in batch)


def test_two_compactions_at_once_publish_two_whole_snapshots(spark: SparkSession, bootstrap: str, unique_name: str,
                                                             tmp_path: Path) -> None:
    """Issue 16, item 11: two threads run the real compaction of one store at the same moment."""
    import threading

    from assets.spark.compaction import compact_changelog

    changelog = f"{unique_name}-{STORE}-changelog"
    create_topics(bootstrap, {changelog: PARTITIONS})
    updates = [GeneratedRecord(f"k{i % 300:03d}", i, 1_700_000_000_000 + i) for i in range(3_000)]
    produce(bootstrap, changelog, updates, String, Long)
    expected = {r.key: r.value for r in updates}
    location = tmp_path / "snapshots"
    barrier = threading.Barrier(2)
    outcomes: list[Any] = []

    def run() -> None:
        barrier.wait()
        try:
            outcomes.append(compact_changelog(spark, client_config={"bootstrap.servers": bootstrap},
                                              location=str(location), application_id=unique_name, store=STORE,
                                              changelog_topic=changelog, keep=5))
        except Exception as exc:  # noqa: BLE001 - reported by the assertions below
            outcomes.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert all(not isinstance(o, Exception) for o in outcomes), outcomes
    ids = sorted(o.manifest.snapshot_id for o in outcomes)
    assert ids == ["00000001", "00000002"] == snapshots.list_snapshot_ids(str(location), unique_name, STORE)
    for snapshot_id in ids:
        manifest = snapshots.read_manifest(str(location), unique_name, STORE, snapshot_id)
        rows = rows_of(location, unique_name, manifest)
        assert len(rows) == manifest.keys == len(expected), f"snapshot {snapshot_id}: rows and manifest agree"
        assert {k: v for _, k, v in rows} == expected
        assert snapshots.damaged_partitions(str(location), manifest) == {}


def test_a_damaged_snapshot_is_never_restored_short_nor_carried_forward(
        spark: SparkSession, bootstrap: str, unique_name: str, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """Issue 16, items 12 and 13: a data file of the newest snapshot is deleted. A fresh worker loads the
    previous snapshot for that partition (loudly, naming snapshot and partition) and reaches RUNNING with every
    key; compaction skips the damaged snapshot, merges the previous one and reports what it read."""
    source = f"{unique_name}-lines"
    create_topics(bootstrap, {source: PARTITIONS})
    platform = Platform(bootstrap, unique_name, source, tmp_path / "snapshots", spark)
    config = {"application.id": unique_name, "bootstrap.servers": bootstrap, "commit.interval.ms": 200}
    app = KafkaStreams(topology(source), {**config, "state.dir": str(tmp_path / "state-a")})
    app.start()
    try:
        ends = produce(bootstrap, source, records({f"k{i:03d}": 2 for i in range(120)}, [], seed=1), String, String)
        process_all(app, bootstrap, unique_name, source, ends)
        assert platform.materialize().success
        more = produce(bootstrap, source, records({f"k{i:03d}": 1 for i in range(60, 200)}, ["k001"], seed=2),
                       String, String)
        ends = {p: max(ends[p], more.get(p, 0)) for p in ends}
        process_all(app, bootstrap, unique_name, source, ends)
        second = platform.materialize()
        assert second.success
        expected = store_contents(app)
    finally:
        assert app.close(30)
    first_id, second_id = snapshots.list_snapshot_ids(str(platform.location), unique_name, STORE)
    manifest = snapshots.read_manifest(str(platform.location), unique_name, STORE, second_id)
    damaged = max(manifest.partitions, key=lambda p: manifest.partitions[p].keys)
    partition_dir = platform.location / unique_name / STORE / "data" / second_id / f"partition={damaged}"
    [lost] = sorted(partition_dir.glob("*.parquet"))[:1]
    lost.unlink()
    assert not any(partition_dir.glob("*.parquet")), "the partition's only data file is gone"

    caplog.set_level(logging.INFO)
    listener, restored = restore_fresh(source, config, tmp_path / "state-b", platform.location)
    assert restored == expected, "no key lost"
    assert listener.loaded == {**{p: second_id for p in range(PARTITIONS)}, damaged: first_id}
    assert any(r.levelname == "ERROR" and f"snapshot {second_id}" in r.getMessage()
               and f"{platform.changelog}[{damaged}]" in r.getMessage() for r in caplog.records)

    third = platform.materialize()
    assert third.success, failure_message(third)
    meta = metadata(third)
    first = snapshots.read_manifest(str(platform.location), unique_name, STORE, first_id)
    assert meta["previous_snapshot"] == first_id and list(meta["skipped_damaged_snapshots"]) == [second_id]
    assert meta["previous_keys"] == first.keys, "the rows read from the snapshot merged, not another's manifest"
    newest, rows = platform.snapshot()
    assert {k: v for part in rows.values() for k, v in part.items()} == expected, "the loss is not carried forward"
    assert newest.previous == first_id and newest.keys == len(expected)


def test_a_recreated_changelog_is_not_restored_from_old_snapshots(
        spark: SparkSession, bootstrap: str, unique_name: str, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """Issue 16, item 14: the app's topics are deleted and recreated with 2 partitions (a reset or a
    re-partitioning with the old snapshots left behind). The worker must not load the 4-partition snapshot,
    and compaction refuses it, by the same rule (StoreIdentity.conflict)."""
    source = f"{unique_name}-lines"
    create_topics(bootstrap, {source: PARTITIONS})
    platform = Platform(bootstrap, unique_name, source, tmp_path / "snapshots", spark)
    config = {"application.id": unique_name, "bootstrap.servers": bootstrap, "commit.interval.ms": 200}
    app = KafkaStreams(topology(source), {**config, "state.dir": str(tmp_path / "state-a")})
    app.start()
    try:
        ends = produce(bootstrap, source, records({f"k{i:03d}": 5 for i in range(100)}, [], seed=1), String, String)
        process_all(app, bootstrap, unique_name, source, ends)
    finally:
        assert app.close(30)
    assert platform.materialize().success
    old = snapshots.latest_manifest(str(platform.location), unique_name, STORE)
    assert old is not None and old.store_identity.changelog_id != "none", "the embedded broker reports topic ids"

    from confluent_kafka.admin import AdminClient

    app_topics = [t for t in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
                  if t.startswith(unique_name)]  # the input and every internal topic, as an application reset does
    assert source in app_topics and platform.changelog in app_topics
    delete_topics(bootstrap, app_topics)
    create_topics(bootstrap, {source: 2})
    new_counts = {f"k{i:03d}": 1 for i in range(10)}
    produce(bootstrap, source, records(new_counts, [], seed=3), String, String)
    caplog.set_level(logging.INFO)
    listener, restored = restore_fresh(source, config, tmp_path / "state-b", platform.location)
    assert listener.loaded == {}
    assert any(r.levelname == "ERROR" and f"snapshot {old.snapshot_id}" in r.getMessage()
               and "was recreated" in r.getMessage() for r in caplog.records)
    assert all(restored.get(k, 0) <= 1 for k in new_counts) and set(restored) <= set(new_counts), "no stale keys"

    refused = platform.materialize()
    message = failure_message(refused)
    assert f"snapshot {old.snapshot_id} of store {STORE!r} cannot be continued" in message
    assert "was recreated" in message
