"""The layout of changelog snapshots: Parquet data plus a JSON manifest, shared by writer and reader.

The Dagster platform compacts a store's changelog with Spark into a snapshot (``assets/compaction.py``);
workers restore from the newest one and then replay only the changelog after it. Both sides use this
module, which needs nothing but pyarrow. One directory per changelog::

    <location>/<application_id>/<store>/
        data/<snapshot_id>/partition=<p>/part-*.parquet   columns key binary, value binary, offset long,
                                                          timestamp long (the record's, epoch ms)
        manifests/<snapshot_id>.json                       written last, atomically

- A snapshot exists only when its manifest does. The manifest is written after all data, atomically
  (a temporary file, fsync, rename, fsync of the directory on local disks; one single-object PUT on
  object stores), so a crash mid-write never leaves a manifest pointing at partial data; readers
  ignore data directories without a manifest.
- ``snapshot_id`` is a zero-padded generation (``00000007``): ids sort by age. A writer reserves its id
  before writing anything (:func:`claim_snapshot_id`: a claim file under ``claims/``, kept only when no
  other writer claimed the same id), so two compactions of one store at once write two snapshots, never
  one directory twice.
- A manifest records, per partition, the rows (``keys``) and a checksum of them (:func:`row_checksum`
  summed); readers verify what they read against both (:func:`damaged_partitions` for the row counts from
  the Parquet footers alone) and never use a snapshot that does not match. It also records the store's
  identity (:mod:`streaming.state.store_identity`): which changelog, of which incarnation, it was made from.
- Pruning leaves a snapshot for ``grace`` seconds after a newer one was published: a restore may be reading it.
- A partition's rows are the latest value of each key of that changelog partition up to (not
  including) the manifest's ``next_offset`` for it; tombstoned keys are absent. ``offset`` is the
  changelog offset of the row's record. A partition with no keys has no directory.
- An application reset retires every snapshot of the stores it resets (:func:`retire`): the manifest and the data
  move to ``retired/<reset epoch they were made under>/`` (manifest first, so the snapshot stops being one at
  once). Nothing reads or prunes that directory: delete it when it is no longer wanted.
- ``location`` is a local path, a ``file://`` URI, or an object-store / HDFS URI (``s3://``, ``hdfs://``;
  Hadoop's ``s3a://`` is read as ``s3://``), opened with :mod:`pyarrow.fs`.

Query the snapshots with Spark SQL: ``spark.read.parquet("<location>/<app>/<store>/data/<snapshot_id>")``
gives ``key, value, offset, timestamp, partition``.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from streaming.state.store_identity import StoreIdentity

__all__ = [
    "ABANDONED_AFTER_S",
    "CLAIM_DIR",
    "DATA_DIR",
    "MANIFEST_FORMAT",
    "RETIRED_DIR",
    "PartitionSnapshot",
    "SnapshotError",
    "SnapshotManifest",
    "claim_snapshot_id",
    "damaged_partitions",
    "data_uri",
    "ensure_writable",
    "latest_manifest",
    "list_snapshot_ids",
    "make_durable",
    "next_snapshot_id",
    "prune",
    "read_manifest",
    "read_partition",
    "retire",
    "row_checksum",
    "store_uri",
    "utc_now_iso",
    "write_manifest",
]

MANIFEST_FORMAT = 1
DATA_DIR = "data"
MANIFEST_DIR = "manifests"
CLAIM_DIR = "claims"
RETIRED_DIR = "retired"
_ID_WIDTH = 8
_ID = re.compile(r"^\d+$")
_MANIFEST_NAME = re.compile(r"^(\d+)\.json$")
_CLAIM_NAME = re.compile(r"^(\d+)\.([0-9a-f]+)$")


class SnapshotError(Exception):
    """A snapshot location cannot be read or written, or a manifest is invalid (names the path)."""


@dataclass(frozen=True)
class PartitionSnapshot:
    """What a snapshot holds of one changelog partition."""

    next_offset: int
    """The changelog offset the snapshot covers up to (exclusive): restore the tail from here."""
    keys: int
    """Keys in the snapshot (after dropping tombstones)."""
    records_read: int
    """Changelog records read by the compaction that made this snapshot (the tail since the previous one)."""
    checksum: int | None = None
    """The sum of :func:`row_checksum` over the partition's rows (None in manifests written before it)."""


def row_checksum(key: bytes, value: bytes) -> int:
    """CRC-32 of one snapshot row: the key's length (4 bytes, big-endian), the key, the value. Spark computes
    the same (``crc32(concat(unhex(lpad(hex(length(key)), 8, '0')), key, value))``); a partition's checksum is
    the sum over its rows, so it does not depend on their order."""
    return zlib.crc32(len(key).to_bytes(4, "big") + key + value)  # one call: 3x faster than chaining three


@dataclass(frozen=True)
class SnapshotManifest:
    """The manifest of one snapshot (``manifests/<snapshot_id>.json``)."""

    snapshot_id: str
    application_id: str
    store: str
    changelog_topic: str
    created_at: str
    """ISO 8601, UTC."""
    partitions: dict[int, PartitionSnapshot]
    records_read: int
    keys: int
    duration_s: float
    previous: str | None = None
    data: str = ""
    """Path of the data directory relative to the store directory (``data/<snapshot_id>``)."""
    format: int = MANIFEST_FORMAT
    extra: dict[str, Any] = field(default_factory=dict)
    """Fields a newer writer added; kept so they round-trip."""
    identity: StoreIdentity | None = None
    """Which changelog, of which incarnation, the snapshot was made from; derived from the fields above
    (topic id, reset epoch and generation unknown) for a manifest written without one."""

    def __post_init__(self) -> None:
        if not self.data:
            object.__setattr__(self, "data", f"{DATA_DIR}/{self.snapshot_id}")
        if self.identity is None:
            object.__setattr__(self, "identity", StoreIdentity(self.application_id, self.store, self.changelog_topic,
                                                               len(self.partitions)))

    @property
    def store_identity(self) -> StoreIdentity:
        assert self.identity is not None  # set by __post_init__
        return self.identity

    @property
    def next_offsets(self) -> dict[int, int]:
        """``next_offset`` per partition."""
        return {p: s.next_offset for p, s in self.partitions.items()}

    def to_json(self) -> str:
        """The manifest as JSON, fields in the documented order."""
        body: dict[str, Any] = {
            "format": self.format,
            "snapshot_id": self.snapshot_id,
            "application_id": self.application_id,
            "store": self.store,
            "changelog_topic": self.changelog_topic,
            "created_at": self.created_at,
            "data": self.data,
            "previous": self.previous,
            "partitions": {
                str(p): {"next_offset": s.next_offset, "keys": s.keys, "records_read": s.records_read,
                         **({} if s.checksum is None else {"checksum": s.checksum})}
                for p, s in sorted(self.partitions.items())
            },
            "records_read": self.records_read,
            "keys": self.keys,
            "duration_s": round(self.duration_s, 3),
            "identity": self.store_identity.to_json(),
            **self.extra,
        }
        return json.dumps(body, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str) -> SnapshotManifest:
        """Parse a manifest; ``where`` (its path) is named in errors.

        Raises:
            SnapshotError: not JSON, a field missing or of the wrong type, or an unknown format.
        """
        try:
            raw = json.loads(text)
            if raw.get("format") != MANIFEST_FORMAT:
                raise SnapshotError(f"manifest {where}: format {raw.get('format')!r} is not {MANIFEST_FORMAT}")
            known = {"format", "snapshot_id", "application_id", "store", "changelog_topic", "created_at", "data",
                     "previous", "partitions", "records_read", "keys", "duration_s", "identity"}
            return cls(
                snapshot_id=str(raw["snapshot_id"]),
                application_id=str(raw["application_id"]),
                store=str(raw["store"]),
                changelog_topic=str(raw["changelog_topic"]),
                created_at=str(raw["created_at"]),
                data=str(raw["data"]),
                previous=None if raw["previous"] is None else str(raw["previous"]),
                partitions={
                    int(p): PartitionSnapshot(int(s["next_offset"]), int(s["keys"]), int(s["records_read"]),
                                              None if s.get("checksum") is None else int(s["checksum"]))
                    for p, s in raw["partitions"].items()
                },
                records_read=int(raw["records_read"]),
                keys=int(raw["keys"]),
                duration_s=float(raw["duration_s"]),
                extra={k: v for k, v in raw.items() if k not in known},
                identity=StoreIdentity.from_json(raw["identity"]) if "identity" in raw else None,
            )
        except SnapshotError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SnapshotError(f"manifest {where} is invalid: {type(exc).__name__}: {exc}") from None


def utc_now_iso() -> str:
    """Now, as the manifest's ``created_at`` format."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# ------------------------------------------------------------------------------------------ locations


@dataclass(frozen=True)
class _Store:
    fs: pafs.FileSystem
    root: str  # the store directory, in the filesystem's own path form
    uri: str  # the same directory as the user wrote the location (for messages)
    local: bool

    def path(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    def shown(self, path: str) -> str:
        """``path`` (from :meth:`path`) in the form the user wrote the location in."""
        return self.uri + path[len(self.root.rstrip("/")):]


def _is_uri(location: str) -> bool:
    return re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", location) is not None


def store_uri(location: str, application_id: str, store: str) -> str:
    """The store directory as a URI or path in ``location``'s own form (what Spark is given)."""
    if _is_uri(location):
        return f"{location.rstrip('/')}/{application_id}/{store}"
    return str(Path(location).absolute() / application_id / store)


def data_uri(location: str, manifest: SnapshotManifest) -> str:
    """The data directory of a snapshot, in ``location``'s own form."""
    return f"{store_uri(location, manifest.application_id, manifest.store)}/{manifest.data}"


def _filesystem_from_uri(uri: str) -> tuple[pafs.FileSystem, str]:
    return pafs.FileSystem.from_uri(uri)


def _open(location: str, application_id: str, store: str) -> _Store:
    if not _is_uri(location) or location.startswith("file://"):
        path = location.removeprefix("file://")
        root = Path(path).absolute() / application_id / store
        return _Store(pafs.LocalFileSystem(), str(root), str(root), local=True)
    uri = "s3://" + location[len("s3a://"):] if location.startswith("s3a://") else location
    try:
        fs, base = _filesystem_from_uri(uri)
    except (OSError, ValueError) as exc:
        raise SnapshotError(f"cannot open snapshot location {location}: {exc}") from exc
    root = f"{base.rstrip('/')}/{application_id}/{store}"
    return _Store(fs, root, store_uri(location, application_id, store), local=False)


def _names(target: _Store, directory: str, *, dirs: bool) -> list[str]:
    try:
        infos = target.fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
    except OSError as exc:
        raise SnapshotError(f"cannot list {target.shown(directory)}: {exc}") from exc
    wanted = pafs.FileType.Directory if dirs else pafs.FileType.File
    return sorted(info.base_name for info in infos if info.type == wanted)


# ------------------------------------------------------------------------------------------ manifests


def list_snapshot_ids(location: str, application_id: str, store: str) -> list[str]:
    """Ids of the snapshots that exist (have a manifest), oldest first."""
    target = _open(location, application_id, store)
    ids = [m.group(1) for name in _names(target, target.path(MANIFEST_DIR), dirs=False)
           if (m := _MANIFEST_NAME.match(name))]
    return sorted(ids, key=int)


def read_manifest(location: str, application_id: str, store: str, snapshot_id: str) -> SnapshotManifest:
    """One snapshot's manifest.

    Raises:
        SnapshotError: it cannot be read or is invalid (names the path).
    """
    target = _open(location, application_id, store)
    path = target.path(MANIFEST_DIR, f"{snapshot_id}.json")
    try:
        with target.fs.open_input_stream(path) as stream:
            text = stream.read().decode()
    except OSError as exc:
        raise SnapshotError(f"cannot read manifest {target.shown(path)}: {exc}") from exc
    return SnapshotManifest.from_json(text, target.shown(path))


def latest_manifest(location: str, application_id: str, store: str) -> SnapshotManifest | None:
    """The newest snapshot's manifest, or ``None`` when there is none."""
    ids = list_snapshot_ids(location, application_id, store)
    return read_manifest(location, application_id, store, ids[-1]) if ids else None


def _claims(target: _Store) -> list[tuple[str, str]]:
    """``(snapshot id, token)`` of every claim file."""
    return [(m.group(1), m.group(2)) for name in _names(target, target.path(CLAIM_DIR), dirs=False)
            if (m := _CLAIM_NAME.match(name))]


def next_snapshot_id(location: str, application_id: str, store: str) -> str:
    """An id newer than every snapshot, data directory (even one a crashed write left) and claim."""
    target = _open(location, application_id, store)
    data_ids = [name for name in _names(target, target.path(DATA_DIR), dirs=True) if _ID.match(name)]
    claimed = [snapshot_id for snapshot_id, _ in _claims(target)]
    taken = [int(i) for i in [*list_snapshot_ids(location, application_id, store), *data_ids, *claimed]]
    return f"{max(taken, default=0) + 1:0{_ID_WIDTH}d}"


def claim_snapshot_id(location: str, application_id: str, store: str, attempts: int = 20) -> str:
    """Reserve a new snapshot id for this writer alone, before it writes anything.

    The writer publishes a claim ``claims/<id>.<random token>`` for :func:`next_snapshot_id`, then lists the
    claims of that id: it keeps the id only if its claim is the only one, else it withdraws the claim and tries
    again after a short random pause. Two writers can never both keep one id: whichever lists second sees the
    other's claim, which was written before the first one listed (this needs a listing that shows completed
    writes, as local disks, HDFS and S3 give). Claims are removed by :func:`prune`.

    Raises:
        SnapshotError: the location is not writable, or ``attempts`` claims all met another writer's.
    """
    target = _open(location, application_id, store)
    directory = target.path(CLAIM_DIR)
    for _ in range(attempts):
        snapshot_id = next_snapshot_id(location, application_id, store)
        token = uuid.uuid4().hex
        mine = target.path(CLAIM_DIR, f"{snapshot_id}.{token}")
        try:
            target.fs.create_dir(directory, recursive=True)
            with target.fs.open_output_stream(mine) as stream:
                stream.write(utc_now_iso().encode())
            rivals = [t for i, t in _claims(target) if i == snapshot_id and t != token]
            if not rivals:
                return snapshot_id
            target.fs.delete_file(mine)
        except OSError as exc:
            raise SnapshotError(f"cannot claim a snapshot id under {target.shown(directory)}: {exc}") from exc
        time.sleep(random.uniform(0.05, 0.5))
    raise SnapshotError(f"could not claim a snapshot id under {target.shown(directory)} in {attempts} attempts: "
                        "other compactions of the store claim the same ids; run one at a time")


def write_manifest(location: str, manifest: SnapshotManifest) -> str:
    """Publish a snapshot: write its manifest atomically and durably; returns the manifest's path.

    Call it only once the data is durable (:func:`make_durable`). Locally: temporary file, fsync,
    rename, fsync of the directory. On object stores: one single-object PUT (pyarrow writes objects
    below its multipart threshold, far above a manifest's size, in one request).

    Raises:
        SnapshotError: the location is not writable (names the path).
    """
    target = _open(location, manifest.application_id, manifest.store)
    directory = target.path(MANIFEST_DIR)
    path = target.path(MANIFEST_DIR, f"{manifest.snapshot_id}.json")
    payload = manifest.to_json().encode()
    try:
        if target.local:
            os.makedirs(directory, exist_ok=True)
            tmp = os.path.join(directory, f".{manifest.snapshot_id}.json.{uuid.uuid4().hex[:8]}.tmp")
            try:
                with open(tmp, "wb") as handle:
                    handle.write(payload)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            _fsync_dir(directory)
        else:
            target.fs.create_dir(directory, recursive=True)
            with target.fs.open_output_stream(path) as stream:
                stream.write(payload)
    except OSError as exc:
        raise SnapshotError(f"cannot write manifest {target.shown(path)}: {exc}") from exc
    return path


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_durable(location: str, application_id: str, store: str, snapshot_id: str) -> None:
    """Flush a snapshot's data files to disk before its manifest is written (local locations; on
    object stores a completed upload is durable already). Spark's local writer does not fsync.

    Raises:
        SnapshotError: a file cannot be synced (names the path).
    """
    target = _open(location, application_id, store)
    if not target.local:
        return
    root = target.path(DATA_DIR, snapshot_id)
    try:
        for directory, _dirs, files in os.walk(root):
            for name in files:
                with open(os.path.join(directory, name), "rb") as handle:
                    os.fsync(handle.fileno())
            _fsync_dir(directory)
        _fsync_dir(target.path(DATA_DIR))
    except OSError as exc:
        raise SnapshotError(f"cannot sync snapshot data {root}: {exc}") from exc


def ensure_writable(location: str, application_id: str, store: str) -> None:
    """Create the store's directories and prove they take writes (a probe file, removed again).

    Raises:
        SnapshotError: the location is not writable (names the path and the reason).
    """
    target = _open(location, application_id, store)
    for directory in (target.path(DATA_DIR), target.path(MANIFEST_DIR)):
        probe = f"{directory}/.write-probe-{uuid.uuid4().hex[:8]}"
        try:
            target.fs.create_dir(directory, recursive=True)
            with target.fs.open_output_stream(probe) as stream:
                stream.write(b"probe")
            target.fs.delete_file(probe)
        except OSError as exc:
            raise SnapshotError(f"snapshot location {target.shown(directory)} is not writable: {exc}") from exc


ABANDONED_AFTER_S = 6 * 3600.0
"""A claimed id with no manifest is a write in progress until its claim is this old; after that, a failed one."""


def prune(location: str, application_id: str, store: str, keep: int, grace_s: float = 0.0,
          now: float | None = None, abandoned_after_s: float = ABANDONED_AFTER_S) -> list[str]:
    """Delete all but the ``keep`` newest snapshots: each manifest first, then its data. A snapshot is kept
    anyway while the snapshot after it was published less than ``grace_s`` seconds ago (its ``created_at``):
    until then a restore may have picked it as the newest and still be reading it. Data directories and claims
    of ids that have no manifest go once their id is older than the newest snapshot and their claim is older
    than ``abandoned_after_s`` (a failed write; a younger claim may be another run's write in progress, slower
    than the one pruning, whatever ``grace_s`` is); a data directory with no claim at all goes at once.
    Returns the deleted ids.

    Raises:
        SnapshotError: ``keep`` < 1, or a deletion failed (names the path).
    """
    if keep < 1:
        raise SnapshotError(f"keep must be at least 1, got {keep}")
    now = time.time() if now is None else now
    target = _open(location, application_id, store)
    ids = list_snapshot_ids(location, application_id, store)
    deleted: list[str] = []
    try:
        published = {i: _published_at(read_manifest(location, application_id, store, i)) for i in ids}
        for index, snapshot_id in enumerate(ids[:-keep]):
            if now - published[ids[index + 1]] < grace_s:
                continue  # superseded only just now: a restore may be reading it
            target.fs.delete_file(target.path(MANIFEST_DIR, f"{snapshot_id}.json"))
            _delete_dir(target, target.path(DATA_DIR, snapshot_id))
            deleted.append(snapshot_id)
        newest = int(ids[-1]) if ids else 0
        young_claims = set()
        for claim_id, token in _claims(target):
            path = target.path(CLAIM_DIR, f"{claim_id}.{token}")
            mtime = target.fs.get_file_info(path).mtime
            if claim_id not in ids and (int(claim_id) > newest
                                        or (mtime is not None and now - mtime.timestamp() < abandoned_after_s)):
                young_claims.add(claim_id)
            else:
                target.fs.delete_file(path)
        for name in _names(target, target.path(DATA_DIR), dirs=True):
            if _ID.match(name) and name not in ids and int(name) < newest and name not in young_claims:
                _delete_dir(target, target.path(DATA_DIR, name))
                deleted.append(name)
    except OSError as exc:
        raise SnapshotError(f"cannot prune snapshots under {target.uri}: {exc}") from exc
    return sorted(set(deleted), key=int)


def _published_at(manifest: SnapshotManifest) -> float:
    try:
        return datetime.fromisoformat(manifest.created_at).timestamp()
    except ValueError:
        return 0.0  # an unreadable time: old enough


def _delete_dir(target: _Store, directory: str) -> None:
    if target.fs.get_file_info(directory).type != pafs.FileType.NotFound:
        target.fs.delete_dir(directory)


def retire(location: str, manifest: SnapshotManifest) -> str:
    """Move a snapshot out of use (an application reset made it stale): its manifest, then its data, to
    ``retired/<epoch>/manifests/<id>.json`` and ``retired/<epoch>/data/<id>/`` of the store directory, ``<epoch>``
    being the reset epoch the snapshot was made under. Returns the retired snapshot's directory as the user
    wrote the location.

    Raises:
        SnapshotError: a move failed (names the path); what was moved stays moved, a data directory left
            without its manifest is no snapshot (and :func:`prune` removes it).
    """
    target = _open(location, manifest.application_id, manifest.store)
    epoch = manifest.store_identity.reset_epoch
    retired = target.path(RETIRED_DIR, epoch)
    moves = [(target.path(MANIFEST_DIR, f"{manifest.snapshot_id}.json"),
              target.path(RETIRED_DIR, epoch, MANIFEST_DIR, f"{manifest.snapshot_id}.json")),
             (target.path(manifest.data), target.path(RETIRED_DIR, epoch, DATA_DIR, manifest.snapshot_id))]
    try:
        for source, destination in moves:
            info = target.fs.get_file_info(source)
            if info.type == pafs.FileType.NotFound:
                continue  # a partition-less snapshot has no data directory
            target.fs.create_dir(destination.rsplit("/", 1)[0], recursive=True)
            if target.local or info.type == pafs.FileType.File:
                target.fs.move(source, destination)  # a rename locally; one object elsewhere
            else:  # object stores cannot move a directory: copy its files, then delete it
                for item in target.fs.get_file_info(pafs.FileSelector(source, recursive=True)):
                    if item.type == pafs.FileType.File:
                        copy = destination + item.path[len(source):]
                        target.fs.create_dir(copy.rsplit("/", 1)[0], recursive=True)
                        target.fs.copy_file(item.path, copy)
                target.fs.delete_dir(source)
    except OSError as exc:
        raise SnapshotError(f"cannot retire snapshot {manifest.snapshot_id} of store {manifest.store} to "
                            f"{target.shown(retired)}: {exc}") from exc
    return target.shown(retired)


# ------------------------------------------------------------------------------------------ reading


def read_partition(location: str, manifest: SnapshotManifest, partition: int,
                   batch_size: int = 65_536) -> Iterator[list[tuple[bytes, bytes, int]]]:
    """The ``(key, value, timestamp)`` rows of one partition of a snapshot, in batches of up to ``batch_size``
    (the timestamp of each row's changelog record, which a timestamped store keeps with the value).

    Yields nothing when the partition has no keys, and also when its directory is missing: compare what was
    read with the manifest (``keys``, ``checksum``; :func:`damaged_partitions` for the counts up front).

    Raises:
        SnapshotError: a data file cannot be read (names the path).
    """
    target = _open(location, manifest.application_id, manifest.store)
    for path in _partition_files(target, manifest, partition):
        shown = target.shown(path)
        try:
            with target.fs.open_input_file(path) as handle:
                parquet = pq.ParquetFile(handle)
                for batch in parquet.iter_batches(batch_size=batch_size, columns=["key", "value", "timestamp"]):
                    yield list(zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(),
                                   batch.column(2).to_pylist(), strict=True))
        except (OSError, ValueError, KeyError) as exc:
            raise SnapshotError(f"cannot read snapshot file {shown}: {exc}") from exc


def _partition_files(target: _Store, manifest: SnapshotManifest, partition: int) -> list[str]:
    directory = target.path(manifest.data, f"partition={partition}")
    return [f"{directory}/{name}" for name in _names(target, directory, dirs=False)
            if name.endswith(".parquet") and not name.startswith((".", "_"))]


def damaged_partitions(location: str, manifest: SnapshotManifest,
                       partitions: list[int] | None = None) -> dict[int, str]:
    """The partitions of a snapshot whose data files do not hold the manifest's ``keys`` rows (counted from the
    Parquet footers, no rows read), each with what is wrong: a missing or emptied partition directory, a file
    gone or unreadable, rows added. ``partitions``: those only (default all of the manifest's).

    Raises:
        SnapshotError: the location cannot be listed (names the path).
    """
    target = _open(location, manifest.application_id, manifest.store)
    damaged: dict[int, str] = {}
    for partition in sorted(manifest.partitions) if partitions is None else partitions:
        expected = manifest.partitions[partition].keys
        rows = 0
        try:
            for path in _partition_files(target, manifest, partition):
                with target.fs.open_input_file(path) as handle:
                    rows += pq.ParquetFile(handle).metadata.num_rows
        except (OSError, ValueError) as exc:
            damaged[partition] = f"a data file cannot be read ({exc})"
            continue
        if rows != expected:
            where = target.shown(target.path(manifest.data, f"partition={partition}"))
            damaged[partition] = f"its data files hold {rows} rows, the manifest says {expected} ({where})"
    return damaged
