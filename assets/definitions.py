"""The Brook code location: ``dagster dev -w workspace.yaml`` loads ``defs`` from here.

Built from small modules: the platform spec (``platform_spec``, checked against the apps' code by
``app_topologies``), resources (``resources``), the Kafka topics as external assets (``topics``),
changelog compaction into snapshots (``compaction``), the daily topic archive (``archive``), Great
Expectations checks on it (``quality``), each app reprocessed in batch over the archive (``reprocess``), the
schedules (``automation``), the changelog-growth compaction sensor (``compaction_growth``), the recompute sensor and the daily reprocess schedule (``reprocess.automation``) and
a reset job per app (``reset``), a scaling job per app (``scaling``) and an idle-source alert sensor and job per
app (``idle_alerts``).
"""

from __future__ import annotations

import warnings

import dagster as dg

from assets.app_topologies import check_apps_against_topologies
from assets.archive.assets import archive_assets
from assets.automation import automation_schedules
from assets.compaction import compaction_asset_key, compaction_assets
from assets.compaction_growth import growth_sensor
from assets.idle_alerts import idle_alert_definitions
from assets.platform_spec import find_spec_path, load_platform_spec
from assets.quality import quality_checks, undecodable_checks
from assets.reprocess import reprocess_assets, reprocess_checks
from assets.reprocess.automation import reprocess_automation
from assets.reset.jobs import reset_definitions
from assets.resources import PlatformResource, kafka_resource, spark_resource
from assets.scaling.jobs import scale_definitions
from assets.topics import topic_asset_specs

# Dagster 1.13 re-creates each sensor with the `owners` it already has when resources are bound to its jobs, and warns
# that the parameter is in beta although Brook never sets it: a notice for nobody (what `make ui` printed twice).
warnings.filterwarnings("ignore", message="Parameter `owners` of initializer `SensorDefinition.__init__`",
                        category=dg.BetaWarning)

spec_path = find_spec_path()
platform_spec = load_platform_spec(spec_path)
check_apps_against_topologies(platform_spec)

location_assets = [*topic_asset_specs(platform_spec), *compaction_assets(platform_spec), *archive_assets(platform_spec),
                   *reprocess_assets(platform_spec)]
# The recompute sensor and the reprocess schedule, for the reprocessed/<app> assets among them.
reprocess_sensors, reprocess_schedules = reprocess_automation(platform_spec, location_assets)

defs = dg.Definitions(
    assets=location_assets,
    asset_checks=[*quality_checks(platform_spec), *undecodable_checks(platform_spec), *reprocess_checks(platform_spec)],
    schedules=[*automation_schedules(platform_spec.archive, platform_spec.archive_closing_minutes()),
               *reprocess_schedules],
    sensors=[*reprocess_sensors, growth_sensor(platform_spec, {
        (app_name, store): compaction_asset_key(app_name, store) for topic, (app_name, store_spec)
        in platform_spec.changelog_topics().items() if (store := store_spec.name)})],
    # Steps of a run share its process, hence one SparkSession (6-15 s to start) for all its Spark
    # assets; Spark parallelizes inside each step, and the `spark` pool keeps runs from overlapping.
    executor=dg.in_process_executor,
    resources={
        "kafka": kafka_resource(platform_spec),
        "platform": PlatformResource(path=str(spec_path.resolve())),
        "pyspark": spark_resource(),
    },
)

# Application resets (``reset``): a job ``reset_<app>`` per app, each recorded as ``resets/<app>``.
defs = dg.Definitions.merge(defs, reset_definitions(platform_spec), scale_definitions(platform_spec))
# Idle sources (``idle_alerts``): per app, the sensor ``idle_alerts_<app>`` fails a run of ``idle_alert_<app>``.
defs = dg.Definitions.merge(defs, idle_alert_definitions(platform_spec))
