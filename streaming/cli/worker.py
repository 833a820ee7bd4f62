"""``brook worker run MODULE:FACTORY --config FILE``: run one stream worker process until stopped.

``FACTORY`` names a ``Topology`` or a function returning one. The config file is YAML (or JSON) with
Kafka Streams keys; ``BROOK_<KEY>`` environment variables set keys (``BROOK_BOOTSTRAP_SERVERS``,
``BROOK_SASL_PASSWORD``), ``--set key=value`` overrides single keys, and values may refer to
``${env:NAME}`` / ``${file:/path}``. SIGTERM and SIGINT close the worker cleanly: it commits what it processed,
closes its tasks and leaves the group. The exit code is 0 after a clean stop and 1 after a failure.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer
import yaml

from streaming.cli.logs import LOG_FORMATS, configure_logging, logs_json, set_log_fields
from streaming.cli.progress import RestoreProgressBar
from streaming.config import StreamsConfig, is_config_key
from streaming.config_sources import environment_config
from streaming.errors import StreamsError
from streaming.topology import Topology
from streaming.yaml_files import load_yaml

app = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False, help="Run stream workers.",
                  no_args_is_help=True)
log = logging.getLogger("brook.worker")


def load_topology(target: str) -> Topology:
    """The topology named by ``module:attribute`` (a Topology or a function returning one)."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise typer.BadParameter(f"expected MODULE:FACTORY, got {target!r}", param_hint="TOPOLOGY")
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise typer.BadParameter(f"cannot load {target!r}: {exc}", param_hint="TOPOLOGY") from exc
    topology = factory() if callable(factory) and not isinstance(factory, Topology) else factory
    if not isinstance(topology, Topology):
        raise typer.BadParameter(f"{target!r} gave {type(topology).__name__}, not a Topology", param_hint="TOPOLOGY")
    return topology


def load_config(path: Path | None, overrides: list[str]) -> dict[str, Any]:
    """Streams config from a YAML/JSON file, then ``BROOK_<KEY>`` environment variables (e.g.
    ``BROOK_BOOTSTRAP_SERVERS``, ``BROOK_SASL_PASSWORD``), then ``key=value`` overrides. Values may refer to
    ``${env:NAME}`` or ``${file:/path}`` (secrets never need to be on the command line)."""
    config: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = load_yaml(path.read_text()) or {}
        except yaml.YAMLError as exc:
            where = getattr(exc, "problem_mark", None)
            at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise typer.BadParameter(f"{path} is not valid YAML{at}: {problem}", param_hint="--config") from None
        if not isinstance(loaded, dict):
            raise typer.BadParameter(f"{path} must hold a mapping of config keys", param_hint="--config")
        config.update(loaded)
    config.update(environment_config(is_config_key))  # BROOK_<KEY>, e.g. BROOK_SASL_PASSWORD
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected key=value, got {item!r}", param_hint="--set")
        config[key.strip()] = value
    return config


def spec_generations(settings: dict[str, Any], spec_path: Path | None) -> dict[str, int]:
    """The topic generations the platform spec gives the app whose ``application.id`` the worker runs: its
    ``topic_generations`` (empty when the spec does not declare the app, or when no spec file exists and none was
    asked for). A spec that does not load is an error: a worker must not guess the generations of a scaled app."""
    from assets.platform_spec import PlatformSpecError, find_spec_path, load_platform_spec

    path = spec_path or find_spec_path()
    if spec_path is None and not path.is_file():
        return {}
    try:
        found = load_platform_spec(path).app_of(StreamsConfig(settings).application_id)
    except PlatformSpecError as exc:
        raise typer.BadParameter(str(exc), param_hint="--platform-spec") from None
    if found is None:
        return {}
    name, spec = found
    if spec.generations.generations:  # the runtime logs each topic's generation next
        log.info("topic generations of app %r from %s", name, path)
    return dict(spec.topic_generations)


@app.command()
def run(
    topology: Annotated[str, typer.Argument(help="MODULE:FACTORY giving the Topology, e.g. apps.wordcount:topology")],
    config: Annotated[Path | None, typer.Option("--config", "-c", exists=True, dir_okay=False,
                                                help="YAML file of streams config")] = None,
    overrides: Annotated[list[str] | None, typer.Option("--set", help="Override one key: key=value")] = None,
    metrics_port: Annotated[int | None, typer.Option(
        "--metrics-port", help="Serve Prometheus /metrics on this port (config key metrics.port; 0: off)")] = None,
    log_format: Annotated[str | None, typer.Option(
        "--log-format", envvar="BROOK_LOG_FORMAT", help="Log lines as text or json (one JSON object per line)")] = None,
    instance_name: Annotated[str | None, typer.Option(
        "--instance-name", help="A name this worker keeps across restarts (config key instance.name): stable "
                                "transactional ids under exactly_once_v2, and static group membership with "
                                "--set static.membership=true")] = None,
    platform_spec: Annotated[Path | None, typer.Option(
        "--platform-spec", envvar="BROOK_PLATFORM_SPEC", dir_okay=False,
        help="The platform spec whose topic_generations (of the app with this application.id) name the physical "
             "topics; default ./platform/platform.yaml, else the checkout's. Config key topic.generations wins")] = None,
) -> None:
    """Run one worker: join the group, process, and stop cleanly on SIGTERM/SIGINT."""
    from streaming.runtime.kafka_streams import KafkaStreams, State

    if log_format is not None:
        if log_format not in LOG_FORMATS:
            raise typer.BadParameter(f"unknown log format {log_format!r}: use text or json", param_hint="--log-format")
        configure_logging(logging.getLogger().level, log_format)
    settings = load_config(config, overrides or [])
    if metrics_port is not None:
        settings["metrics.port"] = metrics_port
    if instance_name is not None:
        settings["instance.name"] = instance_name
    try:
        if "topic.generations" not in settings:
            settings["topic.generations"] = spec_generations(settings, platform_spec)
        streams = KafkaStreams(load_topology(topology), settings)
    except StreamsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    set_log_fields(application_id=streams.config.application_id)
    if not logs_json():  # JSON logs: restores are reported by the changelog reader's log lines and /metrics
        streams.set_global_state_restore_listener(RestoreProgressBar())
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        log.info("received %s, closing", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        streams.start()
    except StreamsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    log.info("worker %s started (pid %d)", streams.config.application_id, os.getpid())
    while not stop.wait(0.5):
        if streams.wait(0):
            break  # every stream thread stopped on its own: a failure
    failed = streams.state is State.ERROR
    streams.close(timeout=60)
    metrics = streams.metrics()
    log.info("worker stopped: %d records processed, %d commits", metrics["records_processed"], metrics["commits"])
    if failed or streams.exception is not None:
        typer.echo(f"error: {streams.exception}", err=True)
        raise typer.Exit(1)
