"""Stand-in definitions for the recompute sensor's tests: the archive assets' keys and daily partitions with real
asset checks, and ``reprocessed/<app>`` stand-ins (the real asset lives in ``assets/reprocess/`` once merged).

A stand-in archive run reads its outcome from run tags: ``test/complete`` (``"false"``: an hourly partial run; the
metadata ``complete`` the real archive writes) and ``test/failing`` (comma-separated check names that fail). The
checks are real ``@asset_check``s on the archive keys, with the platform's severities (ERROR blocking, WARN not).
Loaded by the tests in-process and, as a code location, by ``dagster-daemon`` (``-f`` this file).
"""

import dagster as dg

from assets.archive.assets import COMPLETE_METADATA
from assets.archive.keys import ARCHIVE_GROUP, archive_asset_key, archive_partitions
from assets.platform_spec import find_spec_path, load_platform_spec
from assets.reprocess.automation import reprocess_automation

SPEC = load_platform_spec(find_spec_path())
assert SPEC.archive is not None
PARTITIONS = archive_partitions(SPEC.archive)
COMPLETE_TAG = "test/complete"
FAILING_TAG = "test/failing"

#: (topic, check name, severity) of the stand-in checks.
CHECKS = [
    ("order-lines", "lines_complete", "ERROR"),
    ("order-lines", "lines_positive", "ERROR"),
    ("order-lines", "lines_unique", "WARN"),
    ("local-buyers-hourly", "buyers_counted", "ERROR"),
    ("wordcount-counts", "counts_positive", "ERROR"),
    ("orders", "orders_have_user", "ERROR"),
]


def _archive(topic: str) -> dg.AssetsDefinition:
    @dg.asset(key=archive_asset_key(topic), group_name=ARCHIVE_GROUP, partitions_def=PARTITIONS)
    def archive(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        return dg.MaterializeResult(metadata={COMPLETE_METADATA: context.run.tags.get(COMPLETE_TAG, "true") == "true"})

    return archive


def _check(topic: str, name: str, severity: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=archive_asset_key(topic), name=name, blocking=severity == "ERROR")
    def check(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        failing = context.run.tags.get(FAILING_TAG, "").split(",")
        return dg.AssetCheckResult(passed=name not in failing, severity=dg.AssetCheckSeverity[severity])

    return check


def _reprocessed(app: str) -> dg.AssetsDefinition:
    @dg.asset(key=["reprocessed", app], partitions_def=PARTITIONS)
    def reprocessed() -> None:
        return None

    return reprocessed


ARCHIVES = [_archive(topic) for topic in SPEC.topics]
REPROCESSED = [_reprocessed(app) for app in SPEC.apps]
SENSORS, SCHEDULES = reprocess_automation(SPEC, [*ARCHIVES, *REPROCESSED], minimum_interval_seconds=1)
ARCHIVE_JOB = dg.define_asset_job("archive_standins", selection=dg.AssetSelection.groups(ARCHIVE_GROUP))

@dg.asset_check(asset=dg.AssetKey(["reprocessed", "orders"]), name="reprocessed_lines_complete")
def reprocessed_check() -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=True)


defs = dg.Definitions(
    assets=[*ARCHIVES, *REPROCESSED],
    asset_checks=[*(_check(*check) for check in CHECKS), reprocessed_check],
    jobs=[ARCHIVE_JOB],
    sensors=SENSORS,
    schedules=SCHEDULES,
)
