"""The topic archive: every topic of the platform spec copied into daily Parquet partitions by record time."""

from assets.archive.keys import ARCHIVE_GROUP, archive_asset_key, archive_partitions, partition_day

__all__ = ["ARCHIVE_GROUP", "archive_asset_key", "archive_partitions", "partition_day"]
