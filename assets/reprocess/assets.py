"""The ``reprocessed/<app>`` assets: each app's own topology over its archived input, one partition per day.

A run reprocesses its day on the code location's Spark session; a backfill of a range of days is one run
(``BackfillPolicy.single_run``) that reprocesses them in order in that one session, after refusing what it can for
the whole range (:func:`assets.reprocess.job.check_days`). From the command line, with the pinned Dagster::

    dagster asset materialize -m assets.definitions --select reprocessed/orders \
        --partition-range 2023-11-14...2023-11-16

Day ``D`` depends on the archive of the app's inputs for ``D`` and ``D + 1`` (a day's run replays records up to the
day's end plus the inputs' disorder bound) and on day ``D - 1`` of itself (its run goes on from the state the day
before left). A backfill run's metadata gives each day's figures under ``per_day``. The spec's quality rules on the
app's output topics run on each day's outputs as checks of the asset, on every day of a backfill's range (freshness
rules excepted: a recomputed past day is not expected to be fresh), with the same Great Expectations suites as on
the archive.

A day that cannot be reprocessed fails its run with one line saying why and what to do (a day with no archive, a
topology with a wall-clock punctuator, naming the processor, ...), before anything is read or written. With
``reprocess.publish: true`` the day's outputs are also produced to Kafka (``assets.reprocess.publish``), through the
``kafka`` resource; default off.

No ``from __future__ import annotations`` here: Dagster reads the asset function's annotations as classes.
"""

import warnings
from datetime import timedelta
from typing import Any

import dagster as dg

from assets.archive.keys import archive_asset_key, archive_partitions, partition_day
from assets.compaction import SPARK_POOL
from assets.platform_spec import AppSpec, PlatformSpec
from assets.quality.checks import TopicDays, rule_check
from assets.resources import KafkaResource, PlatformResource, SparkResource

__all__ = ["REPROCESS_GROUP", "reprocess_asset_key", "reprocess_assets", "reprocess_checks"]

REPROCESS_GROUP = "reprocess"
warnings.filterwarnings("ignore", message="Parameter `backfill_policy`", category=dg.BetaWarning)  # beta in 1.13


def reprocess_asset_key(app_name: str) -> dg.AssetKey:
    """``reprocessed/<app>``."""
    return dg.AssetKey(["reprocessed", app_name])


def replayed_topics(app: AppSpec) -> list[str]:
    """The app's inputs that batch runs replay from the archive (not the topics it writes and reads itself)."""
    return [topic for topic in app.inputs if topic not in app.outputs]


def _metadata(done: Any) -> dict[str, Any]:
    from datetime import UTC, datetime

    return {
        "records_in": done.records_in,
        "records_out": dg.MetadataValue.json(done.records_out),
        "dagster/row_count": sum(done.records_out.values()),
        "started_from": done.started_from,
        "frontier": datetime.fromtimestamp(done.frontier / 1000, tz=UTC).isoformat(),
        "stopped_at": dg.MetadataValue.json({f"{t}[{p}]": o for (t, p), o in sorted(done.stops.items())}),
        "archive_days_read": dg.MetadataValue.json(done.days_read),
        "tasks": done.tasks,
        "store_keys": dg.MetadataValue.json(done.store_keys),
        "dropped_records": done.dropped_records,
        "late_records": done.late_records,
        "stale_days": [d.isoformat() for d in done.stale_days],
        "paths": dg.MetadataValue.json({topic: str(path) for topic, path in sorted(done.paths.items())}),
        "duration_s": dg.MetadataValue.float(round(done.seconds, 2)),
        "records_per_s": dg.MetadataValue.float(round(done.records_in / max(done.seconds, 1e-9), 1)),
        "published": dg.MetadataValue.json(done.published),
    }


def _range_metadata(done: list[Any]) -> dict[str, Any]:
    """A backfill run's metadata (the same on each of its days): totals, and each day's figures."""
    seconds = sum(d.seconds for d in done)
    records_in = sum(d.records_in for d in done)
    return {
        "days": len(done),
        "records_in": records_in,
        "dagster/row_count": sum(sum(d.records_out.values()) for d in done),
        "duration_s": dg.MetadataValue.float(round(seconds, 2)),
        "records_per_s": dg.MetadataValue.float(round(records_in / max(seconds, 1e-9), 1)),
        "per_day": dg.MetadataValue.json({d.day.isoformat(): {
            "started_from": d.started_from, "records_in": d.records_in, "records_out": d.records_out,
            "late_records": d.late_records, "dropped_records": d.dropped_records, "duration_s": round(d.seconds, 2),
            "published": d.published, "paths": {topic: str(path) for topic, path in sorted(d.paths.items())},
        } for d in done}),
    }


def _asset(spec: PlatformSpec, app_name: str, app: AppSpec) -> dg.AssetsDefinition:
    assert spec.archive is not None and spec.reprocess is not None
    key = reprocess_asset_key(app_name)
    replayed = replayed_topics(app)

    @dg.asset(
        key=key,
        group_name=REPROCESS_GROUP,
        partitions_def=archive_partitions(spec.archive),
        deps=[dg.AssetDep(key, partition_mapping=dg.TimeWindowPartitionMapping(start_offset=-1, end_offset=-1)),
              *(dg.AssetDep(archive_asset_key(topic),
                            partition_mapping=dg.TimeWindowPartitionMapping(start_offset=0, end_offset=1))
                for topic in replayed)],
        pool=SPARK_POOL,
        backfill_policy=dg.BackfillPolicy.single_run(),  # a backfill's days run in order in one run, one Spark session
        kinds={"spark", "parquet"},
        description=(f"App {app_name!r} ({app.topology}) reprocessed in batch over the archive of "
                     f"{', '.join(replayed)}: each day's outputs ({', '.join(app.outputs)}) under "
                     f"{spec.reprocess.location}/{app_name}/<topic>/date=<day>/, with the live app's results."),
        metadata={"app": app_name, "application_id": app.application_id},
    )
    def reprocessed(context: dg.AssetExecutionContext, kafka: KafkaResource, platform: PlatformResource,
                    pyspark: SparkResource) -> dg.MaterializeResult:
        from assets.reprocess.inputs import ReprocessInputError
        from assets.reprocess.job import check_days, day_range, prepare_range, run_days_on_spark
        from assets.reprocess.publish import PublishError
        from assets.reprocess.state import ReprocessStateError
        from streaming.errors import TopologyError

        refusals = (TopologyError, ReprocessStateError, ReprocessInputError, PublishError)
        current = platform.spec()
        if app_name not in current.apps or current.reprocess is None or current.archive is None:
            raise dg.Failure(f"app {app_name!r} or the archive or reprocess section is no longer in the platform "
                             f"spec {platform.path}: reload the code location")
        days = sorted(partition_day(k) for k in context.partition_keys)  # one day, or a backfill's range
        span = str(days[0]) if len(days) == 1 else f"{days[0]}...{days[-1]}"
        try:
            client_config = kafka.client_config() if current.reprocess.publish else None
            checked = check_days(current, app_name, days[0], days[-1], client_config)  # before Spark starts
            prepared, refused = prepare_range(current, app_name, day_range(days[0], days[-1]), checked, client_config)
        except refusals as exc:
            raise dg.Failure(f"reprocessed/{app_name} {span}: {exc}") from None
        done = run_days_on_spark(pyspark.spark_session, prepared)  # all its days in one set of Spark stages
        for run in done:
            context.log.info(f"reprocessed {app_name} {run.day} from {run.started_from}: {run.records_in} records "
                             f"in, {sum(run.records_out.values())} out, in {run.seconds:.1f} s")
        if refused is not None:
            day = prepared[-1].day + timedelta(days=1)
            raise dg.Failure(f"reprocessed/{app_name} {day}: {refused} ({len(done)} day(s) before it are "
                             f"reprocessed: go on from {day})")
        stale = sorted({d for run in done for d in run.stale_days} - set(days))
        if stale:
            context.log.warning(f"days after {days[-1]} were reprocessed from an earlier state and are stale now: "
                                f"{', '.join(d.isoformat() for d in stale)} (reprocess them again)")
        return dg.MaterializeResult(metadata=_metadata(done[0]) if len(done) == 1 else _range_metadata(done))

    return reprocessed


def reprocess_assets(spec: PlatformSpec) -> list[dg.AssetsDefinition]:
    """One ``reprocessed/<app>`` asset per app (none without an archive and a reprocess section)."""
    if spec.archive is None or spec.reprocess is None:
        return []
    return [_asset(spec, app_name, app) for app_name, app in spec.apps.items()]


def _days(app_name: str, app: AppSpec) -> TopicDays:
    """Where the checks of ``reprocessed/<app>`` read: its outputs' days under the reprocess location, its inputs'
    (a row count's baseline) in the archive."""
    outputs = set(app.outputs)

    def asset_key(topic: str) -> dg.AssetKey:
        return reprocess_asset_key(app_name) if topic in outputs else archive_asset_key(topic)

    def root(spec: PlatformSpec, topic: str) -> Any:
        if spec.reprocess is None or spec.archive is None:
            raise dg.Failure("the platform spec has no reprocess or archive section any more: reload the code location")
        return spec.reprocess.root() / app_name if topic in outputs else spec.archive.root()

    return TopicDays(asset_key, root, by_timestamp=lambda topic: topic in outputs)


def reprocess_checks(spec: PlatformSpec) -> list[dg.AssetChecksDefinition]:
    """The spec's quality rules on each app's outputs, as checks of ``reprocessed/<app>`` (freshness excepted)."""
    if spec.archive is None or spec.reprocess is None:
        return []
    return [rule_check(spec, rule, _days(app_name, app)) for app_name, app in spec.apps.items()
            for rule in spec.quality if rule.topic in app.outputs and rule.check != "freshness"]
