"""How the data commands (``brook topics``, ``produce``, ``consume``, ``status``) reach a cluster.

``--bootstrap-servers`` (or ``BROOK_BOOTSTRAP_SERVERS``), else the embedded broker ``brook broker start``
recorded in ``.brook/broker``, else ``127.0.0.1:9092``. Security settings come from a worker config
file (``--config``, as ``brook worker run`` reads it, environment and references included) and
``--set key=value``; only ``bootstrap.servers``, ``security.protocol``, ``sasl.*`` and ``ssl.*`` are used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from streaming.broker import DEFAULT_WORKDIR, BrokerError, EmbeddedBroker
from streaming.config import security_settings
from streaming.config_sources import resolve_references
from streaming.rdkafka_logging import RDKAFKA_LOGGER

BootstrapOption = Annotated[str | None, typer.Option(
    "--bootstrap-servers", "-b", envvar="BROOK_BOOTSTRAP_SERVERS",
    help="host:port of the cluster (default: the embedded broker in .brook/broker, else 127.0.0.1:9092).")]
ConfigOption = Annotated[Path | None, typer.Option(
    "--config", "-c", exists=True, dir_okay=False, help="A worker config file for the security settings.")]
SetOption = Annotated[list[str] | None, typer.Option("--set", help="A client setting: key=value.")]


def client_config(bootstrap: str | None, config_file: Path | None, overrides: list[str] | None) -> dict[str, Any]:
    """librdkafka settings for a data command (see the module doc)."""
    from streaming.cli.worker import load_config

    settings = resolve_references(load_config(config_file, overrides or []))
    chosen = bootstrap or settings.get("bootstrap.servers") or _embedded_bootstrap() or "127.0.0.1:9092"
    return {"bootstrap.servers": chosen, **security_settings(settings), "logger": RDKAFKA_LOGGER}


def _embedded_bootstrap() -> str | None:
    try:
        broker = EmbeddedBroker.from_state(Path(DEFAULT_WORKDIR))
    except BrokerError:
        return None
    return broker.bootstrap_servers if broker is not None and broker.is_running() else None
