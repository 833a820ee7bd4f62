"""PySpark for the Brook platform, usable from any PySpark session (no Dagster import here).

- :func:`register_kafka_source`: the ``brook-kafka`` data source (``spark.read.format("brook-kafka")``),
  Spark's Kafka source columns and options on confluent-kafka (:mod:`assets.spark.kafka_source`).
- :func:`client_options`: librdkafka settings -> ``kafka.``-prefixed source options.
"""

from assets.spark.kafka_source import KAFKA_SCHEMA, SOURCE_NAME, KafkaDataSource, register_kafka_source
from assets.spark.options import KafkaSourceError, client_options

__all__ = [
    "KAFKA_SCHEMA",
    "SOURCE_NAME",
    "KafkaDataSource",
    "KafkaSourceError",
    "client_options",
    "register_kafka_source",
]
