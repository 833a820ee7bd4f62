"""The Dagster job ``scale_<app>`` per app of the platform spec: ``brook app scale`` from the UI, a sensor or a
schedule, and what records a scaling (``scalings/<app>``).

Its config (:class:`ScaleConfig`): the co-partition group (named by its inputs; default: the group of the app's
first input), the new partition count, the mode (``migrate`` | ``in_place``), per-store placements for Processor API
stores, and ``dry_run`` (default true). A dry run makes the plan (:func:`streaming.scaling.make_plan`), logs its
table and records it as an observation of ``scalings/<app>`` (the plan as metadata); ``dry_run: false`` makes the
plan and carries it out in the same run (:func:`assets.scaling.execute.execute_migration`) and records a
materialization with the stages' durations. A refusal (a live worker, an undrained group, a bad count, a split
group, ``in_place`` on a broker without CreatePartitions) fails the run with its one line; nothing is changed.

No ``from __future__ import annotations`` here: Dagster reads the op's ``config`` annotation as a class, not a
string.
"""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import dagster as dg
from pydantic import Field

from assets.app_topologies import load_app_topology
from assets.platform_spec import PlatformSpec, PlatformSpecError, repo_root
from assets.resources import KafkaResource, PlatformResource, SparkResource
from streaming.errors import StreamsError
from streaming.scaling import ScalingPlan, make_plan
from streaming.scaling.groups import scaling_groups
from streaming.topology import Topology

__all__ = ["SCALINGS_GROUP", "ScaleConfig", "plan_scaling", "scale_definitions", "scale_job", "scaling_asset_key",
           "scaling_metadata"]

SCALINGS_GROUP = "scalings"


class ScaleConfig(dg.Config):
    """The choices of ``brook app scale`` (see its ``--help``)."""

    partitions: int = Field(description="The co-partition group's new partition count.")
    topics: list[str] | None = Field(default=None, description="The co-partition group's inputs (logical names); "
                                                               "default: the group of the app's first input.")
    mode: Literal["migrate", "in_place"] = "migrate"
    placements: dict[str, str] = Field(default_factory=dict, description="store -> by-key | replicate | drop, for "
                                                                         "Processor API stores.")
    dry_run: bool = True
    preview: bool = Field(default=False, description="Dry run only: plan while the workers run (the lag sensor's "
                                                     "plans); executing a plan still needs them stopped.")


def scaling_asset_key(app: str) -> dg.AssetKey:
    """``scalings/<app>``: the partition scalings of app ``app``."""
    return dg.AssetKey(["scalings", app])


def scaling_metadata(plan: ScalingPlan) -> dict[str, dg.MetadataValue]:
    """A plan as Dagster metadata: its JSON, its table, the counts and the downtime estimate."""
    return {
        "plan": dg.MetadataValue.json(json.loads(plan.to_json())),
        "table": dg.MetadataValue.md(f"```\n{plan.table()}\n```"),
        "group": dg.MetadataValue.text(plan.group),
        "partitions": dg.MetadataValue.text(f"{plan.partitions} -> {plan.new_partitions}"),
        "mode": dg.MetadataValue.text(plan.mode),
        "records_to_copy": dg.MetadataValue.int(plan.records_to_copy),
        "records_to_reshard": dg.MetadataValue.int(plan.records_to_reshard),
        "expected_downtime_s": dg.MetadataValue.float(plan.downtime_s),
        "fingerprint": dg.MetadataValue.text(plan.fingerprint),
    }


def plan_scaling(spec: PlatformSpec, name: str, client_config: dict[str, str], partitions: int,
                 topics: list[str] | None = None, mode: str = "migrate", placements: dict[str, str] | None = None,
                 preview: bool = False) -> tuple[ScalingPlan, Callable[[], Topology]]:
    """The dry run of scaling app ``name`` of ``spec`` (the plan), and the factory of its topology (unbound);
    ``preview``: while the workers run (:func:`streaming.scaling.make_plan`).

    Raises:
        PlatformSpecError: no such app (naming the known ones).
        ScalingError, LiveWorkersError: the plan's refusals (one line; nothing changed).
    """
    if name not in spec.apps:
        raise PlatformSpecError(f"no app {name!r} in the platform spec (apps: {', '.join(sorted(spec.apps))})")
    app = spec.apps[name]

    def topology() -> Topology:
        return load_app_topology(name, app)

    if not topics:  # the whole co-partition group of the app's first input
        groups = scaling_groups(topology().bind(app.application_id), app.application_id)
        topics = next((g.external for g in groups if app.inputs[0] in g.external), [app.inputs[0]])
    plan = make_plan(topology(), app.application_id, client_config, topics, partitions, mode,
                     generations=app.topic_generations, placements=placements,
                     snapshot_location=spec.snapshots.resolved_location(repo_root()), application=name,
                     preview=preview)
    return plan, topology


def scale_job(name: str, application_id: str) -> dg.JobDefinition:
    """The job scaling app ``name`` (module doc)."""

    @dg.op(name=f"scale_{name}_op", description=f"Scale a co-partition group of app {name} (application.id "
                                                 f"{application_id}): a dry run by default")
    def scale_op(context: dg.OpExecutionContext, config: ScaleConfig, kafka: KafkaResource,
                 platform: PlatformResource, pyspark: SparkResource) -> None:
        from assets.scaling.execute import execute_migration

        spec = platform.spec()
        client_config = kafka.client_config()
        if config.preview and not config.dry_run:
            raise dg.Failure(description="preview: true is for dry runs: a scaling runs with every worker stopped")
        try:
            plan, topology = plan_scaling(spec, name, client_config, config.partitions, config.topics, config.mode,
                                          config.placements, preview=config.preview)
            context.log.info(plan.table())
            if config.dry_run:
                context.log_event(dg.AssetObservation(
                    asset_key=scaling_asset_key(name), metadata=scaling_metadata(plan),
                    description=f"dry run {plan.partitions} -> {plan.new_partitions}: nothing changed"))
                return
            if plan.mode != "migrate":
                raise dg.Failure(description=f"mode {plan.mode!r}: its plan is made (the dry run), but only "
                                             f"'migrate' is carried out by this version")
            result = execute_migration(
                pyspark.spark_session, plan, topology, client_config, spec_path=Path(platform.path),
                snapshot_location=spec.snapshots.resolved_location(repo_root()),
                input_configs={t: spec.topics[t].config for t in spec.topics}, progress=context.log.info,
                keep_snapshots=spec.snapshots.keep)
        except (StreamsError, PlatformSpecError, OSError) as exc:  # refusals and failed stages: one line
            raise dg.Failure(description=str(exc)) from None
        context.log_event(dg.AssetMaterialization(
            asset_key=scaling_asset_key(name), description=f"scaled {plan.partitions} -> {plan.new_partitions}",
            metadata={**scaling_metadata(plan), "stages_s": dg.MetadataValue.json(result.stages),
                      "records_copied": dg.MetadataValue.int(result.copied),
                      "keys_resharded": dg.MetadataValue.json(result.resharded_keys),
                      "snapshots": dg.MetadataValue.json(result.snapshots),
                      "committed": dg.MetadataValue.json(result.committed),
                      "generations": dg.MetadataValue.json(result.generations),
                      "duration_s": dg.MetadataValue.float(result.duration_s)}))

    @dg.job(name=f"scale_{name}", description=f"Scale app {name}'s partitions (platform/runbooks/scale-partitions.md)",
            tags={"brook/app": name})
    def job() -> None:
        scale_op()

    return job


def scale_definitions(spec: PlatformSpec) -> dg.Definitions:
    """``scale_<app>`` and the asset ``scalings/<app>`` it records, for every app of the spec, and the lag sensor that
    requests their dry runs (they use the code location's ``kafka``, ``platform`` and ``pyspark`` resources:
    ``dg.Definitions.merge`` with it)."""
    from assets.scaling.lag_sensor import lag_sensor

    apps = sorted(spec.apps.items())
    jobs = {name: scale_job(name, app.application_id) for name, app in apps}
    return dg.Definitions(
        assets=[dg.AssetSpec(key=scaling_asset_key(name), group_name=SCALINGS_GROUP, kinds={"kafka", "spark"},
                             description=f"Partition scalings of {name} (application.id {app.application_id}): each "
                                         f"materialization is one executed scaling, its plan in the metadata; a "
                                         f"dry run is an observation. Job scale_{name}.")
                for name, app in apps],
        jobs=list(jobs.values()), sensors=[lag_sensor(spec, jobs)])
