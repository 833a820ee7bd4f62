"""What a scaling plan asks the cluster beyond what a reset plan observes: whether it can add partitions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions

__all__ = ["create_partitions_refusal"]

_UNSUPPORTED = {KafkaError._UNSUPPORTED_FEATURE, KafkaError.UNSUPPORTED_VERSION}


def create_partitions_refusal(client_config: Mapping[str, Any], topic: str, partitions: int,
                              timeout: float = 15.0) -> str | None:
    """Why the cluster would refuse growing ``topic`` to ``partitions`` partitions, or None when it would not.

    Asks CreatePartitions with ``validate_only`` (KIP-195: the broker checks the request and changes nothing).
    A broker without CreatePartitions (the embedded one) answers ``_UNSUPPORTED_FEATURE`` (librdkafka's, from the
    broker's ApiVersions) or ``UNSUPPORTED_VERSION``: the answer then says the broker does not support it."""
    admin = AdminClient(dict(client_config))
    futures = admin.create_partitions([NewPartitions(topic, partitions)], validate_only=True,
                                      request_timeout=timeout)
    try:
        futures[topic].result(timeout)
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        if error.code() in _UNSUPPORTED:
            return f"the broker does not support CreatePartitions ({error.name()}: {error.str()})"
        return f"the broker refuses CreatePartitions of {topic} to {partitions} ({error.name()}: {error.str()})"
    return None
