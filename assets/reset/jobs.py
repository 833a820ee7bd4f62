"""The Dagster job ``reset_<app>`` per app of the platform spec: ``brook app reset`` from the UI or a schedule.

Its config (:class:`ResetConfig`) has the command's choices: where the inputs go (``to_earliest``, ``to_offset``,
``to_datetime``, ``by_duration``; none: earliest), ``tables``, ``include_dlq``, ``internal_topics``, and
``execute`` with ``plan``. The default is the dry run: the plan is written to ``plan_dir`` and recorded as an
observation of ``resets/<app>`` (its path is in the metadata); a run with ``execute: true`` and that ``plan``
carries it out, or fails when the cluster changed since, and records a materialization of ``resets/<app>`` with the
plan as metadata. Refusals (a live worker, a time in the future, an input listed as internal, a stale plan) fail
the run with the one-line reason; nothing is changed.

The Kafka resource gives the cluster (``BROOK_CLUSTER``, ``BROOK_BOOTSTRAP_SERVERS``); the platform resource the
spec. Runbook: ``platform/runbooks/reset.md``.

No ``from __future__ import annotations`` here: Dagster reads the op's ``config`` annotation as a class, not a
string.
"""

from pathlib import Path
from typing import Literal

import dagster as dg

from assets.platform_spec import PlatformSpec
from assets.reset.records import reset_asset_spec, reset_materialization, reset_observation
from assets.reset.targets import PLAN_DIR, plan_path, reset_target
from assets.resources import KafkaResource, PlatformResource
from streaming.errors import StreamsError
from streaming.reset import ResetPlan, ResetPosition, execute_plan, make_plan

__all__ = ["ResetConfig", "reset_definitions", "reset_job", "reset_jobs"]


class ResetConfig(dg.Config):
    """The choices of ``brook app reset`` (see its ``--help``)."""

    to_earliest: bool = False
    to_offset: int | None = None
    to_datetime: str | None = None
    """ISO 8601, UTC unless a zone is given, e.g. ``2023-11-14T23:00:00.000``."""
    by_duration: str | None = None
    """ISO 8601 duration back from now, e.g. ``PT6H``."""
    tables: Literal["earliest", "same"] = "earliest"
    include_dlq: bool = False
    internal_topics: list[str] | None = None
    execute: bool = False
    """Carry out ``plan`` (a dry run's); without it the run is a dry run."""
    plan: str | None = None
    plan_dir: str = str(PLAN_DIR)
    """Where a dry run writes its plan (relative to the run's working directory)."""


def reset_job(name: str, application_id: str) -> dg.JobDefinition:
    """The job resetting app ``name`` (module doc)."""

    @dg.op(name=f"reset_{name}_op", description=f"Reset app {name} (application.id {application_id}): a dry run by "
                                                 f"default, execute: true with plan: <a dry run's plan> to carry it out")
    def reset_op(context: dg.OpExecutionContext, config: ResetConfig, kafka: KafkaResource,
                 platform: PlatformResource) -> None:
        try:
            _run(context, name, config, kafka, platform.spec())
        except (StreamsError, OSError) as exc:  # ResetError, LiveWorkersError, an unreadable plan: nothing changed
            raise dg.Failure(description=str(exc)) from None

    @dg.job(name=f"reset_{name}", description=f"Reset app {name} so it reprocesses its input "
                                              f"(platform/runbooks/reset.md)", tags={"brook/app": name})
    def job() -> None:
        reset_op()

    return job


def _run(context: dg.OpExecutionContext, name: str, config: ResetConfig, kafka: KafkaResource,
         spec: PlatformSpec) -> None:
    client_config = kafka.client_config()
    target = reset_target(spec, name)
    if config.execute:
        chosen = [field for field in ("to_earliest", "to_offset", "to_datetime", "by_duration", "include_dlq",
                                      "internal_topics") if getattr(config, field) not in (None, False)]
        if config.plan is None or chosen:
            raise dg.Failure(description="execute: true carries out a dry run's plan: give plan (its path, from the "
                                         "dry run's metadata) and no other reset choice"
                                         f"{f' (got {chosen[0]})' if chosen else ''}")
        plan = ResetPlan.from_json(Path(config.plan).read_text(), config.plan)
        if plan.application_id != target.application_id:
            raise dg.Failure(description=f"{config.plan} is a plan for application.id {plan.application_id!r}, app "
                                         f"{name!r} is {target.application_id!r}")
        context.log.info(plan.table())
        result = execute_plan(plan, client_config, progress=context.log.info)
        context.log_event(reset_materialization(name, plan, result))
        return
    position = ResetPosition.from_options(to_earliest=config.to_earliest, to_offset=config.to_offset,
                                          to_datetime=config.to_datetime, by_duration=config.by_duration)
    plan = make_plan(target.topology, target.application_id, client_config, position, tables=config.tables,
                     dead_letters=config.include_dlq, only_internal=config.internal_topics,
                     snapshot_location=target.snapshot_location, application=name)
    path = plan_path(name, Path(config.plan_dir))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(plan.to_json())
    context.log.info(f"{plan.table()}\ndry run: nothing changed; plan written to {path.resolve()}")
    context.log_event(reset_observation(name, plan, str(path.resolve())))


def reset_jobs(spec: PlatformSpec) -> list[dg.JobDefinition]:
    """``reset_<app>`` for every app of the spec."""
    return [reset_job(name, app.application_id) for name, app in sorted(spec.apps.items())]


def reset_definitions(spec: PlatformSpec) -> dg.Definitions:
    """The resets of every app of the spec: the jobs ``reset_<app>`` and the assets ``resets/<app>`` they record.
    The jobs use the code location's ``kafka`` and ``platform`` resources (``dg.Definitions.merge`` with it)."""
    return dg.Definitions(assets=[reset_asset_spec(name, app.application_id) for name, app in sorted(spec.apps.items())],
                          jobs=reset_jobs(spec))
