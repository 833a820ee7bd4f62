"""The snapshot layout (streaming.state.snapshots) with Parquet written by pyarrow; no Spark."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from streaming.state import snapshots as snap
from streaming.state.snapshots import PartitionSnapshot, SnapshotError, SnapshotManifest

APP, STORE = "wordcount", "word-counts"


def write_data(location: Path, snapshot_id: str, rows: dict[int, list[tuple[bytes, bytes, int]]],
               files_per_partition: int = 1) -> None:
    """Parquet as Spark's ``partitionBy("partition")`` writes it: key, value, offset, timestamp per file (the
    timestamp is offset * 10 here)."""
    for partition, part_rows in rows.items():
        directory = location / APP / STORE / "data" / snapshot_id / f"partition={partition}"
        directory.mkdir(parents=True)
        step = -(-len(part_rows) // files_per_partition)
        for n in range(files_per_partition):
            chunk = part_rows[n * step:(n + 1) * step]
            table = pa.table({"key": pa.array([r[0] for r in chunk], pa.binary()),
                              "value": pa.array([r[1] for r in chunk], pa.binary()),
                              "offset": pa.array([r[2] for r in chunk], pa.int64()),
                              "timestamp": pa.array([r[2] * 10 for r in chunk], pa.int64())})
            pq.write_table(table, directory / f"part-{n:05d}-c000.zstd.parquet")
        (directory / ".part-00000-c000.zstd.parquet.crc").write_bytes(b"crc")  # Hadoop's, ignored
    (location / APP / STORE / "data" / snapshot_id / "_SUCCESS").touch()


def manifest(snapshot_id: str, partitions: dict[int, int], previous: str | None = None) -> SnapshotManifest:
    return SnapshotManifest(
        snapshot_id=snapshot_id, application_id=APP, store=STORE, changelog_topic=f"{APP}-{STORE}-changelog",
        created_at=snap.utc_now_iso(), previous=previous,
        partitions={p: PartitionSnapshot(next_offset=n, keys=n // 2, records_read=n) for p, n in partitions.items()},
        records_read=sum(partitions.values()), keys=sum(n // 2 for n in partitions.values()), duration_s=1.23456)


def publish(location: Path, snapshot_id: str, previous: str | None = None) -> SnapshotManifest:
    write_data(location, snapshot_id, {0: [(b"a", b"1", 0)], 1: [(b"b", b"2", 3)]})
    m = manifest(snapshot_id, {0: 1, 1: 4, 2: 0}, previous)
    snap.write_manifest(str(location), m)
    return m


def test_manifest_json_has_the_documented_fields_and_round_trips(tmp_path: Path) -> None:
    m = manifest("00000002", {0: 10, 1: 7}, previous="00000001")
    body = json.loads(m.to_json())
    assert list(body) == ["format", "snapshot_id", "application_id", "store", "changelog_topic", "created_at",
                          "data", "previous", "partitions", "records_read", "keys", "duration_s", "identity"]
    assert body["data"] == "data/00000002"
    assert body["identity"] == {"application_id": APP, "store": STORE, "changelog_topic": f"{APP}-{STORE}-changelog",
                                "partitions": 2, "changelog_id": "none", "reset_epoch": "none", "generation": "none"}
    assert body["partitions"] == {"0": {"next_offset": 10, "keys": 5, "records_read": 10},
                                  "1": {"next_offset": 7, "keys": 3, "records_read": 7}}
    assert body["created_at"].endswith("Z") and body["duration_s"] == 1.235
    again = SnapshotManifest.from_json(json.dumps({**body, "written_by": "a newer writer"}), "m.json")
    assert again.next_offsets == {0: 10, 1: 7}
    assert again.identity == m.identity
    old = {k: v for k, v in body.items() if k != "identity"}  # written before identities: one is derived
    assert SnapshotManifest.from_json(json.dumps(old), "m.json").identity == m.identity
    assert again.extra == {"written_by": "a newer writer"}
    assert json.loads(again.to_json())["written_by"] == "a newer writer"


@pytest.mark.parametrize(("text", "message"), [
    ("not json", "manifest .*m.json is invalid"),
    ('{"format": 2}', "format 2 is not 1"),
    ('{"format": 1, "snapshot_id": "1"}', "is invalid: KeyError"),
])
def test_bad_manifests_name_their_path(text: str, message: str) -> None:
    with pytest.raises(SnapshotError, match=message):
        SnapshotManifest.from_json(text, "/x/m.json")


def test_write_then_find_and_read_the_latest(tmp_path: Path) -> None:
    assert snap.latest_manifest(str(tmp_path), APP, STORE) is None
    assert snap.next_snapshot_id(str(tmp_path), APP, STORE) == "00000001"
    first = publish(tmp_path, "00000001")
    second = publish(tmp_path, "00000002", previous="00000001")
    latest = snap.latest_manifest(str(tmp_path), APP, STORE)
    assert latest is not None and latest.snapshot_id == "00000002" != first.snapshot_id
    assert (latest.previous, latest.partitions, latest.keys) == ("00000001", second.partitions, second.keys)
    assert list(snap.read_partition(str(tmp_path), latest, 1)) == [[(b"b", b"2", 30)]]
    assert list(snap.read_partition(str(tmp_path), latest, 2)) == [], "a partition without keys"
    assert not list((tmp_path / APP / STORE / "manifests").glob(".*")), "no temporary file is left"


def test_data_without_a_manifest_is_no_snapshot(tmp_path: Path) -> None:
    publish(tmp_path, "00000001")
    write_data(tmp_path, "00000002", {0: [(b"half", b"written", 5)]})  # a write that crashed
    (tmp_path / APP / STORE / "manifests" / ".00000003.json.abcd.tmp").write_text("{}")
    assert snap.list_snapshot_ids(str(tmp_path), APP, STORE) == ["00000001"]
    assert snap.latest_manifest(str(tmp_path), APP, STORE).snapshot_id == "00000001"  # type: ignore[union-attr]
    assert snap.next_snapshot_id(str(tmp_path), APP, STORE) == "00000003", "never reuses a crashed write's id"


def test_read_partition_batches_many_files(tmp_path: Path) -> None:
    rows = [(b"k%06d" % i, b"v%d" % i, i) for i in range(25_000)]
    write_data(tmp_path, "00000001", {3: rows}, files_per_partition=3)
    m = manifest("00000001", {3: 25_000})
    snap.write_manifest(str(tmp_path), m)
    batches = list(snap.read_partition(str(tmp_path), m, 3, batch_size=4_000))
    assert max(len(b) for b in batches) == 4_000
    assert [kv for b in batches for kv in b] == [(k, v, offset * 10) for k, v, offset in rows]


def test_prune_keeps_the_newest_and_removes_stale_orphans(tmp_path: Path) -> None:
    for n in range(1, 5):
        publish(tmp_path, f"{n:08d}")
    write_data(tmp_path, "00000000", {0: [(b"x", b"y", 0)]})  # orphan older than the newest: stale
    write_data(tmp_path, "00000009", {0: [(b"x", b"y", 0)]})  # newer than the newest: maybe in progress
    assert snap.prune(str(tmp_path), APP, STORE, keep=2) == ["00000000", "00000001", "00000002"]
    assert snap.list_snapshot_ids(str(tmp_path), APP, STORE) == ["00000003", "00000004"]
    data = sorted(p.name for p in (tmp_path / APP / STORE / "data").iterdir())
    assert data == ["00000003", "00000004", "00000009"]
    with pytest.raises(SnapshotError, match="keep must be at least 1"):
        snap.prune(str(tmp_path), APP, STORE, keep=0)


def test_unwritable_location_is_named(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    location = str(blocker / "snapshots")
    with pytest.raises(SnapshotError, match=f"snapshot location {blocker}/snapshots/{APP}/{STORE}/data is not"):
        snap.ensure_writable(location, APP, STORE)
    with pytest.raises(SnapshotError, match=f"cannot write manifest {blocker}/snapshots/{APP}/{STORE}/manifests"):
        snap.write_manifest(location, manifest("00000001", {0: 1}))
    snap.ensure_writable(str(tmp_path / "ok"), APP, STORE)
    assert sorted(p.name for p in (tmp_path / "ok" / APP / STORE).iterdir()) == ["data", "manifests"]
    assert not list((tmp_path / "ok" / APP / STORE / "data").iterdir()), "the probe is removed"


def test_object_store_locations(monkeypatch: pytest.MonkeyPatch) -> None:
    """``s3a://`` is opened as ``s3://``; manifests go out as one write (an in-memory filesystem here)."""
    memory = pafs._MockFileSystem()
    opened: list[str] = []

    def from_uri(uri: str) -> tuple[pafs.FileSystem, str]:
        opened.append(uri)
        return memory, uri.split("://", 1)[1]

    monkeypatch.setattr(snap, "_filesystem_from_uri", from_uri)
    location = "s3a://bucket/brook/snapshots"
    assert snap.store_uri(location, APP, STORE) == f"s3a://bucket/brook/snapshots/{APP}/{STORE}"
    for n in (1, 2):
        m = manifest(f"{n:08d}", {0: 5})
        memory.create_dir(f"bucket/brook/snapshots/{APP}/{STORE}/data/{m.snapshot_id}/partition=0", recursive=True)
        with memory.open_output_stream(
                f"bucket/brook/snapshots/{APP}/{STORE}/data/{m.snapshot_id}/partition=0/part-0.parquet") as out:
            pq.write_table(pa.table({"key": [b"k"], "value": [b"v%d" % n], "offset": [4], "timestamp": [40]}), out)
        snap.make_durable(location, APP, STORE, m.snapshot_id)  # nothing to sync on an object store
        snap.write_manifest(location, m)
    assert opened and all(uri.startswith("s3://bucket/brook/snapshots") for uri in opened)
    latest = snap.latest_manifest(location, APP, STORE)
    assert latest is not None and latest.snapshot_id == "00000002"
    assert snap.data_uri(location, latest) == f"s3a://bucket/brook/snapshots/{APP}/{STORE}/data/00000002"
    assert list(snap.read_partition(location, latest, 0)) == [[(b"k", b"v2", 40)]]
    with pytest.raises(SnapshotError, match=f"cannot read manifest s3a://bucket/brook/snapshots/{APP}/{STORE}/"
                                            "manifests/00000099.json"):
        snap.read_manifest(location, APP, STORE, "00000099")
    assert snap.prune(location, APP, STORE, keep=1) == ["00000001"]
    assert snap.list_snapshot_ids(location, APP, STORE) == ["00000002"]


def test_prune_leaves_a_snapshot_superseded_within_the_grace_period(tmp_path: Path) -> None:
    """Issue 16, item 12: a restore may be reading the snapshot that was the newest a moment ago."""
    for n in range(1, 4):
        publish(tmp_path, f"{n:08d}")
    now = time.time()
    assert snap.prune(str(tmp_path), APP, STORE, keep=1, grace_s=600, now=now) == []
    assert snap.prune(str(tmp_path), APP, STORE, keep=1, grace_s=600, now=now + 601) == ["00000001", "00000002"]


def test_claims_reserve_ids_and_a_young_claim_keeps_its_data_from_prune(tmp_path: Path) -> None:
    """Issue 16, item 11: an id is handed out once, even before anything is written under it."""
    location = str(tmp_path)
    publish(tmp_path, "00000001")
    claimed = [snap.claim_snapshot_id(location, APP, STORE) for _ in range(3)]
    assert claimed == ["00000002", "00000003", "00000004"]
    write_data(tmp_path, "00000002", {0: [(b"x", b"y", 0)]})  # a run in progress, slower than the others
    publish(tmp_path, "00000003")
    assert snap.prune(location, APP, STORE, keep=5, grace_s=600) == []
    assert (tmp_path / APP / STORE / "data" / "00000002").is_dir(), "another run's write in progress"
    assert snap.prune(location, APP, STORE, keep=5, grace_s=0) == [], "a write in progress outlives any grace"
    assert (tmp_path / APP / STORE / "data" / "00000002").is_dir()
    later = time.time() + snap.ABANDONED_AFTER_S + 1
    assert snap.prune(location, APP, STORE, keep=5, grace_s=0, now=later) == ["00000002"], "abandoned: a failed write"
    assert sorted(p.name.split(".")[0] for p in (tmp_path / APP / STORE / "claims").iterdir()) == ["00000004"]


def test_a_rival_claim_of_the_same_id_makes_the_writer_take_another(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    location = str(tmp_path)
    claims = tmp_path / APP / STORE / "claims"
    real_next = snap.next_snapshot_id
    calls = []

    def next_id_with_a_rival(*args: str) -> str:
        snapshot_id = real_next(*args)
        if not calls:  # another writer claims the same id at the same moment
            claims.mkdir(parents=True, exist_ok=True)
            (claims / f"{snapshot_id}.{'f' * 32}").write_text("rival")
        calls.append(snapshot_id)
        return snapshot_id

    monkeypatch.setattr(snap, "next_snapshot_id", next_id_with_a_rival)
    assert snap.claim_snapshot_id(location, APP, STORE) == "00000002"
    assert calls == ["00000001", "00000002"]
    assert sorted(p.name[:8] for p in claims.iterdir()) == ["00000001", "00000002"], "the loser withdrew its claim"


def test_damaged_partitions_counts_rows_from_the_footers(tmp_path: Path) -> None:
    write_data(tmp_path, "00000001", {0: [(b"a", b"1", 0), (b"b", b"2", 1)], 1: [(b"c", b"3", 2)]})
    m = SnapshotManifest(snapshot_id="00000001", application_id=APP, store=STORE, changelog_topic="c",
                         created_at=snap.utc_now_iso(), partitions={0: PartitionSnapshot(5, 2, 5),
                                                                     1: PartitionSnapshot(3, 1, 3),
                                                                     2: PartitionSnapshot(0, 0, 0)},
                         records_read=8, keys=3, duration_s=1.0)
    assert snap.damaged_partitions(str(tmp_path), m) == {}
    for part in (tmp_path / APP / STORE / "data" / "00000001" / "partition=1").glob("*.parquet"):
        part.unlink()
    assert snap.damaged_partitions(str(tmp_path), m) == {
        1: f"its data files hold 0 rows, the manifest says 1 ({tmp_path}/{APP}/{STORE}/data/00000001/partition=1)"}


def test_a_snapshot_identity_conflicts_with_a_recreated_or_repartitioned_changelog() -> None:
    """Issue 16, item 14: the one rule the worker and compaction apply."""
    from streaming.state.store_identity import StoreIdentity

    snapshot = StoreIdentity("app", "s", "app-s-changelog", 4, changelog_id="AaITXFDWeVOkhYldXFP5XQ")
    same = StoreIdentity("app", "s", "app-s-changelog", 4, changelog_id="AaITXFDWeVOkhYldXFP5XQ")
    assert snapshot.conflict(same) is None
    assert snapshot.conflict(StoreIdentity("app", "s", "app-s-changelog", 4)) is None, "a broker without ids"
    cases = {
        StoreIdentity("app", "s", "app-s-changelog", 4, changelog_id="AaITXFT4dwCExGCJKOqzNg"): "was recreated",
        StoreIdentity("app", "s", "app-s-changelog", 2): "covers 4 partition(s) of changelog app-s-changelog, "
                                                         "which has 2",
        StoreIdentity("app", "s", "app-s-changelog", 4, reset_epoch="3"): "under reset epoch none",
        StoreIdentity("app", "s", "app-s-changelog", 4, generation="v2"): "from topic generation none",
        StoreIdentity("app", "s", "app-s-changelog.v2", 4): "covers changelog app-s-changelog, not",
    }
    for live, reason in cases.items():
        assert reason in (snapshot.conflict(live) or ""), live


def test_a_reset_retires_snapshots_out_of_use_and_out_of_prunes_reach(tmp_path: Path) -> None:
    """Issue 17, item 2: a snapshot of an older reset epoch moves to retired/<epoch>/, manifest and data; it is no
    snapshot any more (never listed, loaded or pruned), and the next compaction starts from the changelog."""
    location = str(tmp_path)
    first = publish(tmp_path, "00000001")
    second = publish(tmp_path, "00000002", previous="00000001")
    store_dir = tmp_path / APP / STORE
    assert snap.retire(location, first) == str(store_dir / "retired" / "none")
    assert snap.list_snapshot_ids(location, APP, STORE) == ["00000002"]
    snap.retire(location, second)
    assert snap.list_snapshot_ids(location, APP, STORE) == []
    retired = store_dir / "retired" / "none"
    assert sorted(p.name for p in (retired / "manifests").iterdir()) == ["00000001.json", "00000002.json"]
    assert sorted(p.name for p in (retired / "data" / "00000002").iterdir()) == ["_SUCCESS", "partition=0",
                                                                                   "partition=1"]
    assert not (store_dir / "data" / "00000001").exists()
    assert snap.prune(location, APP, STORE, keep=1) == []
    assert (retired / "data" / "00000001" / "partition=0").is_dir()


def test_retiring_on_an_object_store_copies_the_data_then_deletes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    memory = pafs._MockFileSystem()
    monkeypatch.setattr(snap, "_filesystem_from_uri", lambda uri: (memory, uri.split("://", 1)[1]))
    location, root = "s3://bucket/snaps", f"bucket/snaps/{APP}/{STORE}"
    m = manifest("00000003", {0: 5})
    memory.create_dir(f"{root}/data/00000003/partition=0", recursive=True)
    with memory.open_output_stream(f"{root}/data/00000003/partition=0/part-0.parquet") as out:
        pq.write_table(pa.table({"key": [b"k"], "value": [b"v"], "offset": [4], "timestamp": [40]}), out)
    snap.write_manifest(location, m)
    assert snap.retire(location, m) == f"s3://bucket/snaps/{APP}/{STORE}/retired/none"
    assert snap.list_snapshot_ids(location, APP, STORE) == []
    files = memory.get_file_info(pafs.FileSelector(f"{root}/retired", recursive=True))
    assert sorted(f.path for f in files if f.type == pafs.FileType.File) == [
        f"{root}/retired/none/data/00000003/partition=0/part-0.parquet", f"{root}/retired/none/manifests/00000003.json"]
    assert memory.get_file_info(f"{root}/data/00000003").type == pafs.FileType.NotFound
