"""The ``/metrics`` HTTP endpoint of one KafkaStreams instance (``metrics.port``)."""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from streaming.errors import StreamsError

log = logging.getLogger(__name__)


class MetricsEndpoint:
    """Serves ``registry`` in the Prometheus text format on every interface at ``port`` (plain HTTP, no
    token: it exposes counters and topic/task names, never record contents or config values)."""

    def __init__(self, registry: CollectorRegistry, port: int) -> None:
        self._registry = registry
        self.port = port
        self._server: Any = None

    def start(self) -> None:
        try:
            self._server, _ = start_http_server(self.port, registry=self._registry)
        except OSError as exc:
            raise StreamsError(f"config key 'metrics.port': cannot serve /metrics on port {self.port}: "
                               f"{exc.strerror or exc}") from exc
        log.info("serving Prometheus metrics on http://0.0.0.0:%d/metrics", self.port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
