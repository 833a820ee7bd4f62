"""The schedules: which archive partitions each hourly tick runs, and what the jobs select."""

from datetime import UTC, date, datetime

import dagster as dg
import pytest

from assets.archive.keys import ARCHIVE_GROUP, archive_asset_key
from assets.automation import automation_schedules, partitions_due
from assets.compaction import COMPACTION_GROUP
from assets.platform_spec import ArchiveSpec

ARCHIVE = ArchiveSpec(start_date=date(2024, 3, 1), max_disorder_minutes=15)


@pytest.mark.parametrize(
    ("tick", "due"),
    [
        ("2024-03-10T00:05", ["2024-03-10"]),  # yesterday's stragglers may still come (until 00:15)
        ("2024-03-10T01:05", ["2024-03-09", "2024-03-10"]),  # first tick past 00:15: yesterday's final run
        ("2024-03-10T02:05", ["2024-03-10"]),
        ("2024-03-10T23:05", ["2024-03-10"]),
        ("2024-03-01T01:05", ["2024-03-01"]),  # the day before start_date is not a partition
        ("2024-02-28T12:05", []),
    ],
)
def test_hourly_tick_runs_today_and_once_yesterday(tick: str, due: list[str]) -> None:
    assert partitions_due(datetime.fromisoformat(tick).replace(tzinfo=UTC), ARCHIVE) == due


def test_yesterday_is_final_at_the_first_tick_past_the_disorder_bound() -> None:
    no_disorder = ArchiveSpec(start_date=date(2024, 3, 1), max_disorder_minutes=0)
    assert partitions_due(datetime(2024, 3, 10, 0, 5, tzinfo=UTC), no_disorder) == ["2024-03-09", "2024-03-10"]
    two_hours = ArchiveSpec(start_date=date(2024, 3, 1), max_disorder_minutes=120)
    ticks = [datetime(2024, 3, 10, hour, 5, tzinfo=UTC) for hour in range(24)]
    assert [tick.hour for tick in ticks if "2024-03-09" in partitions_due(tick, two_hours)] == [2]


def _definitions() -> dg.Definitions:
    partitions = dg.DailyPartitionsDefinition(start_date="2024-03-01", end_offset=1)

    @dg.asset(key=archive_asset_key("orders"), group_name=ARCHIVE_GROUP, partitions_def=partitions)
    def orders_archive() -> None:
        return None

    @dg.asset_check(asset=orders_archive)
    def orders_check() -> dg.AssetCheckResult:
        return dg.AssetCheckResult(passed=True)

    @dg.asset(group_name=COMPACTION_GROUP)
    def store_compaction() -> None:
        return None

    @dg.asset(group_name="other")
    def unrelated() -> None:
        return None

    return dg.Definitions(assets=[orders_archive, store_compaction, unrelated], asset_checks=[orders_check],
                          schedules=automation_schedules(ARCHIVE))


def test_jobs_run_their_groups_and_the_archive_checks() -> None:
    defs = _definitions()
    archive = defs.resolve_job_def("hourly_archive").execute_in_process(partition_key="2024-03-10")
    assert {e.asset_key for e in archive.get_asset_materialization_events()} == {archive_asset_key("orders")}
    assert [e.check_name for e in archive.get_asset_check_evaluations()] == ["orders_check"]
    compaction = defs.resolve_job_def("nightly_compaction").execute_in_process()
    assert {e.asset_key for e in compaction.get_asset_materialization_events()} == {dg.AssetKey("store_compaction")}


def test_hourly_schedule_requests_the_due_partitions() -> None:
    schedule = _definitions().resolve_schedule_def("hourly_archive")
    assert schedule.cron_schedule == "5 * * * *"
    context = dg.build_schedule_context(scheduled_execution_time=datetime(2024, 3, 10, 1, 5, tzinfo=UTC))
    requests = schedule(context)
    assert [r.partition_key for r in requests] == ["2024-03-09", "2024-03-10"]
    assert len({r.run_key for r in requests}) == 2


def test_a_day_is_final_after_the_largest_bound_even_a_day_long_one() -> None:
    """A topic's own bound (orders-rejected: 1440 min) moves every day's final run: day D's comes at the
    first tick past midnight of D+2."""
    ticks = [datetime(2024, 3, day, hour, 5, tzinfo=UTC) for day in (10, 11, 12) for hour in range(24)]
    finals = {(t.day, t.hour): partitions_due(t, ARCHIVE, closes_after_minutes=1440) for t in ticks}
    assert [k for k, due in finals.items() if "2024-03-10" in due and k[0] != 10] == [(12, 0)]
    assert all(due[-1] == f"2024-03-{t.day:02d}" for t, due in zip(ticks, finals.values(), strict=True))
