"""When the platform's assets run on their own: nightly compaction, hourly archive plus checks.

Schedules, not ``AutomationCondition``s: both cadences are wall-clock decisions (compact while
traffic is low, archive every hour), and the assets they start depend on Kafka topics that are
external assets, written by the stream workers and never materialized in Dagster, so there is no
upstream event for a declarative condition to react to. A schedule also picks the archive's
partitions, which no built-in condition expresses: every hour the day so far, and once per day the
previous day for the last time, after its stragglers can no longer arrive. Each schedule is one
switch with its own tick history in the UI; both start stopped (``dagster dev`` does not fire runs
until they are turned on in the UI or with ``dagster schedule start``).

- ``nightly_compaction`` (02:00 UTC): every asset of group ``compaction`` (one per changelog).
- ``hourly_archive`` (HH:05 UTC): every archive asset, their quality checks included, for today's
  partition; at the first tick at least the largest disorder bound of any topic past a day's end
  (``archive.max_disorder_minutes`` or a topic's own), that day's partition as well (its final
  version: every record of the day is in by then).

Like every run of the code location, both jobs run their steps in one process (the definitions'
``in_process_executor``), so they share one SparkSession instead of starting a JVM per asset.
"""

from datetime import UTC, date, datetime, timedelta

import dagster as dg

from assets.archive.keys import ARCHIVE_GROUP
from assets.compaction import COMPACTION_GROUP
from assets.platform_spec import ArchiveSpec

__all__ = ["ARCHIVE_JOB", "COMPACTION_JOB", "automation_schedules", "last_closed_day", "partitions_due"]

NIGHTLY_COMPACTION_CRON = "0 2 * * *"
HOURLY_ARCHIVE_CRON = "5 * * * *"
_TICK = timedelta(hours=1)


#: Compaction of every changelog: the assets of group ``compaction`` (resolved when definitions load).
COMPACTION_JOB = dg.define_asset_job(
    "nightly_compaction",
    selection=dg.AssetSelection.groups(COMPACTION_GROUP),
    description="Compact every store's changelog into a Parquet snapshot.",
)

#: One day of every topic's archive, with the quality checks on the archives.
ARCHIVE_JOB = dg.define_asset_job(
    "hourly_archive",
    selection=dg.AssetSelection.groups(ARCHIVE_GROUP),
    description="Archive every topic's day into Parquet and run the quality checks on it.",
)


def last_closed_day(tick: datetime, closes_after_minutes: int) -> tuple[date, datetime]:
    """The latest day whose end + ``closes_after_minutes`` is at or before ``tick``, and that moment (UTC):
    from then on none of the day's records can still arrive, so the day's archive can be final."""
    delay = timedelta(minutes=closes_after_minutes)
    day = (tick.astimezone(UTC) - delay).date() - timedelta(days=1)
    return day, datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1) + delay


def partitions_due(tick: datetime, archive: ArchiveSpec, closes_after_minutes: int | None = None) -> list[str]:
    """The archive partitions the hourly tick at ``tick`` (UTC) runs: today, and a past day at the first
    tick past its end + ``closes_after_minutes`` (default ``archive.max_disorder_minutes``; the
    definitions pass the largest bound of any topic), when none of its records can still arrive."""
    tick = tick.astimezone(UTC)
    today = tick.date()
    due = []
    closing, closes = last_closed_day(
        tick, archive.max_disorder_minutes if closes_after_minutes is None else closes_after_minutes)
    if tick - _TICK < closes <= tick and today > closing >= archive.start_date:
        due.append(closing.isoformat())
    if today >= archive.start_date:
        due.append(today.isoformat())
    return due


def _hourly_archive_schedule(archive: ArchiveSpec, closes_after_minutes: int) -> dg.ScheduleDefinition:
    @dg.schedule(
        name="hourly_archive",
        job=ARCHIVE_JOB,
        cron_schedule=HOURLY_ARCHIVE_CRON,
        execution_timezone="UTC",
        description="Every hour: today's archive partition and its checks; once a day, yesterday's final one.",
    )
    def hourly_archive(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest]:
        tick = context.scheduled_execution_time
        return [dg.RunRequest(run_key=f"{partition}@{tick:%Y-%m-%dT%H:%M}", partition_key=partition)
                for partition in partitions_due(tick, archive, closes_after_minutes)]

    return hourly_archive


def automation_schedules(archive: ArchiveSpec | None, closes_after_minutes: int | None = None
                         ) -> list[dg.ScheduleDefinition]:
    """The nightly compaction and (with an archive) the hourly archive schedules, with their jobs. A day's
    final archive run comes ``closes_after_minutes`` after its end (default: the archive's bound)."""
    nightly = dg.ScheduleDefinition(
        name="nightly_compaction",
        job=COMPACTION_JOB,
        cron_schedule=NIGHTLY_COMPACTION_CRON,
        execution_timezone="UTC",
        description="Every night at 02:00 UTC: compact every changelog into a snapshot.",
    )
    if archive is None:
        return [nightly]
    delay = archive.max_disorder_minutes if closes_after_minutes is None else closes_after_minutes
    return [nightly, _hourly_archive_schedule(archive, delay)]
