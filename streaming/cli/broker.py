"""``brook broker``: start, stop and inspect the embedded Kafka-protocol broker (Tansu).

``start`` leaves the broker running in the background (pid, state and log files in the workdir) and
prints its bootstrap servers on stdout -- only that, so ``export
BROOK_BOOTSTRAP_SERVERS=$(brook broker start)`` works; everything else goes to stderr. ``status``
exits 0 when a broker is running and 1 when not.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from streaming.broker import DEFAULT_WORKDIR, BrokerError, EmbeddedBroker

app = typer.Typer(
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    help="Start, stop and inspect the embedded Kafka-protocol broker (Tansu, memory storage).",
    no_args_is_help=True,
)

Workdir = Annotated[
    Path,
    typer.Option(
        "--workdir",
        envvar="BROOK_BROKER_WORKDIR",
        help="Directory holding the broker's pid, state (broker.json) and log (broker.log) files.",
    ),
]


def _info(message: str) -> None:
    typer.echo(message, err=True)


def _adopt(workdir: Path) -> EmbeddedBroker | None:
    try:
        return EmbeddedBroker.from_state(workdir)
    except BrokerError as exc:
        _info(f"error: {exc}")
        raise typer.Exit(1) from exc


@app.command()
def start(
    port: Annotated[int | None, typer.Option(help="Port to listen on (default: a free port).")] = None,
    host: Annotated[str, typer.Option(help="Listen and advertised host (keep it loopback).")] = "127.0.0.1",
    workdir: Workdir = DEFAULT_WORKDIR,
    storage_engine: Annotated[
        str, typer.Option(help="Tansu storage engine URL, e.g. memory://tansu/ or s3://bucket/.")
    ] = "memory://tansu/",
    foreground: Annotated[
        bool, typer.Option("--foreground", help="Stay attached; stop the broker on Ctrl-C or SIGTERM.")
    ] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the broker to answer.")] = 30.0,
) -> None:
    """Start the embedded broker and print its bootstrap servers."""
    existing = _adopt(workdir)
    if existing is not None and existing.is_running():
        if port is not None and port != existing.port:
            _info(
                f"error: a broker is already running in {workdir} on {existing.bootstrap_servers} "
                f"(pid {existing.pid}); stop it first to use port {port}"
            )
            raise typer.Exit(1)
        if foreground:
            _info(f"error: a broker is already running in {workdir} (pid {existing.pid}); stop it first")
            raise typer.Exit(1)
        _info(f"already running: pid {existing.pid}, log {existing.log_path}")
        typer.echo(existing.bootstrap_servers)
        return

    broker = EmbeddedBroker(port=port, host=host, workdir=workdir, storage_engine=storage_engine)
    try:
        broker.start(timeout, stop_at_exit=foreground)
    except BrokerError as exc:
        _info(f"error: {exc}")
        raise typer.Exit(1) from exc
    typer.echo(broker.bootstrap_servers)
    if not foreground:
        _info(
            f"embedded broker running in the background: pid {broker.pid}, log {broker.log_path}\n"
            f"stop it with: brook broker stop --workdir {workdir}"
        )
        return

    _info(f"embedded broker running: pid {broker.pid}, log {broker.log_path} (Ctrl-C to stop)")

    def _terminate(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    # Install both explicitly: a process started with `&` from a non-interactive shell inherits
    # SIGINT as ignored, and Python then never raises KeyboardInterrupt by itself.
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    try:
        while broker.is_running():
            time.sleep(0.5)
        _info(f"error: the broker exited by itself; see {broker.log_path}")
        broker.stop()
        raise typer.Exit(1)
    except KeyboardInterrupt:
        _info("stopping the embedded broker")
        broker.stop()


@app.command()
def stop(
    workdir: Workdir = DEFAULT_WORKDIR,
    timeout: Annotated[float, typer.Option(help="Seconds to wait after SIGTERM before SIGKILL.")] = 10.0,
) -> None:
    """Stop the embedded broker recorded in the workdir (no-op when none is running)."""
    broker = _adopt(workdir)
    if broker is None:
        _info(f"no embedded broker recorded in {workdir}")
        return
    pid, was_running = broker.pid, broker.is_running()
    try:
        broker.stop(timeout)
    except BrokerError as exc:
        _info(f"error: {exc}")
        raise typer.Exit(1) from exc
    if was_running:
        _info(f"stopped the embedded broker (pid {pid})")
    else:
        _info(f"the embedded broker (pid {pid}) was not running; removed its stale state files")


@app.command()
def status(workdir: Workdir = DEFAULT_WORKDIR) -> None:
    """Say whether the embedded broker is running, and where. Exit code 1 when it is not."""
    broker = _adopt(workdir)
    if broker is None:
        typer.echo(f"not running (no state in {workdir})")
        raise typer.Exit(1)
    if not broker.is_running():
        typer.echo(
            f"not running (stale state of pid {broker.pid} in {workdir}; run `brook broker stop` to clear it)"
        )
        raise typer.Exit(1)
    answering = "answering metadata" if broker.ping() else "NOT answering metadata"
    typer.echo(
        f"running at {broker.bootstrap_servers} (pid {broker.pid}, {answering})\n"
        f"  storage: {broker.storage_engine}\n"
        f"  log:     {broker.log_path}\n"
        f"  state:   {broker.state_path}"
    )
