"""What a reset plan sees of the cluster (:class:`Observation`), and its fingerprint: ``--execute`` looks again and
refuses a plan whose cluster changed since (:mod:`streaming.reset.execute`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from streaming.admin import watermarks
from streaming.reset.errors import ResetError
from streaming.runtime.cluster import cluster_metadata
from streaming.runtime.reset_epoch import read_reset_epoch

__all__ = ["Observation", "committed_offsets", "observe", "topic_ids"]

_NO_TOPIC_ID = {"AAAAAAAAAAAAAAAAAAAAAA", "None"}  # Kafka's zero UUID: a broker without topic ids


@dataclass(frozen=True)
class Observation:
    """What a plan saw of the cluster; the fingerprint covers exactly this."""

    committed: dict[str, int]
    """The group's committed offsets, ``topic[partition]`` -> offset."""
    topics: dict[str, dict[str, Any]]
    """Per topic involved: ``partitions``, ``id`` (``none`` when the broker gives none or it does not exist),
    ``earliest`` and ``end`` per partition."""
    epoch: str
    snapshots: dict[str, list[str]]
    """Per store: its snapshots as ``<id>@<epoch>``."""

    def fingerprint(self) -> str:
        """A hash of everything observed: equal fingerprints, the same cluster as far as the reset goes."""
        canonical = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:32]

    def changes_since(self, older: Observation) -> list[str]:
        """What differs from ``older``, one phrase per difference, for the refusal of a stale plan."""
        changes = []
        if older.epoch != self.epoch:
            changes.append(f"the reset epoch is {self.epoch}, not {older.epoch} (another reset ran)")
        for topic in sorted(set(older.topics) | set(self.topics)):
            was, now = older.topics.get(topic), self.topics.get(topic)
            if was is None or now is None or was["id"] != now["id"] or was["partitions"] != now["partitions"]:
                changes.append(f"topic {topic} was {_shape(was)}, is {_shape(now)}")
                continue
            for what in ("end", "earliest"):
                for partition, (a, b) in enumerate(zip(was[what], now[what], strict=True)):
                    if a != b:
                        changes.append(f"{topic}[{partition}] {what} offset {a} -> {b}")
        for key in sorted(set(older.committed) | set(self.committed)):
            a, b = older.committed.get(key), self.committed.get(key)
            if a != b:
                changes.append(f"committed offset of {key} {'-' if a is None else a} -> {'-' if b is None else b}")
        for store in sorted(set(older.snapshots) | set(self.snapshots)):
            if older.snapshots.get(store, []) != self.snapshots.get(store, []):
                changes.append(f"snapshots of store {store} {older.snapshots.get(store, [])} -> "
                               f"{self.snapshots.get(store, [])}")
        return changes


def _shape(topic: Mapping[str, Any] | None) -> str:
    return "absent" if topic is None or not topic["partitions"] else \
        f"{topic['partitions']} partition(s), id {topic['id']}"


def committed_offsets(admin: AdminClient, group: str, timeout: float) -> dict[str, int]:
    """The committed offsets of ``group``, ``topic[partition]`` -> offset. Raises :class:`ResetError` naming the
    group when the broker cannot say."""
    try:
        result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                   request_timeout=timeout)[group].result(timeout)
    except KafkaException as exc:
        raise ResetError(f"cannot read the committed offsets of group {group!r}: {exc.args[0].str()}") from None
    return {f"{tp.topic}[{tp.partition}]": tp.offset for tp in result.topic_partitions
            if tp.offset >= 0 and tp.error is None}


def topic_ids(admin: AdminClient, topics: list[str], timeout: float) -> dict[str, str]:
    """Each topic's id (``none`` from a broker without topic ids). Raises :class:`ResetError` naming the topic."""
    if not topics:
        return {}
    futures = admin.describe_topics(TopicCollection(topics), request_timeout=timeout)
    ids = {}
    for topic, future in futures.items():
        try:
            topic_id = str(future.result(timeout).topic_id)
        except KafkaException as exc:
            raise ResetError(f"cannot describe topic {topic}: {exc.args[0].str()}") from None
        ids[topic] = "none" if topic_id in _NO_TOPIC_ID else topic_id
    return ids


def _snapshot_state(location: str | None, application_id: str, stores: Iterable[str]) -> dict[str, list[str]]:
    """Per store: its snapshots as ``<id>@<reset epoch>`` (needs pyarrow only when there is a location)."""
    if not location:
        return {}
    from streaming.state import snapshots

    found = {}
    for store in sorted(stores):
        ids = snapshots.list_snapshot_ids(location, application_id, store)
        found[store] = [f"{i}@{snapshots.read_manifest(location, application_id, store, i).store_identity.reset_epoch}"
                        for i in ids]
    return found


def observe(client_config: Mapping[str, Any], application_id: str, topics: Iterable[str],
            snapshot_location: str | None, stores: Iterable[str], timeout: float = 30.0) -> Observation:
    """What the cluster holds now of ``topics`` (absent ones included, as absent), the group's committed offsets,
    the reset epoch and the stores' snapshots: a plan's :class:`Observation`."""
    config = dict(client_config)
    names = sorted(set(topics))
    metadata = cluster_metadata(config, timeout).topics
    counts = {t: len(metadata[t].partitions) for t in names if t in metadata and metadata[t].error is None}
    admin = AdminClient(config)
    ids = topic_ids(admin, [t for t in names if t in counts], timeout)
    bounds = watermarks(config["bootstrap.servers"], [(t, p) for t in counts for p in range(counts[t])],
                        client_config=config, timeout=timeout)
    described = {t: {"partitions": counts.get(t, 0), "id": ids.get(t, "none"),
                     "earliest": [bounds[(t, p)][0] for p in range(counts.get(t, 0))],
                     "end": [bounds[(t, p)][1] for p in range(counts.get(t, 0))]} for t in names}
    return Observation(committed=committed_offsets(admin, application_id, timeout), topics=described,
                       epoch=read_reset_epoch(config, application_id).epoch,
                       snapshots=_snapshot_state(snapshot_location, application_id, stores))
