"""When ``reprocessed/<app>`` runs on its own: after a failed quality check, and every day for yesterday.

- The sensor ``recompute_failed_days`` reads the instance's asset-check evaluations (the event log, with a
  cursor on storage ids). A check of severity ERROR that failed on the *final* version of a day's
  ``archive/<topic>`` (the materialization it evaluated has metadata ``complete=True``; an hourly partial
  run of the day so far does not count) requests ``reprocessed/<app>`` for that day, for every app that
  **writes** the topic (``outputs`` in the platform spec). A failed check on a topic says that the records
  in it are wrong; they were produced by the topic's writer, and the writer rerun in batch from its archived
  inputs rebuilds exactly that output, its own checks (the same rules on ``reprocessed/<app>``) then saying
  whether the day is right now. An app that only *reads* the topic would read the same bad records again
  and reproduce its outputs from them, so it is not requested; a topic no app writes (an input produced
  outside the platform) has nothing to recompute, and the tick says so.

  Attempts: the failed checks of one run (an archive run with its checks, or a check run on its own) are one
  trigger; each trigger of a day (its check run id) asks for one attempt, run key
  ``reprocessed/<app>/<day>/attempt-<n>``, at most :data:`MAX_ATTEMPTS` per (asset, day). A further trigger
  is refused, and the tick says why (its skip reason, or a warning in the tick's log when other runs are
  requested in the same tick). The attempts live in the cursor (JSON: ``after``, the last storage id read,
  and ``attempts``, ``"<app>/<day>"`` -> the trigger run ids; entries only for days that failed). Run keys
  hold the budget even if the cursor is reset: the daemon never launches a sensor's run key twice.
  Quiet: passing checks, WARN checks, checks on partial runs, checks on other assets, and a check that
  raised instead of evaluating (it records no evaluation). Started for the first time, the sensor begins
  at the end of the event log (as Dagster's own event-log consumer does): turning it on does not recompute
  the past. Only the failed day is requested: the days after it, whose batch state came from its old run,
  are not (a backfill from the day recomputes them).

  The evaluations are read with ``get_logs_for_all_runs_by_log_id`` (what Dagster's event-log consumer
  daemon uses): on the default SQLite storage, whose event logs are one database per run, check
  evaluations are mirrored into the index database, whose ids are global. Like that daemon, it relies on
  ids becoming visible in order; a storage that commits a lower id after a higher one was read (concurrent
  writers on Postgres) could let an evaluation slip past the cursor.

- The schedule ``reprocess_yesterday`` (HH:35 UTC) re-runs, for every app with a ``reprocessed/<app>``
  asset, the latest day that has closed: its end plus the largest disorder bound of any topic has passed
  (:func:`assets.automation.last_closed_day`, the rule by which ``hourly_archive`` takes a day's final
  archive at HH:05). It requests the day once the app's input archives of the day have been materialized
  since that moment (the final archive run has finished), and at most once per (app, day): later ticks of
  the same day see the run (by its tag ``brook/reprocess_day``) and skip.

Both start stopped, like the other schedules: ``dagster sensor start recompute_failed_days`` and
``dagster schedule start reprocess_yesterday``, or the switches in the UI.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

import dagster as dg

from assets.archive.assets import COMPLETE_METADATA
from assets.archive.keys import archive_asset_key
from assets.automation import last_closed_day
from assets.platform_spec import PlatformSpec

__all__ = [
    "MAX_ATTEMPTS",
    "RECOMPUTE_SENSOR",
    "REPROCESS_DAY_TAG",
    "REPROCESS_SCHEDULE",
    "recompute_sensor",
    "reprocess_automation",
    "reprocess_schedule",
    "reprocessed_keys",
]

RECOMPUTE_SENSOR = "recompute_failed_days"
REPROCESS_SCHEDULE = "reprocess_yesterday"
REPROCESS_SCHEDULE_CRON = "35 * * * *"
#: Recompute runs the sensor requests per (asset, day), whatever triggers them.
MAX_ATTEMPTS = 2
#: Tag of every run the schedule requests: ``<app>/<day>``.
REPROCESS_DAY_TAG = "brook/reprocess_day"
#: Check evaluations read per tick; the rest wait for the next tick (the cursor says where).
_FETCH_LIMIT = 500


def reprocessed_keys(spec: PlatformSpec, asset_keys: Iterable[dg.AssetKey]) -> dict[str, dg.AssetKey]:
    """App name -> key, for the keys among ``asset_keys`` that are ``reprocessed/<app>`` of an app of ``spec``."""
    return {key.path[1]: key for key in asset_keys
            if len(key.path) == 2 and key.path[0] == "reprocessed" and key.path[1] in spec.apps}


@dataclass
class _Cursor:
    after: int
    attempts: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def loads(cls, text: str) -> _Cursor:
        raw = json.loads(text)
        return cls(after=int(raw["after"]), attempts={k: list(v) for k, v in raw["attempts"].items()})

    def dumps(self) -> str:
        return json.dumps({"after": self.after, "attempts": self.attempts}, sort_keys=True)


@dataclass(frozen=True)
class FailedFinalCheck:
    """A failed ERROR check on the final archive of ``topic`` for ``day``, evaluated in run ``run_id``."""

    topic: str
    check_name: str
    day: str
    run_id: str


def _metadata_value(value: Any) -> Any:
    return value.value if isinstance(value, dg.MetadataValue) else value


def failed_final_check(instance: dg.DagsterInstance, storage_id: int, entry: dg.EventLogEntry,
                       topics: Iterable[str]) -> FailedFinalCheck | None:
    """What the check evaluation ``entry`` asks to recompute, or None: it passed, is a WARN, is not on the
    archive of one of ``topics``, or evaluated no materialization or one that is not the day's final one."""
    evaluation = entry.dagster_event.event_specific_data if entry.dagster_event else None
    if not isinstance(evaluation, dg.AssetCheckEvaluation):
        return None
    if evaluation.passed or evaluation.severity != dg.AssetCheckSeverity.ERROR:
        return None
    topic = next((t for t in topics if archive_asset_key(t) == evaluation.asset_key), None)
    target = evaluation.target_materialization_data
    if topic is None or target is None:
        return None
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=evaluation.asset_key, storage_ids=[target.storage_id]), limit=1).records
    materialization = records[0].asset_materialization if records else None
    if materialization is None or materialization.partition is None:
        return None
    if _metadata_value(materialization.metadata.get(COMPLETE_METADATA)) is not True:
        return None
    return FailedFinalCheck(topic=topic, check_name=evaluation.check_name, day=materialization.partition,
                            run_id=entry.run_id or f"event-{storage_id}")


def _nothing_to_recompute(failed: FailedFinalCheck, writers: list[str]) -> str:
    why = (f"no app with a reprocessed asset writes {failed.topic} (written by {', '.join(writers)})" if writers else
           f"no app of the platform writes {failed.topic} (an input from outside): nothing to recompute")
    return f"check {failed.check_name} failed on the final archive/{failed.topic} of {failed.day}, but {why}"


def recompute_sensor(spec: PlatformSpec, reprocessed: Mapping[str, dg.AssetKey], max_attempts: int = MAX_ATTEMPTS,
                     minimum_interval_seconds: int = 60) -> dg.SensorDefinition:
    """The sensor that requests ``reprocessed[app]`` for a day whose final archive of a topic ``app`` writes
    failed an ERROR check, at most ``max_attempts`` times per (app, day) (see the module docstring); it
    ticks at most every ``minimum_interval_seconds``."""
    writers = {topic: sorted(app for app in reprocessed if topic in spec.apps[app].outputs) for topic in spec.topics}
    all_writers = {topic: sorted(app for app, a in spec.apps.items() if topic in a.outputs) for topic in spec.topics}

    @dg.sensor(
        name=RECOMPUTE_SENSOR,
        asset_selection=dg.AssetSelection.assets(*reprocessed.values()),
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=(f"A failed ERROR check on a day's final archive/<topic> requests reprocessed/<app> for that "
                     f"day, for the app that writes the topic; at most {max_attempts} attempts per (app, day)."),
    )
    def recompute_failed_days(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        storage = context.instance.event_log_storage
        if context.cursor is None:
            top = storage.get_maximum_record_id() or 0
            return dg.SensorResult(skip_reason=f"started: watching check evaluations after storage id {top}",
                                   cursor=_Cursor(after=top).dumps())
        cursor = _Cursor.loads(context.cursor)
        events = storage.get_logs_for_all_runs_by_log_id(
            after_cursor=cursor.after, dagster_event_type={dg.DagsterEventType.ASSET_CHECK_EVALUATION},
            limit=_FETCH_LIMIT)
        failures: dict[tuple[str, str, str], list[str]] = {}  # (app, day, trigger) -> its failed checks
        notes: list[str] = []
        for storage_id in sorted(events):
            failed = failed_final_check(context.instance, storage_id, events[storage_id], spec.topics)
            if failed is None:
                continue
            if not writers[failed.topic]:
                notes.append(_nothing_to_recompute(failed, all_writers[failed.topic]))
            for app in writers[failed.topic]:
                failures.setdefault((app, failed.day, failed.run_id), []).append(
                    f"archive/{failed.topic}:{failed.check_name}")
        requests: list[dg.RunRequest] = []
        for (app, day, run_id), checks in failures.items():
            triggers = cursor.attempts.setdefault(f"{app}/{day}", [])
            if run_id in triggers:
                continue  # more failed checks of a run already seen (its events spanned two ticks)
            if len(triggers) >= max_attempts:
                notes.append(f"reprocessed/{app} {day} not requested again: {', '.join(checks)} failed on the "
                             f"day's final archive (run {run_id}), but the day has had its {max_attempts} recompute "
                             f"attempts (after the failed checks of runs {', '.join(triggers)}); look at it by hand")
                continue
            triggers.append(run_id)
            requests.append(dg.RunRequest(
                run_key=f"reprocessed/{app}/{day}/attempt-{len(triggers)}",
                partition_key=day,
                asset_selection=[reprocessed[app]],
                tags={"brook/recompute_attempt": f"{len(triggers)}/{max_attempts}",
                      "brook/recompute_checks": ", ".join(checks),
                      "brook/recompute_check_run": run_id},
            ))
        cursor.after = max(events, default=cursor.after)
        if requests:
            for note in dict.fromkeys(notes):
                context.log.warning(note)
            return dg.SensorResult(run_requests=requests, cursor=cursor.dumps())
        quiet = (f"no failed ERROR check on a day's final archive among {len(events)} check evaluation(s) read, "
                 f"up to storage id {cursor.after}")
        return dg.SensorResult(skip_reason="; ".join(dict.fromkeys(notes)) or quiet, cursor=cursor.dumps())

    return recompute_failed_days


def _archived_since(instance: dg.DagsterInstance, topic: str, day: date, since: datetime) -> bool:
    """``archive/<topic>`` has a materialization of ``day`` that finished at or after ``since``."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=archive_asset_key(topic), asset_partitions=[day.isoformat()],
                              after_timestamp=since.timestamp()), limit=1).records
    return bool(records)


def reprocess_schedule(spec: PlatformSpec, reprocessed: Mapping[str, dg.AssetKey]) -> dg.ScheduleDefinition:
    """The hourly schedule that runs ``reprocessed[app]`` once for the latest closed day, after its final
    archive (see the module docstring). Needs the spec's archive section."""
    if spec.archive is None:
        raise ValueError("reprocessing reads the archive: the platform spec has no archive section")
    archive = spec.archive
    closes_after = spec.archive_closing_minutes()

    @dg.schedule(
        name=REPROCESS_SCHEDULE,
        cron_schedule=REPROCESS_SCHEDULE_CRON,
        execution_timezone="UTC",
        target=dg.AssetSelection.assets(*reprocessed.values()),
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description=(f"Every hour: once per app, reprocessed/<app> for the latest day whose end + {closes_after} "
                     "min has passed, after its final archive."),
    )
    def reprocess_yesterday(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest] | dg.SkipReason:
        day, closed_at = last_closed_day(context.scheduled_execution_time, closes_after)
        if day < archive.start_date:
            return dg.SkipReason(f"{day} is before the archive's start_date {archive.start_date}")
        requests, waiting = [], []
        for app, key in sorted(reprocessed.items()):
            tag = f"{app}/{day.isoformat()}"
            if context.instance.get_run_records(dg.RunsFilter(tags={REPROCESS_DAY_TAG: tag}), limit=1):
                continue
            not_final = [t for t in spec.apps[app].inputs if not _archived_since(context.instance, t, day, closed_at)]
            if not_final:
                waiting.append(f"reprocessed/{app} {day}: waiting for the final archive of {', '.join(not_final)} "
                               f"(materialized at or after {closed_at:%Y-%m-%d %H:%M} UTC)")
                continue
            requests.append(dg.RunRequest(run_key=tag, partition_key=day.isoformat(), asset_selection=[key],
                                          tags={REPROCESS_DAY_TAG: tag}))
        return requests or dg.SkipReason("; ".join(waiting) or f"every app's {day} is already requested")

    return reprocess_yesterday


def reprocess_automation(spec: PlatformSpec, assets: Iterable[dg.AssetsDefinition | dg.AssetSpec],
                         minimum_interval_seconds: int = 60
                         ) -> tuple[list[dg.SensorDefinition], list[dg.ScheduleDefinition]]:
    """The recompute sensor and the daily schedule for the ``reprocessed/<app>`` assets among ``assets``;
    none while there are no such assets (or no archive to reprocess from)."""
    keys = (key for asset in assets for key in (asset.keys if isinstance(asset, dg.AssetsDefinition) else [asset.key]))
    reprocessed = reprocessed_keys(spec, keys)
    if not reprocessed or spec.archive is None:
        return [], []
    return ([recompute_sensor(spec, reprocessed, minimum_interval_seconds=minimum_interval_seconds)],
            [reprocess_schedule(spec, reprocessed)])
