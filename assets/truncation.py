"""Truncating a changelog below its newest snapshot (Kafka's DeleteRecords), where the broker can.

Once a snapshot is durable, the changelog records below its ``next_offset``s are no longer needed
for restores, and deleting them bounds the changelog's size on brokers that never compact it.
Truncation is off by default and runs only after the manifest is written.

The embedded broker (Tansu) cannot do it: a DeleteRecords request panics its connection thread, the
connection resets and nothing is deleted (docs/broker-limits.md). Brook never sends it there. It recognises the
embedded broker by either signal, checked before anything is sent:

- the platform spec declares the cluster ``embedded: true``;
- the broker reports Tansu's cluster id (``tansu_cluster``) in its metadata -- what Brook's embedded
  broker reports, as it never sets another; this catches an embedded broker reached through a
  cluster entry not marked embedded (e.g. ``BROOK_BOOTSTRAP_SERVERS`` pointing at one).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from streaming.runtime.cluster import TANSU_CLUSTER_ID

__all__ = ["TANSU_CLUSTER_ID", "TruncationError", "delete_records_refusal", "kept_next_offsets", "truncate_changelog"]



class TruncationError(Exception):
    """The changelog cannot be truncated on this cluster, or the broker refused the deletion."""


def _admin(client_config: Mapping[str, Any]) -> AdminClient:
    return AdminClient({**client_config, "logger": logging.getLogger("assets.truncation.rdkafka")})


def delete_records_refusal(client_config: Mapping[str, Any], *, cluster: str, declared_embedded: bool,
                           timeout: float = 10.0) -> str | None:
    """Why DeleteRecords must not be sent to this cluster, or ``None`` when it may be.

    Raises:
        TruncationError: the cluster's metadata could not be read.
    """
    reason = ("the embedded broker (Tansu) cannot delete records: a DeleteRecords request crashes its "
              "connection handler and deletes nothing, so Brook does not send it")
    if declared_embedded:
        return f"cluster {cluster!r} is declared 'embedded: true' in the platform spec; {reason}"
    try:
        cluster_id = _admin(client_config).list_topics(timeout=timeout).cluster_id
    except KafkaException as exc:
        raise TruncationError(f"cannot read the metadata of cluster {cluster!r}: {exc.args[0]}") from None
    if cluster_id == TANSU_CLUSTER_ID:
        return f"cluster {cluster!r} reports cluster id {cluster_id!r}; {reason}"
    return None


def kept_next_offsets(location: str, application_id: str, store: str) -> dict[int, int]:
    """Per partition, the lowest ``next_offset`` of the snapshots kept: where truncation may go up to. A restore
    that picked an older snapshot (kept for the prune grace period) replays the changelog from its offsets."""
    from streaming.state import snapshots

    low: dict[int, int] = {}
    for snapshot_id in snapshots.list_snapshot_ids(location, application_id, store):
        manifest = snapshots.read_manifest(location, application_id, store, snapshot_id)
        for partition, offset in manifest.next_offsets.items():
            low[partition] = min(low.get(partition, offset), offset)
    return low


def truncate_changelog(client_config: Mapping[str, Any], topic: str, next_offsets: Mapping[int, int],
                       timeout: float = 30.0) -> dict[int, int]:
    """Delete the records of ``topic`` below ``next_offsets`` (per partition); returns each partition's
    new log start offset. Call only after :func:`delete_records_refusal` said ``None`` and the
    snapshot's manifest is written.

    Raises:
        TruncationError: the broker refused or failed a deletion (names topic and partition).
    """
    wanted = [TopicPartition(topic, p, offset) for p, offset in sorted(next_offsets.items()) if offset > 0]
    if not wanted:
        return {}
    futures = _admin(client_config).delete_records(wanted, request_timeout=timeout, operation_timeout=timeout)
    low_watermarks: dict[int, int] = {}
    failures: list[str] = []
    for tp, future in futures.items():
        try:
            low_watermarks[tp.partition] = future.result(timeout).low_watermark
        except KafkaException as exc:
            failures.append(f"{topic}[{tp.partition}] below {tp.offset}: {exc.args[0]}")
    if failures:
        raise TruncationError(f"deleting changelog records failed: {'; '.join(failures)}")
    return low_watermarks
