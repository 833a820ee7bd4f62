"""PySpark for the Brook platform, usable from any PySpark session (no Dagster import here).

- :func:`register_kafka_source`: the ``brook-kafka`` data source (``spark.read.format("brook-kafka")``),
  Spark's Kafka source columns and options on confluent-kafka (:mod:`assets.spark.kafka_source`).
- :func:`client_options`: librdkafka settings -> ``kafka.``-prefixed source options.

The names are imported on first use, not with the package: :mod:`assets.spark.worker_daemon` runs as
``python -m assets.spark.worker_daemon``, which imports this package first, and must choose where pyspark is
imported from before anything imports it.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "KAFKA_SCHEMA",
    "SOURCE_NAME",
    "KafkaDataSource",
    "KafkaSourceError",
    "client_options",
    "register_kafka_source",
]

_MODULE_OF = {"KAFKA_SCHEMA": "kafka_source", "SOURCE_NAME": "kafka_source", "KafkaDataSource": "kafka_source",
              "register_kafka_source": "kafka_source", "KafkaSourceError": "options", "client_options": "options"}


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
