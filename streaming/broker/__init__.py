"""Brokers Brook can start for you: the embedded Tansu broker (development, tests, demo, bench)."""

from streaming.broker.embedded import (
    DEFAULT_WORKDIR,
    EMBEDDED_CLIENT_DEFAULTS,
    BrokerError,
    BrokerState,
    EmbeddedBroker,
    resolve_broker_binary,
)

__all__ = [
    "DEFAULT_WORKDIR",
    "EMBEDDED_CLIENT_DEFAULTS",
    "BrokerError",
    "BrokerState",
    "EmbeddedBroker",
    "resolve_broker_binary",
]
