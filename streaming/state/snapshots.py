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
- ``snapshot_id`` is a zero-padded generation (``00000007``): ids sort by age.
- A partition's rows are the latest value of each key of that changelog partition up to (not
  including) the manifest's ``next_offset`` for it; tombstoned keys are absent. ``offset`` is the
  changelog offset of the row's record. A partition with no keys has no directory.
- ``location`` is a local path, a ``file://`` URI, or an object-store / HDFS URI (``s3://``, ``hdfs://``;
  Hadoop's ``s3a://`` is read as ``s3://``), opened with :mod:`pyarrow.fs`.

Query the snapshots with Spark SQL: ``spark.read.parquet("<location>/<app>/<store>/data/<snapshot_id>")``
gives ``key, value, offset, timestamp, partition``.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq

__all__ = [
    "DATA_DIR",
    "MANIFEST_FORMAT",
    "PartitionSnapshot",
    "SnapshotError",
    "SnapshotManifest",
    "data_uri",
    "ensure_writable",
    "latest_manifest",
    "list_snapshot_ids",
    "make_durable",
    "next_snapshot_id",
    "prune",
    "read_manifest",
    "read_partition",
    "store_uri",
    "utc_now_iso",
    "write_manifest",
]

MANIFEST_FORMAT = 1
DATA_DIR = "data"
MANIFEST_DIR = "manifests"
_ID_WIDTH = 8
_ID = re.compile(r"^\d+$")
_MANIFEST_NAME = re.compile(r"^(\d+)\.json$")


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

    def __post_init__(self) -> None:
        if not self.data:
            object.__setattr__(self, "data", f"{DATA_DIR}/{self.snapshot_id}")

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
                str(p): {"next_offset": s.next_offset, "keys": s.keys, "records_read": s.records_read}
                for p, s in sorted(self.partitions.items())
            },
            "records_read": self.records_read,
            "keys": self.keys,
            "duration_s": round(self.duration_s, 3),
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
                     "previous", "partitions", "records_read", "keys", "duration_s"}
            return cls(
                snapshot_id=str(raw["snapshot_id"]),
                application_id=str(raw["application_id"]),
                store=str(raw["store"]),
                changelog_topic=str(raw["changelog_topic"]),
                created_at=str(raw["created_at"]),
                data=str(raw["data"]),
                previous=None if raw["previous"] is None else str(raw["previous"]),
                partitions={
                    int(p): PartitionSnapshot(int(s["next_offset"]), int(s["keys"]), int(s["records_read"]))
                    for p, s in raw["partitions"].items()
                },
                records_read=int(raw["records_read"]),
                keys=int(raw["keys"]),
                duration_s=float(raw["duration_s"]),
                extra={k: v for k, v in raw.items() if k not in known},
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


def next_snapshot_id(location: str, application_id: str, store: str) -> str:
    """An id newer than every snapshot and every data directory (even one a crashed write left)."""
    target = _open(location, application_id, store)
    data_ids = [name for name in _names(target, target.path(DATA_DIR), dirs=True) if _ID.match(name)]
    taken = [int(i) for i in [*list_snapshot_ids(location, application_id, store), *data_ids]]
    return f"{max(taken, default=0) + 1:0{_ID_WIDTH}d}"


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


def prune(location: str, application_id: str, store: str, keep: int) -> list[str]:
    """Delete all but the ``keep`` newest snapshots: each manifest first, then its data. Data
    directories older than the newest snapshot that have no manifest (left by a failed write) go
    too; newer ones may be a write in progress and are left alone. Returns the deleted ids.

    Raises:
        SnapshotError: ``keep`` < 1, or a deletion failed (names the path).
    """
    if keep < 1:
        raise SnapshotError(f"keep must be at least 1, got {keep}")
    target = _open(location, application_id, store)
    ids = list_snapshot_ids(location, application_id, store)
    deleted: list[str] = []
    try:
        for snapshot_id in ids[:-keep]:
            target.fs.delete_file(target.path(MANIFEST_DIR, f"{snapshot_id}.json"))
            _delete_dir(target, target.path(DATA_DIR, snapshot_id))
            deleted.append(snapshot_id)
        newest = int(ids[-1]) if ids else 0
        for name in _names(target, target.path(DATA_DIR), dirs=True):
            if _ID.match(name) and name not in ids and int(name) < newest:
                _delete_dir(target, target.path(DATA_DIR, name))
                deleted.append(name)
    except OSError as exc:
        raise SnapshotError(f"cannot prune snapshots under {target.uri}: {exc}") from exc
    return sorted(set(deleted), key=int)


def _delete_dir(target: _Store, directory: str) -> None:
    if target.fs.get_file_info(directory).type != pafs.FileType.NotFound:
        target.fs.delete_dir(directory)


# ------------------------------------------------------------------------------------------ reading


def read_partition(location: str, manifest: SnapshotManifest, partition: int,
                   batch_size: int = 65_536) -> Iterator[list[tuple[bytes, bytes, int]]]:
    """The ``(key, value, timestamp)`` rows of one partition of a snapshot, in batches of up to ``batch_size``
    (the timestamp of each row's changelog record, which a timestamped store keeps with the value).

    Yields nothing when the partition has no keys.

    Raises:
        SnapshotError: a data file cannot be read (names the path).
    """
    target = _open(location, manifest.application_id, manifest.store)
    directory = target.path(manifest.data, f"partition={partition}")
    files = [name for name in _names(target, directory, dirs=False)
             if name.endswith(".parquet") and not name.startswith((".", "_"))]
    for name in files:
        path = f"{directory}/{name}"
        shown = target.shown(path)
        try:
            with target.fs.open_input_file(path) as handle:
                parquet = pq.ParquetFile(handle)
                for batch in parquet.iter_batches(batch_size=batch_size, columns=["key", "value", "timestamp"]):
                    yield list(zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(),
                                   batch.column(2).to_pylist(), strict=True))
        except (OSError, ValueError, KeyError) as exc:
            raise SnapshotError(f"cannot read snapshot file {shown}: {exc}") from exc
