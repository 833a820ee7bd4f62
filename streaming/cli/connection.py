"""How the data commands (``brook topics``, ``produce``, ``consume``, ``status``) reach a cluster.

``bootstrap.servers`` in the one order of :mod:`streaming.bootstrap`: ``--bootstrap-servers`` (or ``--set``),
``BROOK_BOOTSTRAP_SERVERS``, the config file, the embedded broker ``brook broker start`` recorded in
``.brook/broker``, else ``127.0.0.1:9092``. Security settings come from a worker config
file (``--config``, as ``brook worker run`` reads it, environment and references included) and
``--set key=value``; only ``bootstrap.servers``, ``security.protocol``, ``sasl.*`` and ``ssl.*`` are used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from streaming.cli.settings import load_settings
from streaming.config import security_settings
from streaming.config_sources import resolve_references
from streaming.rdkafka_logging import RDKAFKA_LOGGER

BootstrapOption = Annotated[str | None, typer.Option(
    "--bootstrap-servers", "-b",
    help="host:port of the cluster (default: $BROOK_BOOTSTRAP_SERVERS, the config file, the embedded broker in "
         ".brook/broker, else 127.0.0.1:9092).")]
ConfigOption = Annotated[Path | None, typer.Option(
    "--config", "-c", exists=True, dir_okay=False, help="A worker config file for the security settings.")]
SetOption = Annotated[list[str] | None, typer.Option("--set", help="A client setting: key=value.")]


def client_config(bootstrap: str | None, config_file: Path | None, overrides: list[str] | None) -> dict[str, Any]:
    """librdkafka settings for a data command (see the module doc)."""
    settings, _ = load_settings(config_file, overrides or [], bootstrap)
    settings = resolve_references(settings)
    return {"bootstrap.servers": settings["bootstrap.servers"], **security_settings(settings),
            "logger": RDKAFKA_LOGGER}
