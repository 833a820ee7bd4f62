"""The ``brook`` command line: ``brook broker ...``, ``brook worker ...``, the data commands ``brook topics
...``, ``brook produce``, ``brook consume`` and ``brook status``, and ``brook app reset``.

A failure prints one line, ``error: <what, where, what to check>``, and exits non-zero; the traceback
only with ``--debug`` or ``BROOK_DEBUG=1``.
"""

from __future__ import annotations

import logging
import os
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer

from streaming.cli.app import app as app_app
from streaming.cli.broker import app as broker_app
from streaming.cli.data import consume, produce
from streaming.cli.dlq import app as dlq_app
from streaming.cli.logs import LOG_FORMATS, TEXT, configure_logging, debugging
from streaming.cli.status import status
from streaming.cli.topics import app as topics_app
from streaming.cli.worker import app as worker_app

app = typer.Typer(
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    name="brook",
    help="Brook: the Kafka Streams model in Python, operated from Dagster.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(broker_app, name="broker")
app.add_typer(worker_app, name="worker")
app.add_typer(topics_app, name="topics")
app.add_typer(dlq_app, name="dlq")
app.add_typer(app_app, name="app")
app.command()(produce)
app.command()(consume)
app.command()(status)


def _version(value: bool) -> None:
    if value:
        try:
            typer.echo(f"brook {version('brook')}")
        except PackageNotFoundError:
            typer.echo("brook (not installed)")
        raise typer.Exit()


@app.callback()
def main(
    log_level: Annotated[
        str, typer.Option(envvar="BROOK_LOG_LEVEL", help="Logging level: DEBUG, INFO, WARNING, ERROR.")
    ] = "INFO",
    show_version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", envvar="BROOK_DEBUG", help="Show tracebacks of failures (BROOK_DEBUG=1).")
    ] = False,
    log_format: Annotated[
        str, typer.Option(envvar="BROOK_LOG_FORMAT", help="Log lines as text or json (one JSON object per line).")
    ] = TEXT,
) -> None:
    """Brook: the Kafka Streams model in Python, operated from Dagster."""
    level = logging.getLevelName(log_level.upper())
    if not isinstance(level, int):
        raise typer.BadParameter(f"unknown log level {log_level!r}", param_hint="--log-level")
    if log_format not in LOG_FORMATS:
        raise typer.BadParameter(f"unknown log format {log_format!r}: use text or json", param_hint="--log-format")
    configure_logging(level, log_format)
    if debug:
        os.environ["BROOK_DEBUG"] = "1"


def run() -> None:
    """The ``brook`` console script: :data:`app`, with failures as one line unless debugging."""
    try:
        app()
    except Exception as exc:  # Click/typer usage errors never get here: they print their own message
        if debugging() or "--debug" in sys.argv:
            raise
        message = str(exc) if str(exc) else type(exc).__name__
        typer.echo(f"error: {message.splitlines()[0]}", err=True)
        typer.echo("(run with --debug or BROOK_DEBUG=1 for the traceback)", err=True)
        sys.exit(1)


if __name__ == "__main__":
    run()
