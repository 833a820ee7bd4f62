"""Thin topic-administration helpers over confluent-kafka's ``AdminClient``.

Used by the runtime (internal topics), the tests, the demo and the benchmarks. They work against
Apache Kafka and against the embedded broker alike, and never trust a broker default they do not
set: topics are created with the replication factor the broker defaults to (``-1``) unless told,
and callers pass every config they rely on (the embedded broker reports only explicit configs).

Each helper takes ``bootstrap_servers`` plus an optional ``client_config`` for everything else a
client needs (security settings such as ``security.protocol``, ``sasl.*``, ``ssl.*``). Error
messages name topics and Kafka error codes, never the client config (it may hold secrets).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata, NewTopic

__all__ = ["TopicError", "committed_offsets", "create_topics", "delete_topics", "partition_counts", "watermarks"]

logger = logging.getLogger(__name__)

_POLL_INTERVAL = 0.1


class TopicError(Exception):
    """A topic is missing, has the wrong partition count, or could not be created or deleted."""


def _admin(bootstrap_servers: str, client_config: Mapping[str, Any] | None) -> AdminClient:
    config: dict[str, Any] = {"logger": logging.getLogger("streaming.admin.rdkafka")}
    config.update(client_config or {})
    config["bootstrap.servers"] = bootstrap_servers
    return AdminClient(config)


def _metadata(admin: AdminClient, timeout: float) -> ClusterMetadata:
    try:
        # No topic argument: an all-topics metadata request never auto-creates a topic.
        return admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise TopicError(f"cannot read cluster metadata: {exc.args[0]}") from exc


def _counts(metadata: ClusterMetadata, topics: Iterable[str]) -> dict[str, int | None]:
    counts: dict[str, int | None] = {}
    for name in topics:
        topic = metadata.topics.get(name)
        if topic is None or topic.error is not None or not topic.partitions:
            counts[name] = None
        else:
            counts[name] = len(topic.partitions)
    return counts


def partition_counts(
    bootstrap_servers: str,
    topics: Iterable[str],
    client_config: Mapping[str, Any] | None = None,
    *,
    timeout: float = 10.0,
) -> dict[str, int | None]:
    """Partition count of each topic, ``None`` for a topic that does not exist.

    Args:
        bootstrap_servers: the cluster's ``bootstrap.servers``.
        topics: topic names.
        client_config: extra librdkafka settings (security); ``bootstrap.servers`` here is ignored.
        timeout: seconds to wait for the metadata answer.

    Raises:
        TopicError: the cluster did not answer in time.
    """
    names = list(topics)
    return _counts(_metadata(_admin(bootstrap_servers, client_config), timeout), names)


def create_topics(
    bootstrap_servers: str,
    topics: Mapping[str, int],
    *,
    configs: Mapping[str, Mapping[str, str]] | None = None,
    client_config: Mapping[str, Any] | None = None,
    replication_factor: int = -1,
    timeout: float = 30.0,
) -> None:
    """Create topics that do not exist yet, idempotently, and wait until they are usable.

    A topic that already exists with the requested partition count is left alone (its configs
    are not compared or changed); nothing is created when any existing topic has the wrong count.
    Returns once cluster metadata shows every partition of every topic.

    Args:
        bootstrap_servers: the cluster's ``bootstrap.servers``.
        topics: topic name -> partition count.
        configs: topic name -> topic configs for topics this call creates
            (e.g. ``{"cleanup.policy": "compact"}``).
        client_config: extra librdkafka settings (security); ``bootstrap.servers`` here is ignored.
        replication_factor: ``-1`` (default) uses the broker's ``default.replication.factor``.
        timeout: seconds for the whole operation.

    Raises:
        TopicError: a topic exists with a different partition count (the message names the topic,
            the expected and the actual count), creation failed, or the partitions did not appear
            in metadata within ``timeout``.
    """
    for name, partitions in topics.items():
        if partitions < 1:
            raise TopicError(f"topic {name!r}: partition count must be >= 1, got {partitions}")
    if not topics:
        return
    deadline = time.monotonic() + timeout
    admin = _admin(bootstrap_servers, client_config)
    existing = _counts(_metadata(admin, timeout), topics)
    _check_counts(topics, existing)

    missing = [name for name, count in existing.items() if count is None]
    if missing:
        new = [
            NewTopic(
                name,
                num_partitions=topics[name],
                replication_factor=replication_factor,
                config=dict((configs or {}).get(name, {})),
            )
            for name in missing
        ]
        wait = max(1.0, timeout)
        futures = admin.create_topics(new, operation_timeout=wait, request_timeout=wait)
        for name, future in futures.items():
            try:
                future.result()
                logger.info("created topic %s with %d partitions", name, topics[name])
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:  # lost a race: checked below
                    raise TopicError(f"cannot create topic {name!r}: {error.name()}: {error.str()}") from exc

    while True:
        remaining = deadline - time.monotonic()
        current = _counts(_metadata(admin, max(1.0, remaining)), topics)
        _check_counts(topics, current)
        if all(count is not None for count in current.values()):
            return
        if remaining <= 0:
            absent = sorted(name for name, count in current.items() if count is None)
            raise TopicError(f"topics {absent} did not appear in cluster metadata within {timeout:g} s")
        time.sleep(_POLL_INTERVAL)


def _check_counts(expected: Mapping[str, int], actual: Mapping[str, int | None]) -> None:
    wrong = [(name, count) for name, count in actual.items() if count is not None and count != expected[name]]
    if wrong:
        messages = [f"topic {name!r} has {got} partitions, expected {expected[name]}" for name, got in wrong]
        raise TopicError("; ".join(messages))


def delete_topics(
    bootstrap_servers: str,
    topics: Iterable[str],
    *,
    client_config: Mapping[str, Any] | None = None,
    missing_ok: bool = True,
    timeout: float = 30.0,
) -> None:
    """Delete topics and wait until they are gone from cluster metadata.

    Args:
        bootstrap_servers: the cluster's ``bootstrap.servers``.
        topics: topic names.
        client_config: extra librdkafka settings (security); ``bootstrap.servers`` here is ignored.
        missing_ok: a topic that does not exist is fine (default); otherwise it raises.
        timeout: seconds for the whole operation.

    Raises:
        TopicError: deletion failed, a topic was missing and ``missing_ok`` is false, or a topic
            was still listed after ``timeout``.
    """
    names = list(dict.fromkeys(topics))
    if not names:
        return
    deadline = time.monotonic() + timeout
    admin = _admin(bootstrap_servers, client_config)
    present = [name for name, count in _counts(_metadata(admin, timeout), names).items() if count is not None]
    absent = sorted(set(names) - set(present))
    if absent and not missing_ok:
        raise TopicError(f"cannot delete topics {absent}: they do not exist")
    if not present:
        return
    wait = max(1.0, timeout)
    futures = admin.delete_topics(present, operation_timeout=wait, request_timeout=wait)
    for name, future in futures.items():
        try:
            future.result()
            logger.info("deleted topic %s", name)
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART and missing_ok:
                continue
            raise TopicError(f"cannot delete topic {name!r}: {error.name()}: {error.str()}") from exc

    while True:
        remaining = deadline - time.monotonic()
        current = _counts(_metadata(admin, max(1.0, remaining)), present)
        still = [name for name, count in current.items() if count is not None]
        if not still:
            return
        if remaining <= 0:
            raise TopicError(f"topics {sorted(still)} were still listed {timeout:g} s after deletion")
        time.sleep(_POLL_INTERVAL)


def read_to_end(
    client_config: Mapping[str, Any],
    starts: Iterable[tuple[str, int, int]],
    *,
    timeout: float | None = 30.0,
) -> Iterator[Any]:
    """Every record of each ``(topic, partition, start offset)`` from that offset to the partition's end, as
    confluent-kafka messages (assigned, no group joined; ``client_config`` carries ``bootstrap.servers`` and any
    security settings).

    The end is the partition EOF, whose offset is the fetch's high watermark: right on every broker, unlike
    ListOffsets "latest" on the embedded one.

    Raises:
        TopicError: a partition answers with an error, or (with a ``timeout``) does not reach its end in time.
    """
    from confluent_kafka import Consumer, TopicPartition

    wanted = [TopicPartition(topic, partition, offset) for topic, partition, offset in starts]
    consumer = Consumer({"logger": logging.getLogger("streaming.admin.rdkafka"), **client_config,
                         "group.id": f"brook-reader-{uuid.uuid4().hex[:12]}", "enable.auto.commit": False,
                         "enable.partition.eof": True, "fetch.wait.max.ms": 100, "fetch.queue.backoff.ms": 10})
    consumer.assign(wanted)
    left = {(tp.topic, tp.partition) for tp in wanted}
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while left:
            if deadline is not None and time.monotonic() > deadline:
                raise TopicError(f"partitions {sorted(left)} did not reach their end within {timeout:g} s")
            for message in consumer.consume(10_000, 0.2):
                error, tp = message.error(), (message.topic(), message.partition())
                if error is None:
                    yield message
                elif error.code() == KafkaError._PARTITION_EOF:
                    left.discard(tp)
                else:
                    raise TopicError(f"reading {tp[0]}[{tp[1]}]: {error.str()}")
    finally:
        consumer.close()


def watermarks(
    bootstrap_servers: str,
    partitions: Iterable[tuple[str, int]],
    *,
    client_config: Mapping[str, Any] | None = None,
    timeout: float = 30.0,
) -> dict[tuple[str, int], tuple[int, int]]:
    """``(earliest, end)`` offsets of each ``(topic, partition)``, exact on any broker.

    ListOffsets "latest" is only a lower bound on the embedded broker (the last batch's base offset + 1),
    so each partition is read from that bound to partition EOF, whose offset comes from the fetch's high
    watermark: at most one batch is re-read per partition.

    Raises:
        TopicError: a partition does not answer (no EOF) within ``timeout`` s.
    """
    from confluent_kafka import Consumer, TopicPartition

    wanted = list(dict.fromkeys(partitions))
    if not wanted:
        return {}
    config: dict[str, Any] = {"logger": logging.getLogger("streaming.admin.rdkafka"), **(client_config or {}),
                              "bootstrap.servers": bootstrap_servers, "group.id": "brook-watermarks",
                              "enable.partition.eof": True, "enable.auto.commit": False, "fetch.wait.max.ms": 10,
                              "fetch.queue.backoff.ms": 10}
    consumer = Consumer(config)
    try:
        bounds = {tp: consumer.get_watermark_offsets(TopicPartition(*tp), timeout=timeout, cached=False)
                  for tp in wanted}
        consumer.assign([TopicPartition(topic, partition, max(bounds[(topic, partition)][1], 0))
                         for topic, partition in wanted])
        ends: dict[tuple[str, int], int] = {}
        deadline = time.monotonic() + timeout
        while len(ends) < len(wanted):
            if time.monotonic() > deadline:
                raise TopicError(f"no end of partitions {sorted(set(wanted) - set(ends))} within {timeout:g} s")
            for message in consumer.consume(10_000, 0.1):
                error, tp = message.error(), (message.topic(), message.partition())
                if error is None:
                    ends.pop(tp, None)
                elif error.code() == KafkaError._PARTITION_EOF:
                    ends[tp] = message.offset()
                else:
                    raise TopicError(f"reading {tp[0]}[{tp[1]}]: {error.str()}")
    finally:
        consumer.close()
    return {tp: (max(bounds[tp][0], 0), ends[tp]) for tp in wanted}


def committed_offsets(
    bootstrap_servers: str,
    group: str,
    *,
    client_config: Mapping[str, Any] | None = None,
    timeout: float = 30.0,
) -> dict[tuple[str, int], int]:
    """The committed offset of every ``(topic, partition)`` consumer group ``group`` committed.

    Raises:
        TopicError: the broker could not say (names the group and the Kafka error).
    """
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = _admin(bootstrap_servers, client_config)
    try:
        result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                   request_timeout=timeout)[group].result(timeout)
    except KafkaException as exc:
        raise TopicError(f"cannot read the committed offsets of group {group!r}: {exc.args[0].str()}") from None
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions
            if tp.offset >= 0 and tp.error is None}
