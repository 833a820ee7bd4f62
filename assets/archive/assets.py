"""The archive assets: ``archive/<topic>`` for every topic of the platform spec, one partition per day.

Inputs and outputs alike (the archived outputs are what the quality checks read; the archived
inputs feed backfills); changelogs are not archived (compaction snapshots them). A partition holds
exactly the records whose timestamp falls in its UTC day; re-materializing a day replaces it.

The set of assets comes from the spec the code location loaded; a run reads the spec again through
the ``platform`` resource for the topic's formats and the archive's location and disorder bound.
Archive and compaction assets share the ``spark`` pool.
"""

from typing import Any

import dagster as dg

from assets.archive.keys import ARCHIVE_GROUP, archive_asset_key, archive_partitions, partition_day
from assets.archive.materialize import ArchivedDay, archive_day
from assets.compaction import SPARK_POOL
from assets.platform_spec import ArchiveSpec, PlatformSpec
from assets.resources import KafkaResource, PlatformResource, SparkResource
from assets.topics import topic_asset_key

__all__ = ["COMPLETE_METADATA", "archive_assets"]

#: The materialization's metadata key that says whether the day's archive is final (``True``: every partition has
#: a record past the day's end plus the disorder bound, so no record of the day can still come) or an hourly
#: partial run of the day so far (``False``). The recompute sensor acts only on checks of final archives.
COMPLETE_METADATA = "complete"


def _metadata(archived: ArchivedDay) -> dict[str, Any]:
    partitions = archived.partitions
    return {
        "rows": archived.rows,
        "undecodable": archived.undecodable,
        "rows_per_partition": dg.MetadataValue.json({str(p): r.rows for p, r in partitions.items()}),
        "offset_ranges": dg.MetadataValue.json(
            {str(p): {"read": [r.start, r.end], "day": [r.first_offset, r.last_offset], "closed": r.closed}
             for p, r in partitions.items()}),
        COMPLETE_METADATA: archived.complete,
        "max_disorder_seen_ms": max((r.max_behind_ms for r in partitions.values()), default=0),
        "bytes": archived.bytes,
        "path": dg.MetadataValue.path(str(archived.path)),
        "duration_s": round(archived.seconds, 2),
    }


def _archive_asset(spec: PlatformSpec, archive_spec: ArchiveSpec, topic: str) -> dg.AssetsDefinition:
    topic_spec = spec.topics[topic]

    @dg.asset(
        key=archive_asset_key(topic),
        group_name=ARCHIVE_GROUP,
        partitions_def=archive_partitions(archive_spec),
        deps=[topic_asset_key(topic)],
        pool=SPARK_POOL,
        kinds={"spark", "parquet"},
        description=(f"Kafka topic {topic} by day of record timestamp, decoded into Parquet columns "
                     f"({', '.join(topic_spec.columns())}) under {archive_spec.location}/{topic}/date=<day>/."),
    )
    def archive(context: dg.AssetExecutionContext, kafka: KafkaResource, platform: PlatformResource,
                pyspark: SparkResource) -> dg.MaterializeResult:
        current = platform.spec()
        if topic not in current.topics or current.archive is None:
            raise dg.Failure(f"topic {topic!r} or the archive section is no longer in the platform spec "
                             f"{platform.path}: reload the code location")
        archived = archive_day(pyspark.spark_session, kafka.client_config(), topic, current.topics[topic],
                               current.archive, partition_day(context.partition_key),
                               physical_topic=current.physical_topic(topic))
        context.log.info(f"archived {archived.rows} records of {topic} for {archived.day} "
                         f"({archived.undecodable} undecodable) to {archived.path} in {archived.seconds:.1f} s")
        return dg.MaterializeResult(metadata=_metadata(archived))

    return archive


def archive_assets(spec: PlatformSpec) -> list[dg.AssetsDefinition]:
    """One daily-partitioned archive asset per topic the spec declares (none without an archive section)."""
    if spec.archive is None:
        return []
    return [_archive_asset(spec, spec.archive, topic) for topic in spec.topics]
