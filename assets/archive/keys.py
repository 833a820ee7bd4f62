"""How archive assets are addressed: asset keys, their group, and their daily partitions."""

from __future__ import annotations

from datetime import date

import dagster as dg

from assets.platform_spec import ArchiveSpec

__all__ = ["ARCHIVE_GROUP", "archive_asset_key", "archive_partitions", "partition_day"]

ARCHIVE_GROUP = "archive"


def archive_asset_key(topic: str) -> dg.AssetKey:
    """``archive/<topic>``: the asset key of a topic's Parquet archive."""
    return dg.AssetKey(["archive", topic])


def archive_partitions(archive: ArchiveSpec) -> dg.DailyPartitionsDefinition:
    """One partition per UTC day from ``archive.start_date``, today's included (``end_offset=1``), so
    the hourly schedule can archive the day so far."""
    return dg.DailyPartitionsDefinition(start_date=archive.start_date.isoformat(), timezone="UTC", end_offset=1)


def partition_day(partition_key: str) -> date:
    """The day a partition key (``YYYY-MM-DD``) names."""
    return date.fromisoformat(partition_key)
