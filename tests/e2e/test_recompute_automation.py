"""The recompute sensor and the reprocess schedule, evaluated with Dagster's test utilities against a real
(ephemeral) instance whose check evaluations come from real runs of stand-in archive assets and real asset checks
(:mod:`recompute_standins`)."""

from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta

import dagster as dg
import pytest

from assets.automation import last_closed_day
from assets.reprocess.automation import (
    MAX_ATTEMPTS,
    RECOMPUTE_SENSOR,
    REPROCESS_DAY_TAG,
    REPROCESS_SCHEDULE,
    reprocess_automation,
)
from tests.e2e.recompute_standins import COMPLETE_TAG, FAILING_TAG, SPEC, defs

DAY = "2024-03-10"
ORDERS = dg.AssetKey(["reprocessed", "orders"])
WORDCOUNT = dg.AssetKey(["reprocessed", "wordcount"])
QUIET = "no failed ERROR check on a day's final archive among "


class Sensor:
    """The recompute sensor ticking against ``instance``, its cursor carried from tick to tick as the daemon does."""

    def __init__(self, instance: dg.DagsterInstance) -> None:
        self.instance = instance
        self.definition = defs.resolve_sensor_def(RECOMPUTE_SENSOR)
        self.cursor: str | None = None

    def tick(self) -> tuple[list[dg.RunRequest], str | None]:
        """The run requests and the skip reason (None when quiet: no failed ERROR check on a final archive)."""
        context = dg.build_sensor_context(instance=self.instance, cursor=self.cursor, definitions=defs)
        data = self.definition.evaluate_tick(context)
        self.cursor = data.cursor
        skipped = data.skip_message
        return list(data.run_requests or []), None if skipped and skipped.startswith(QUIET) else skipped


def archive_run(instance: dg.DagsterInstance, day: str, *, failing: Iterable[str] = (), complete: bool = True) -> None:
    """One run of every stand-in archive asset for ``day`` and their checks; ``failing`` checks fail."""
    tags = {FAILING_TAG: ",".join(failing), COMPLETE_TAG: "true" if complete else "false"}
    defs.resolve_job_def("archive_standins").execute_in_process(
        instance=instance, partition_key=day, tags=tags, raise_on_error=False)


@pytest.fixture(params=["sqlite", "in-memory"])
def instance(request: pytest.FixtureRequest) -> Iterable[dg.DagsterInstance]:
    """A temporary instance with the SQLite storage of the project's dagster.yaml (one event log per run, check
    evaluations mirrored into an index: the storage ids the sensor reads come from it), or an in-memory one."""
    if request.param == "in-memory":
        with dg.DagsterInstance.ephemeral() as instance:
            yield instance
    else:
        with dg.instance_for_test() as instance:
            yield instance


@pytest.fixture
def sensor(instance: dg.DagsterInstance) -> Sensor:
    """The sensor after its first tick, with a failed final check from before it turned on."""
    sensor = Sensor(instance)
    archive_run(instance, DAY, failing=["lines_complete"])
    requests, skipped = sensor.tick()
    assert requests == [] and skipped is not None and skipped.startswith("started: watching check evaluations after")
    return sensor


def test_first_tick_starts_at_the_end_of_the_event_log(sensor: Sensor) -> None:
    """Turning the sensor on does not recompute the past: the failure before its first tick asks for nothing."""
    assert sensor.tick() == ([], None)


def test_fires_on_a_failed_final_error_check_for_exactly_that_day(sensor: Sensor) -> None:
    instance = sensor.instance
    archive_run(instance, DAY)  # every check passes
    archive_run(instance, DAY, failing=["lines_unique"])  # WARN
    archive_run(instance, DAY, failing=["lines_complete", "lines_unique"], complete=False)  # hourly partial run
    archive_run(instance, "2024-03-09")
    assert sensor.tick() == ([], None)

    archive_run(instance, DAY, failing=["lines_complete", "lines_positive", "buyers_counted", "lines_unique"])
    requests, _ = sensor.tick()
    assert [(r.asset_selection, r.partition_key, r.run_key) for r in requests] == [
        ([ORDERS], DAY, f"reprocessed/orders/{DAY}/attempt-1")]  # three failed ERROR checks of one run: one attempt
    assert requests[0].tags["brook/recompute_attempt"] == f"1/{MAX_ATTEMPTS}"
    assert set(requests[0].tags["brook/recompute_checks"].split(", ")) == {
        "archive/order-lines:lines_complete", "archive/order-lines:lines_positive",
        "archive/local-buyers-hourly:buyers_counted"}
    assert sensor.tick() == ([], None)  # read once


def test_requests_the_app_that_writes_the_topic(sensor: Sensor) -> None:
    archive_run(sensor.instance, DAY, failing=["counts_positive"])
    assert [(r.asset_selection, r.partition_key) for r in sensor.tick()[0]] == [([WORDCOUNT], DAY)]


def test_a_failed_check_on_an_input_written_outside_the_platform_is_reported_not_recomputed(sensor: Sensor) -> None:
    archive_run(sensor.instance, DAY, failing=["orders_have_user"])
    requests, skipped = sensor.tick()
    assert requests == []
    assert skipped == (f"check orders_have_user failed on the final archive/orders of {DAY}, but no app of the "
                       "platform writes orders (an input from outside): nothing to recompute")


def test_stops_after_its_attempt_budget_and_says_why(sensor: Sensor) -> None:
    instance = sensor.instance
    keys = []
    for _ in range(MAX_ATTEMPTS):
        archive_run(instance, DAY, failing=["lines_complete"])
        requests, _ = sensor.tick()
        keys += [r.run_key for r in requests]
    assert keys == [f"reprocessed/orders/{DAY}/attempt-{n}" for n in range(1, MAX_ATTEMPTS + 1)]

    archive_run(instance, DAY, failing=["lines_complete"])
    requests, skipped = sensor.tick()
    assert requests == []
    assert skipped is not None
    assert skipped.startswith(f"reprocessed/orders {DAY} not requested again: archive/order-lines:lines_complete "
                              "failed on the day's final archive (run ")
    assert f"the day has had its {MAX_ATTEMPTS} recompute attempts" in skipped

    archive_run(instance, "2024-03-11", failing=["lines_complete"])  # the budget is per day
    assert [r.run_key for r in sensor.tick()[0]] == ["reprocessed/orders/2024-03-11/attempt-1"]


def test_a_refusal_beside_a_request_goes_to_the_tick_log(sensor: Sensor) -> None:
    instance = sensor.instance
    for _ in range(MAX_ATTEMPTS):
        archive_run(instance, DAY, failing=["lines_complete"])
    archive_run(instance, DAY, failing=["lines_complete"])
    archive_run(instance, "2024-03-11", failing=["lines_complete"])
    requests, skipped = sensor.tick()
    assert [r.run_key for r in requests] == [f"reprocessed/orders/{DAY}/attempt-1", f"reprocessed/orders/{DAY}/attempt-2",
                                             "reprocessed/orders/2024-03-11/attempt-1"]
    assert skipped is None


def _schedule_tick(instance: dg.DagsterInstance, tick: datetime) -> list[dg.RunRequest] | str:
    context = dg.build_schedule_context(instance=instance, scheduled_execution_time=tick,
                                        repository_def=defs.get_repository_def())
    data = defs.resolve_schedule_def(REPROCESS_SCHEDULE).evaluate_tick(context)
    return list(data.run_requests) if data.run_requests else data.skip_message or ""


@pytest.fixture
def sqlite_instance() -> Iterable[dg.DagsterInstance]:
    """A schedule's context takes a persistent instance only."""
    with dg.instance_for_test() as instance:
        yield instance


def test_schedule_runs_the_last_closed_day_once_after_its_final_archive(sqlite_instance: dg.DagsterInstance) -> None:
    instance = sqlite_instance
    closes_after = SPEC.archive_closing_minutes()
    now = datetime.now(UTC)
    closed, closed_at = last_closed_day(now, closes_after)
    tick = closed_at + timedelta(minutes=35)
    assert _schedule_tick(instance, tick) == (
        f"reprocessed/orders {closed}: waiting for the final archive of orders, users, items (materialized at or "
        f"after {closed_at:%Y-%m-%d %H:%M} UTC); reprocessed/wordcount {closed}: waiting for the final archive of "
        f"wordcount-lines, wordcount-words (materialized at or after {closed_at:%Y-%m-%d %H:%M} UTC)")

    archive_run(instance, closed.isoformat())  # after closed_at: the day's final archive
    requests = _schedule_tick(instance, tick)
    assert isinstance(requests, list)
    assert [(r.asset_selection, r.partition_key, r.tags[REPROCESS_DAY_TAG]) for r in requests] == [
        ([ORDERS], closed.isoformat(), f"orders/{closed}"), ([WORDCOUNT], closed.isoformat(), f"wordcount/{closed}")]

    # the orders run starts; an hour later only wordcount's day is asked for again
    defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection={ORDERS}).execute_in_process(
        instance=instance, partition_key=closed.isoformat(), tags={REPROCESS_DAY_TAG: f"orders/{closed}"})
    later = _schedule_tick(instance, tick + timedelta(hours=1))
    assert isinstance(later, list)
    assert [r.asset_selection for r in later] == [[WORDCOUNT]]


def test_schedule_waits_while_the_day_has_not_closed(sqlite_instance: dg.DagsterInstance) -> None:
    """An archive of the day made before the day closed (an hourly partial run) is not its final one."""
    instance = sqlite_instance
    closes_after = SPEC.archive_closing_minutes()
    future_tick = datetime.now(UTC) + timedelta(days=2)  # its last closed day: today
    day, closed_at = last_closed_day(future_tick, closes_after)
    archive_run(instance, day.isoformat(), complete=False)  # now: before the day closed
    skipped = _schedule_tick(instance, future_tick)
    assert isinstance(skipped, str) and skipped.startswith(f"reprocessed/orders {day}: waiting for the final archive")
    assert closed_at > datetime.now(UTC)


def test_no_reprocessed_assets_no_sensor_or_schedule() -> None:
    assert reprocess_automation(SPEC, [dg.AssetSpec(key=["archive", "orders"])]) == ([], [])
    sensors, schedules = reprocess_automation(SPEC, [dg.AssetSpec(key=ORDERS)])
    assert [s.name for s in sensors] == [RECOMPUTE_SENSOR] and [s.name for s in schedules] == [REPROCESS_SCHEDULE]
    assert sensors[0].default_status == dg.DefaultSensorStatus.STOPPED
    assert schedules[0].default_status == dg.DefaultScheduleStatus.STOPPED
    assert schedules[0].execution_timezone == "UTC"


def test_the_code_location_has_them_exactly_when_it_has_reprocessed_assets() -> None:
    from assets.definitions import defs as location

    keys = location.resolve_asset_graph().get_all_asset_keys()
    reprocessed = any(key.path[0] == "reprocessed" for key in keys)
    assert (RECOMPUTE_SENSOR in {s.name for s in location.sensors or []}) == reprocessed
    assert (REPROCESS_SCHEDULE in {s.name for s in location.schedules or []}) == reprocessed
    dg.Definitions.validate_loadable(defs)  # the stand-ins' location, with both


def test_last_closed_day_is_the_archive_schedules_rule() -> None:
    assert last_closed_day(datetime(2024, 3, 10, 0, 14, tzinfo=UTC), 15) == (
        date(2024, 3, 8), datetime(2024, 3, 9, 0, 15, tzinfo=UTC))
    assert last_closed_day(datetime(2024, 3, 10, 0, 15, tzinfo=UTC), 15) == (
        date(2024, 3, 9), datetime(2024, 3, 10, 0, 15, tzinfo=UTC))
