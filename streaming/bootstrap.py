"""Where ``bootstrap.servers`` comes from: one order for every ``brook`` command and for ``KafkaStreams``.

1. the command line: ``--bootstrap-servers`` / ``-b`` of the data commands, ``--set bootstrap.servers=...``;
2. the environment: ``BROOK_BOOTSTRAP_SERVERS``;
3. the config file (``--config``), or the config mapping given to ``KafkaStreams``;
4. the running embedded broker that ``brook broker start`` recorded in its workdir (``$BROOK_BROKER_WORKDIR``,
   else ``.brook/broker`` of the working directory);
5. else ``127.0.0.1:9092``, a local Kafka on its default port.

``KafkaStreams`` given a config without ``bootstrap.servers`` takes steps 2, 4 and 5; a ``bootstrap.servers`` in
its config is explicit code and always wins there. :class:`Bootstrap` says which source gave the value: a worker's
first log line names it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streaming.broker import DEFAULT_WORKDIR, BrokerError, EmbeddedBroker

ENV_VAR = "BROOK_BOOTSTRAP_SERVERS"
BROKER_WORKDIR_VAR = "BROOK_BROKER_WORKDIR"  # where ``brook broker start`` runs the embedded broker
LOCAL_KAFKA = "127.0.0.1:9092"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Bootstrap:
    """The ``bootstrap.servers`` chosen, and the source it came from (for a log line)."""

    servers: str
    source: str

    def describe(self) -> str:
        """``bootstrap.servers=HOST:PORT (from SOURCE)``."""
        return f"bootstrap.servers={self.servers} (from {self.source})"


def resolve_bootstrap(flag: str | None = None, *, flag_name: str = "--bootstrap-servers",
                      config: Mapping[str, Any] | None = None, config_name: str = "the config file",
                      environ: Mapping[str, str] | None = None) -> Bootstrap:
    """The first of: ``flag``, ``$BROOK_BOOTSTRAP_SERVERS``, ``config['bootstrap.servers']``, the running embedded
    broker, ``127.0.0.1:9092`` (see the module doc). Empty values count as unset."""
    env = os.environ if environ is None else environ
    broker_dir = env.get(BROKER_WORKDIR_VAR) or DEFAULT_WORKDIR
    if flag:
        return Bootstrap(flag, flag_name)
    if env.get(ENV_VAR):
        return Bootstrap(env[ENV_VAR], ENV_VAR)
    if config is not None and config.get("bootstrap.servers"):
        return Bootstrap(str(config["bootstrap.servers"]), config_name)
    embedded = embedded_bootstrap(broker_dir)
    if embedded is not None:
        return Bootstrap(embedded, f"the embedded broker in {broker_dir}")
    return Bootstrap(LOCAL_KAFKA, "the default: no flag, environment, config or embedded broker named one")


def embedded_bootstrap(broker_dir: Path | str = DEFAULT_WORKDIR) -> str | None:
    """``host:port`` of the embedded broker recorded in ``broker_dir`` while it runs, else None."""
    try:
        broker = EmbeddedBroker.from_state(Path(broker_dir))
    except BrokerError:
        return None
    return broker.bootstrap_servers if broker is not None and broker.is_running() else None


def with_bootstrap(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` (a ``KafkaStreams`` config) with ``bootstrap.servers``: its own, else from the environment, the
    embedded broker or the default (logged, naming the source)."""
    if config.get("bootstrap.servers"):
        return dict(config)
    chosen = resolve_bootstrap(config_name="the KafkaStreams config")
    log.info("connecting to %s", chosen.describe())
    return {**config, "bootstrap.servers": chosen.servers}
