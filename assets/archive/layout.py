"""Where the archive keeps a topic's day, and how to read it back.

``<root>/<topic>/date=<YYYY-MM-DD>/`` holds the day's records as Parquet files, a manifest
(``_archive.json``: offset ranges, row counts, when it was written), ``_raw/`` (every record of the
day as Kafka held it, decodable or not: ``partition``, ``offset``, ``timestamp``, ``key`` and ``value``
bytes, ``headers`` — what a replay of the app needs; its count is the manifest's ``raw_records``) and,
when some records could not be decoded, ``_undecodable/`` (their raw key and value bytes and the
reason). Readers (pyarrow, Spark, pandas) skip names starting with ``_`` or ``.``, so
``spark.read.parquet("<root>/<topic>")`` gives the decoded records of every day with a ``date``
column. A day directory appears whole or not at all (see :mod:`assets.archive.writer`). Days archived
before ``_raw/`` existed have no ``raw_records`` in their manifest: archive them again to replay them.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["MANIFEST", "RAW_DIR", "UNDECODABLE_DIR", "ArchiveMissingError", "day_dir", "day_row_count",
           "raw_dir", "read_day", "read_manifest", "read_undecodable", "undecodable_row_count"]

MANIFEST = "_archive.json"
UNDECODABLE_DIR = "_undecodable"
RAW_DIR = "_raw"


class ArchiveMissingError(FileNotFoundError):
    """A topic's day has not been archived (its directory does not exist)."""


def day_dir(root: Path, topic: str, day: date) -> Path:
    """``<root>/<topic>/date=<day>``."""
    return root / topic / f"date={day.isoformat()}"


def _existing(root: Path, topic: str, day: date) -> Path:
    path = day_dir(root, topic, day)
    if not path.is_dir():
        raise ArchiveMissingError(f"topic {topic!r} has no archive for {day.isoformat()}: {path} does not exist "
                                  f"(materialize archive/{topic} partition {day.isoformat()})")
    return path


def raw_dir(root: Path, topic: str, day: date) -> Path:
    """``<root>/<topic>/date=<day>/_raw``: the day's records as Kafka held them (raises if the day is not archived)."""
    return _existing(root, topic, day) / RAW_DIR


def read_day(root: Path, topic: str, day: date, columns: list[str] | None = None) -> pd.DataFrame:
    """The day's decoded records as a pandas DataFrame (``columns`` only, when given)."""
    import pyarrow.dataset as ds

    dataset = ds.dataset(_existing(root, topic, day), format="parquet")
    wanted = None if columns is None else [c for c in columns if c in dataset.schema.names]
    return dataset.to_table(columns=wanted).to_pandas()


def day_row_count(root: Path, topic: str, day: date) -> int:
    """How many decoded records the day holds (from Parquet metadata, without reading rows)."""
    import pyarrow.dataset as ds

    return ds.dataset(_existing(root, topic, day), format="parquet").count_rows()


def read_manifest(root: Path, topic: str, day: date) -> dict[str, Any]:
    """The day's manifest: what was read (offset ranges), written (rows) and when."""
    return json.loads((_existing(root, topic, day) / MANIFEST).read_text())


def _undecodable_dataset(root: Path, topic: str, day: date) -> Any:
    import pyarrow.dataset as ds

    path = _existing(root, topic, day) / UNDECODABLE_DIR
    return ds.dataset(path, format="parquet") if path.is_dir() else None


def read_undecodable(root: Path, topic: str, day: date, columns: list[str] | None = None) -> pd.DataFrame:
    """The day's undecodable records (topic, partition, offset, timestamp, raw ``key`` and ``value`` bytes,
    ``error``), ``columns`` only when given; an empty frame when the day has none."""
    import pandas as pd

    dataset = _undecodable_dataset(root, topic, day)
    if dataset is None:
        return pd.DataFrame(columns=columns or ["topic", "partition", "offset", "timestamp", "key", "value", "error"])
    return dataset.to_table(columns=columns).to_pandas()


def undecodable_row_count(root: Path, topic: str, day: date) -> int:
    """How many of the day's records could not be decoded (from Parquet metadata)."""
    dataset = _undecodable_dataset(root, topic, day)
    return 0 if dataset is None else dataset.count_rows()
