"""Changelog compaction assets: one per logged store of every app in the platform spec.

``snapshots/<app>/<store>`` depends on the store's changelog topic asset. Each materialization runs
:func:`assets.spark.compaction.compact_changelog` (the previous snapshot plus the changelog tail
since it -> a new Parquet snapshot and manifest under the spec's ``snapshots.location``; see
``streaming/state/snapshots.py`` for the layout), prunes snapshots past ``snapshots.keep``, and
optionally truncates the changelog below the oldest snapshot kept (run config ``truncate: true``; refused
on the embedded broker, see :mod:`assets.truncation`). The assets share the ``spark`` pool, so two
compactions never compete for the cores.

No ``from __future__ import annotations`` here: Dagster reads the asset function's ``config``
annotation as a class, not a string.
"""

import os

import dagster as dg
from pydantic import Field

from assets.platform_spec import AppSpec, PlatformSpec, StoreSpec, repo_root
from assets.resources import KafkaResource, PlatformResource, SparkResource
from assets.topics import topic_asset_key

__all__ = ["COMPACTION_GROUP", "SPARK_POOL", "CompactionConfig", "compaction_asset_key", "compaction_assets"]

COMPACTION_GROUP = "compaction"
SPARK_POOL = "spark"


class CompactionConfig(dg.Config):
    """Run config of a compaction asset."""

    truncate: bool = Field(
        default=False,
        description="After the snapshot's manifest is written, delete the changelog records below it "
                    "(Kafka DeleteRecords). Refused on the embedded broker.",
    )


def compaction_asset_key(app_name: str, store: str) -> dg.AssetKey:
    """``snapshots/<app>/<store>``."""
    return dg.AssetKey(["snapshots", app_name, store])


def compaction_assets(spec: PlatformSpec) -> list[dg.AssetsDefinition]:
    """One compaction asset per store with a changelog, of every app in ``spec``."""
    return [_compaction_asset(app_name, app, store)
            for app_name, app in spec.apps.items() for store in app.stores if store.changelog]


def _compaction_asset(app_name: str, app: AppSpec, store: StoreSpec) -> dg.AssetsDefinition:
    changelog = app.changelog_topic(store.name)

    @dg.asset(
        key=compaction_asset_key(app_name, store.name),
        deps=[topic_asset_key(changelog)],
        group_name=COMPACTION_GROUP,
        kinds={"spark", "parquet"},
        pool=SPARK_POOL,
        description=(f"Snapshot of store {store.name!r} of app {app_name!r}: the latest value of each key of "
                     f"changelog {changelog}, compacted by Spark into Parquet plus a manifest of covered offsets."),
        metadata={"app": app_name, "store": store.name, "changelog_topic": changelog},
    )
    def compact(context: dg.AssetExecutionContext, config: CompactionConfig, kafka: KafkaResource,
                platform: PlatformResource, pyspark: SparkResource) -> dg.MaterializeResult:
        from assets.spark.compaction import compact_changelog
        from assets.truncation import delete_records_refusal, kept_next_offsets, truncate_changelog

        spec = platform.spec()
        client_config = kafka.client_config()
        # The asset is named by the logical changelog; its records are in the generation the spec names now.
        physical = spec.apps[app_name].physical_changelog(store.name)
        if config.truncate:
            cluster = spec.cluster()
            refusal = delete_records_refusal(client_config, cluster=_cluster_name(spec),
                                             declared_embedded=cluster.embedded)
            if refusal:
                raise dg.Failure(f"truncate of changelog {physical} refused, nothing was compacted: {refusal}")
        location = spec.snapshots.resolved_location(repo_root())
        result = compact_changelog(pyspark.spark_session, client_config=client_config, location=location,
                                   application_id=app.application_id, store=store.name,
                                   changelog_topic=physical, keep=spec.snapshots.keep,
                                   prune_grace_s=spec.snapshots.prune_grace_minutes * 60)
        manifest = result.manifest
        for skipped, why in result.skipped.items():
            context.log.error(f"snapshot {skipped} of {physical} is damaged and was not continued: {why}")
        context.log.info(f"snapshot {manifest.snapshot_id} of {physical}: {manifest.records_read} records read, "
                         f"{result.previous_keys} rows of snapshot {manifest.previous or 'none'} merged, "
                         f"{manifest.keys} keys kept, in {manifest.duration_s:.1f} s -> {result.snapshot_uri}")
        metadata: dict[str, object] = {
            "snapshot_id": manifest.snapshot_id,
            "previous_snapshot": manifest.previous or "none",
            "records_read": manifest.records_read,
            # What was read from the base snapshot (checked against its manifest), not what the manifest says.
            "previous_keys": result.previous_keys,
            "previous_rows_per_partition": {str(p): n for p, n in sorted(result.base_rows.items())},
            "skipped_damaged_snapshots": result.skipped,
            "changelog_physical_topic": physical,
            "changelog_topic_id": manifest.store_identity.changelog_id,
            "keys_kept": manifest.keys,
            "dagster/row_count": manifest.keys,
            "compaction_ratio": dg.MetadataValue.float(round(result.compaction_ratio, 3)),
            "start_offsets": {str(p): o for p, o in sorted(result.start_offsets.items())},
            "next_offsets": {str(p): o for p, o in sorted(manifest.next_offsets.items())},
            "duration_s": dg.MetadataValue.float(round(manifest.duration_s, 3)),
            "snapshot_path": dg.MetadataValue.path(result.snapshot_uri),
            "pruned_snapshots": result.pruned,
        }
        if config.truncate:
            # Below the oldest snapshot kept, not the new one: a restore may still be reading an older one.
            low = truncate_changelog(client_config, physical, kept_next_offsets(location, app.application_id,
                                                                                 store.name))
            metadata["truncated_below"] = {str(p): o for p, o in sorted(low.items())}
        return dg.MaterializeResult(metadata=metadata)

    return compact


def _cluster_name(spec: PlatformSpec) -> str:
    """The name of the cluster ``spec.cluster()`` picks."""
    return os.environ.get("BROOK_CLUSTER") or spec.default_cluster
