"""``brook app reset APP``: reset an application so it reprocesses its input (``platform/runbooks/reset.md``).

APP is the app's name in the platform spec (``platform/platform.yaml``, or ``$BROOK_PLATFORM_SPEC``), which gives
its ``application.id``, its topology and the snapshot location. This is the one place the runtime's command line
reaches into ``assets/`` (the spec and the apps' topologies live there): it imports them inside the command, and
the spec reader needs nothing beyond the runtime's own dependencies.

Without ``--execute`` the command is a dry run: it prints the plan (:mod:`streaming.reset.plan`) and writes it as
JSON to ``--plan`` (default ``.brook/resets/<app>-<UTC time>.json``). ``--execute --plan FILE`` carries out that
plan, or refuses when the cluster changed since (:mod:`streaming.reset.execute`); there is no ``--force``:
confluent-kafka has no call to remove members from a group, and Brook refuses while any instance is alive. An
executed reset is recorded in Dagster as a materialization of ``resets/<app>`` when Dagster is installed and
``DAGSTER_HOME`` is set.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from streaming.cli.connection import BootstrapOption, ConfigOption, SetOption, client_config

app = typer.Typer(rich_markup_mode=None, no_args_is_help=True,
                  help="Operate an application of the platform spec: reset it, scale its partitions.")


def _target(name: str) -> Any:
    """App ``name`` of the platform spec (:class:`assets.reset.targets.ResetTarget`), or a one-line error."""
    from assets.platform_spec import PlatformSpecError, find_spec_path, load_platform_spec
    from assets.reset.targets import reset_target

    try:
        return reset_target(load_platform_spec(find_spec_path()), name)
    except PlatformSpecError as exc:
        raise typer.BadParameter(f"{exc} ({find_spec_path()})", param_hint="APP") from None


def _record_in_dagster(name: str, result: Any) -> str:
    """Record the executed reset as a materialization of ``resets/<name>``; what happened, for the user."""
    try:
        import dagster as dg

        from assets.reset.records import reset_materialization
    except ImportError:
        return "not recorded in Dagster: Dagster is not installed (pip install 'brook[platform]')"
    if not os.environ.get("DAGSTER_HOME"):
        return "not recorded in Dagster: DAGSTER_HOME is not set (the Makefile uses .dagster)"
    with dg.DagsterInstance.get() as instance:
        instance.report_runless_asset_event(reset_materialization(name, result.plan, result))
    return f"recorded in Dagster ({os.environ['DAGSTER_HOME']}) as a materialization of resets/{name}"


@app.command()
def reset(
    name: Annotated[str, typer.Argument(metavar="APP", help="The app's name in the platform spec.")],
    to_earliest: Annotated[bool, typer.Option("--to-earliest", help="Inputs to their first offset (the default).")]
    = False,
    to_offset: Annotated[int | None, typer.Option("--to-offset", help="Inputs to this offset (clamped).")] = None,
    to_datetime: Annotated[str | None, typer.Option(
        "--to-datetime", help="Inputs to the first record at or after this time: ISO 8601, UTC unless a zone is "
                              "given, e.g. 2023-11-14T23:00:00.000")] = None,
    by_duration: Annotated[str | None, typer.Option(
        "--by-duration", help="Inputs to the first record at or after now minus this ISO 8601 duration, e.g. "
                              "PT6H, P1D")] = None,
    tables: Annotated[str, typer.Option(
        "--tables", help="Topics read as tables: 'earliest' (the default: a table keeps its rows from before the "
                         "time) or 'same' (the inputs' position)")] = "earliest",
    include_dlq: Annotated[bool, typer.Option(
        "--include-dlq", help="Also delete and re-create the dead-letter topic and its replay ledger.")] = False,
    internal_topics: Annotated[str | None, typer.Option(
        "--internal-topics", help="Delete only these internal topics (comma-separated; a subset of the dry "
                                  "run's).")] = None,
    plan_file: Annotated[Path | None, typer.Option(
        "--plan", help="Dry run: where to write the plan (default .brook/resets/<app>-<time>.json). --execute: "
                       "the plan to carry out.")] = None,
    execute: Annotated[bool, typer.Option("--execute", help="Carry out the plan given with --plan.")] = False,
    bootstrap: BootstrapOption = None, config: ConfigOption = None, overrides: SetOption = None,
) -> None:
    """Reset APP: a dry run prints and writes the plan; --execute --plan FILE carries it out."""
    from streaming.reset import ResetPlan, ResetPosition, execute_plan, make_plan

    settings = client_config(bootstrap, config, overrides)
    if execute:
        chosen = [flag for flag, given in (("--to-earliest", to_earliest), ("--to-offset", to_offset is not None),
                                           ("--to-datetime", to_datetime), ("--by-duration", by_duration),
                                           ("--include-dlq", include_dlq), ("--internal-topics", internal_topics))
                  if given]
        if plan_file is None or chosen:
            raise typer.BadParameter("--execute carries out a dry run's plan: give --plan FILE and no other reset "
                                     f"option{f' (got {chosen[0]})' if chosen else ''}", param_hint="--execute")
        plan = ResetPlan.from_json(plan_file.read_text(), str(plan_file))
        target = _target(name)
        if plan.application_id != target.application_id:
            raise typer.BadParameter(f"{plan_file} is a plan for application.id {plan.application_id!r}, app {name!r} "
                                     f"is {target.application_id!r}", param_hint="--plan")
        typer.echo(plan.table())
        result = execute_plan(plan, settings, progress=lambda line: typer.echo(f"done: {line}"))
        typer.echo(f"reset of {name} executed in {result.duration_s:.1f} s; start its workers again: each wipes its "
                   f"local state of epoch {plan.epoch_before} first")
        typer.echo(_record_in_dagster(name, result))
        return
    position = ResetPosition.from_options(to_earliest=to_earliest, to_offset=to_offset, to_datetime=to_datetime,
                                          by_duration=by_duration)
    from assets.reset.targets import plan_path

    target = _target(name)
    plan = make_plan(target.topology, target.application_id, settings, position, tables=tables,
                     dead_letters=include_dlq, only_internal=None if internal_topics is None else
                     [t.strip() for t in internal_topics.split(",") if t.strip()],
                     snapshot_location=target.snapshot_location, application=name)
    written = plan_file or plan_path(name)
    written.parent.mkdir(parents=True, exist_ok=True)
    written.write_text(plan.to_json())
    typer.echo(plan.table())
    typer.echo(f"dry run: nothing changed. Plan written to {written} (fingerprint {plan.fingerprint}); carry it out "
               f"with: brook app reset {name} --execute --plan {written}")


@app.command()
def scale(
    name: Annotated[str, typer.Argument(metavar="APP", help="The app's name in the platform spec.")],
    partitions: Annotated[int | None, typer.Option(
        "--partitions", help="The co-partition group's new partition count (the dry run).")] = None,
    topics: Annotated[str | None, typer.Option(
        "--topics", help="The group's inputs, comma-separated (default: the group of the app's first input).")] = None,
    mode: Annotated[str, typer.Option("--mode", help="'migrate' (a new topic generation; every broker) or "
                                                     "'in_place' (CreatePartitions; Kafka only).")] = "migrate",
    placement: Annotated[list[str] | None, typer.Option(
        "--placement", help="STORE=by-key|replicate|drop for a Processor API store (repeatable).")] = None,
    plan_file: Annotated[Path | None, typer.Option(
        "--plan", help="Dry run: where to write the plan (default .brook/scalings/<app>-<time>.json). --execute: "
                       "the plan to carry out.")] = None,
    execute: Annotated[bool, typer.Option("--execute", help="Carry out the plan given with --plan.")] = False,
    bootstrap: BootstrapOption = None, config: ConfigOption = None, overrides: SetOption = None,
) -> None:
    """Scale APP's partitions: a dry run prints and writes the plan; --execute --plan FILE carries it out (Spark,
    with the platform's conf: platform/spark/spark-defaults.conf or $BROOK_SPARK_CONF)."""
    import time

    from assets.platform_spec import PlatformSpecError, find_spec_path, load_platform_spec, repo_root
    from assets.scaling.jobs import plan_scaling

    settings = client_config(bootstrap, config, overrides)
    spec_path = find_spec_path()
    try:
        spec = load_platform_spec(spec_path)
        if name not in spec.apps:
            raise PlatformSpecError(f"no app {name!r} in the platform spec (apps: {', '.join(sorted(spec.apps))})")
    except PlatformSpecError as exc:
        raise typer.BadParameter(f"{exc} ({spec_path})", param_hint="APP") from None
    if execute:
        if plan_file is None or partitions is not None or topics or placement:
            raise typer.BadParameter("--execute carries out a dry run's plan: give --plan FILE and no other scaling "
                                     "option", param_hint="--execute")
        _execute_scaling(name, spec, spec_path, plan_file, settings)
        return
    if partitions is None:
        raise typer.BadParameter("give the new partition count (--partitions N)", param_hint="--partitions")
    chosen = dict(p.split("=", 1) for p in placement or [] if "=" in p)
    if len(chosen) != len(placement or []):
        raise typer.BadParameter("--placement takes STORE=by-key|replicate|drop", param_hint="--placement")
    plan, _ = plan_scaling(spec, name, settings, partitions,
                           [t.strip() for t in topics.split(",") if t.strip()] if topics else None, mode, chosen)
    written = plan_file or repo_root() / ".brook" / "scalings" / \
        f"{name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    written.parent.mkdir(parents=True, exist_ok=True)
    written.write_text(plan.to_json())
    typer.echo(plan.table())
    typer.echo(f"dry run: nothing changed. Plan written to {written} (fingerprint {plan.fingerprint}); carry it out "
               f"with: brook app scale {name} --execute --plan {written}")


def _execute_scaling(name: str, spec: Any, spec_path: Path, plan_file: Path, settings: dict[str, Any]) -> None:
    """``brook app scale --execute``: the plan carried out with a Spark session of the platform's conf."""
    from assets.app_topologies import load_app_topology
    from assets.platform_spec import repo_root
    from assets.resources import spark_resource
    from assets.scaling.execute import execute_migration
    from streaming.scaling import ScalingPlan

    plan = ScalingPlan.from_json(plan_file.read_text(), str(plan_file))
    app = spec.apps[name]
    if plan.application_id != app.application_id:
        raise typer.BadParameter(f"{plan_file} is a plan for application.id {plan.application_id!r}, app {name!r} is "
                                 f"{app.application_id!r}", param_hint="--plan")
    typer.echo(plan.table())
    spark = spark_resource().spark_session
    result = execute_migration(
        spark, plan, lambda: load_app_topology(name, app), settings, spec_path=spec_path,
        snapshot_location=spec.snapshots.resolved_location(repo_root()),
        input_configs={t: spec.topics[t].config for t in spec.topics},
        progress=lambda line: typer.echo(f"done: {line}"), keep_snapshots=spec.snapshots.keep)
    typer.echo(f"{name} scaled {plan.partitions} -> {plan.new_partitions} partitions in {result.duration_s:.1f} s "
               f"({result.copied} records copied); {spec_path} names the new generation: start the workers again")
