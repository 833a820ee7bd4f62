"""The ``brook`` command line: ``brook broker ...`` and ``brook worker ...``."""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer

from streaming.cli.broker import app as broker_app
from streaming.cli.worker import app as worker_app

app = typer.Typer(
    name="brook",
    help="Brook: the Kafka Streams model in Python, operated from Dagster.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(broker_app, name="broker")
app.add_typer(worker_app, name="worker")


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
) -> None:
    """Brook: the Kafka Streams model in Python, operated from Dagster."""
    level = logging.getLevelName(log_level.upper())
    if not isinstance(level, int):
        raise typer.BadParameter(f"unknown log level {log_level!r}", param_hint="--log-level")
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


if __name__ == "__main__":
    app()
