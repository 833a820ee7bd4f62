"""``brook worker run MODULE:FACTORY --config FILE``: run one stream worker process until stopped.

``FACTORY`` names a ``Topology`` or a function returning one; ``MODULE`` is imported with the working directory on
the import path (as ``python -m`` does), so ``brook worker run myapp:topology`` runs ``./myapp.py``. Settings:
:mod:`streaming.cli.settings` (``bootstrap.servers`` in the order of :mod:`streaming.bootstrap`; the first log line
names its source). Without a ``state.dir`` of its own the worker takes a numbered one
(:mod:`streaming.cli.worker_state`). SIGTERM and SIGINT close the worker cleanly: it commits what it processed,
closes its tasks and leaves the group. The exit code is 0 after a clean stop, 1 after a failure while running
(one line naming the record or the fix, and when it failed the same way before) and 2 when it cannot start.

``brook worker cleanup`` deletes a stopped worker's local state (what a changelog that is gone asks for).
"""

from __future__ import annotations

import importlib
import logging
import os
import shlex
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from streaming.cli.logs import LOG_FORMATS, configure_logging, debugging, logs_json, set_log_fields
from streaming.cli.progress import RestoreProgressBar
from streaming.cli.settings import load_config, load_settings, read_config_file
from streaming.cli.worker_state import (
    claim_state_dir,
    forget_failure,
    last_failure,
    numbered_slots,
    remember_failure,
)
from streaming.config import StreamsConfig
from streaming.errors import ChangelogMissingError, DeserializationError, StreamsError
from streaming.runtime.directory_lock import try_lock_directory
from streaming.runtime.state_directory import clear_application_dir, lock_application_dir
from streaming.topology import Topology

if TYPE_CHECKING:
    from streaming.runtime.kafka_streams import KafkaStreams

app = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False, help="Run stream workers.",
                  no_args_is_help=True)
log = logging.getLogger("brook.worker")


def load_topology(target: str) -> Topology:
    """The topology named by ``module:attribute`` (a Topology or a function returning one)."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise typer.BadParameter(f"expected MODULE:FACTORY, got {target!r}", param_hint="TOPOLOGY")
    if "" not in sys.path and os.getcwd() not in sys.path:  # the console script's path lacks the working directory
        sys.path.insert(0, os.getcwd())
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise typer.BadParameter(f"cannot load {target!r}: {exc}", param_hint="TOPOLOGY") from exc
    topology = factory() if callable(factory) and not isinstance(factory, Topology) else factory
    if not isinstance(topology, Topology):
        raise typer.BadParameter(f"{target!r} gave {type(topology).__name__}, not a Topology", param_hint="TOPOLOGY")
    return topology


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
    if log_format is not None:
        if log_format not in LOG_FORMATS:
            raise typer.BadParameter(f"unknown log format {log_format!r}: use text or json", param_hint="--log-format")
        configure_logging(logging.getLogger().level, log_format)
    settings, bootstrap = load_settings(config, overrides or [])
    log.info("connecting to %s", bootstrap.describe())  # the worker's first line: where the broker comes from
    if metrics_port is not None:
        settings["metrics.port"] = metrics_port
    if instance_name is not None:
        settings["instance.name"] = instance_name
    try:
        application_id = StreamsConfig(settings).application_id
    except StreamsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    state_dir = claim_state_dir(settings, application_id)
    settings["state.dir"] = state_dir.path
    if state_dir.chosen:
        log.info("state.dir %s: the first one no other worker of %r holds (--set state.dir=DIR to choose)",
                 state_dir.path, application_id)
    try:
        failure = last_failure(state_dir.path, application_id)
        if failure is not None and failure.needs_cleanup:
            typer.echo(f"error: {failure.reason} (this worker stopped so at {failure.time}; it starts again once "
                       f"its old local state is deleted)", err=True)
            raise typer.Exit(2)
        _serve(topology, settings, platform_spec, cleanup_command(config, application_id, state_dir.path,
                                                                  state_dir.chosen))
    finally:
        state_dir.release()


def _serve(target: str, settings: dict[str, Any], platform_spec: Path | None, cleanup: str) -> None:
    """Run the worker of :func:`run` in its state.dir until it is stopped or fails."""
    from streaming.runtime.kafka_streams import KafkaStreams, State

    try:
        if "topic.generations" not in settings:
            settings["topic.generations"] = spec_generations(settings, platform_spec)
        streams = KafkaStreams(load_topology(target), settings)
    except StreamsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    application_id, state_dir = streams.config.application_id, streams.config["state.dir"]
    set_log_fields(application_id=application_id)
    if not logs_json():  # JSON logs: restores are reported by the changelog reader's log lines and /metrics
        streams.set_global_state_restore_listener(RestoreProgressBar())
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        log.info("received %s, closing", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    with _failure_reported_once(streams):
        try:
            streams.start()
        except StreamsError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        log.info("worker %s started (pid %d)", application_id, os.getpid())
        while not stop.wait(0.5):
            if streams.wait(0):
                break  # every stream thread stopped on its own: a failure
        failed = streams.state is State.ERROR
        streams.close(timeout=60)
    metrics = streams.metrics()
    log.info("worker stopped: %d records processed, %d commits", metrics["records_processed"], metrics["commits"])
    if not failed and streams.exception is None:
        forget_failure(state_dir, application_id)
        return
    reason = describe_failure(streams.exception, cleanup)
    before = remember_failure(state_dir, application_id, reason,
                              needs_cleanup=isinstance(streams.exception, ChangelogMissingError))
    if before is not None:
        reason += (f" This worker failed the same way at {before}: a crash loop re-emits the output since the last "
                   f"commit each time")
    typer.echo(f"error: {reason}", err=True)
    raise typer.Exit(1)


def describe_failure(exc: BaseException | None, cleanup: str) -> str:
    """The one line that says why a running worker stopped, and the fix when there is a known one."""
    if isinstance(exc, DeserializationError):
        return (f"{exc}. Under the default handler (fail) a record the serdes cannot read stops the worker: set "
                f"default.deserialization.exception.handler: dead_letter to send it to <application.id>-dlq and go "
                f"on.")
    if isinstance(exc, ChangelogMissingError):
        return f"{exc.summary}. To start again, delete the old local state: {cleanup}"
    text = str(exc) if exc is not None and str(exc) else type(exc).__name__
    return text.splitlines()[0]


def cleanup_command(config: Path | None, application_id: str, state_dir: str, chosen: bool) -> str:
    """The ``brook worker cleanup`` command that deletes this worker's local state."""
    words = ["brook", "worker", "cleanup"]
    if config is not None:
        words += ["--config", str(config)]
    if read_config_file(config).get("application.id") != application_id:
        words += ["--set", f"application.id={application_id}"]
    if not chosen:
        words += ["--set", f"state.dir={state_dir}"]
    return shlex.join(words)


@contextmanager
def _failure_reported_once(streams: KafkaStreams) -> Iterator[None]:
    """Without ``--debug``, drop the log line of the failure that stops the worker: its error line says it."""
    def keep(record: logging.LogRecord) -> bool:
        return debugging() or not record.exc_info or record.exc_info[1] is not streams.exception

    handlers = list(logging.getLogger().handlers)
    for handler in handlers:
        handler.addFilter(keep)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(keep)


@app.command()
def cleanup(
    config: Annotated[Path | None, typer.Option("--config", "-c", exists=True, dir_okay=False,
                                                help="YAML file of streams config")] = None,
    overrides: Annotated[list[str] | None, typer.Option("--set", help="Override one key: key=value")] = None,
) -> None:
    """Delete the local state of a stopped worker (KafkaStreams.cleanup()): its state.dir's application directory,
    or, without a state.dir, that of every numbered directory no running worker holds."""
    settings = load_config(config, overrides or [])
    try:
        application_id = StreamsConfig(settings, require_bootstrap=False).application_id
    except StreamsError as exc:
        raise typer.BadParameter(str(exc), param_hint="--config") from None
    if settings.get("state.dir"):
        _delete_local_state(str(settings["state.dir"]), application_id)
        return
    slots = numbered_slots(application_id)
    for slot in slots:
        slot_lock = try_lock_directory(slot)
        if slot_lock is None:
            typer.echo(f"kept {slot}: a running worker holds it", err=True)
            continue
        try:
            _delete_local_state(slot, application_id)
        finally:
            slot_lock.release()
    if not slots:
        typer.echo(f"no local state of {application_id!r} found")


def _delete_local_state(state_dir: str, application_id: str) -> None:
    lock = lock_application_dir(state_dir, application_id)  # held by a running worker: one line naming it
    try:
        clear_application_dir(lock)
    finally:
        lock.release()
    forget_failure(state_dir, application_id)
    typer.echo(f"deleted the local state of {application_id!r} in {state_dir}")
