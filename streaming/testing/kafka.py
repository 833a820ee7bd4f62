"""Helpers for tests and demos against a real broker: produce records, read a topic to its end,
and read a group's committed offsets.

Completeness is judged by partition EOF at the fetched high watermark, never by ListOffsets
"latest" (which the embedded broker answers wrongly; see docs/broker-limits.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from streaming.admin import read_to_end
from streaming.serdes import Serde


@dataclass(frozen=True)
class ConsumedRecord:
    topic: str
    partition: int
    offset: int
    key: Any
    value: Any
    timestamp: int
    headers: list[tuple[str, bytes | None]]


def produce(bootstrap_servers: str, topic: str, records: Iterable[Any], key_serde: Serde[Any],
            value_serde: Serde[Any], producer_config: dict[str, Any] | None = None) -> dict[int, int]:
    """Produce ``records`` (objects with key, value, timestamp and optional headers) with the Java
    client's partitioner; returns the end offset per partition (next offset after the last record)."""
    ends: dict[int, int] = {}
    failures: list[str] = []

    def delivered(error: KafkaError | None, message: Any) -> None:
        if error is not None:
            failures.append(str(error))
        else:
            ends[message.partition()] = max(ends.get(message.partition(), 0), message.offset() + 1)

    producer = Producer({"bootstrap.servers": bootstrap_servers, "partitioner": "murmur2_random",
                         "linger.ms": 5, **(producer_config or {})})
    for count, record in enumerate(records):
        kwargs: dict[str, Any] = {"timestamp": record.timestamp} if record.timestamp is not None else {}
        if getattr(record, "headers", None):
            kwargs["headers"] = record.headers
        while True:
            try:
                producer.produce(topic, value_serde.serialize(record.value), key_serde.serialize(record.key),
                                 on_delivery=delivered, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        if count % 10_000 == 0:
            producer.poll(0)
    unacknowledged = producer.flush(60)
    producer.close()
    if unacknowledged > 0:
        raise RuntimeError(f"records to {topic!r} still unacknowledged after 60 s")
    if failures:
        raise RuntimeError(f"{len(failures)} records failed to reach {topic!r}: {failures[0]}")
    return ends


def produce_paced(bootstrap_servers: str, topic: str, records: list[Any], key_serde: Serde[Any],
                  value_serde: Serde[Any], group: str, partitions: int, batch_size: int, timeout: float = 120.0,
                  on_batch: Callable[[int], None] | None = None) -> dict[int, int]:
    """Produce ``records`` in batches of ``batch_size``, as live data arrives: batch ``n`` goes out once
    ``group`` has committed everything up to batch ``n - 2``, so its consumers stay within two batches of
    the head and read the partitions evenly (a backlog read at once does not: some partitions run hours
    of event time ahead of others). ``on_batch(n)`` is called after batch ``n`` is produced. Returns
    the end offset per partition."""
    ends: dict[int, int] = {}
    history: list[dict[int, int]] = []
    for number, start in enumerate(range(0, len(records), batch_size)):
        if len(history) >= 2:
            target = history[-2]
            wait_for(lambda target=target: all(offset >= target.get(p, 0) for p, offset in
                                 committed_offsets(bootstrap_servers, group, topic, partitions).items()),
                     timeout, f"group {group!r} to commit {topic!r} up to {target}")
        for partition, end in produce(bootstrap_servers, topic, records[start:start + batch_size], key_serde,
                                      value_serde).items():
            ends[partition] = max(ends.get(partition, 0), end)
        history.append(dict(ends))
        if on_batch is not None:
            on_batch(number)
    return ends


def read_topic(bootstrap_servers: str, topic: str, key_serde: Serde[Any], value_serde: Serde[Any],
               partitions: int, timeout: float = 30.0,
               client_config: dict[str, Any] | None = None) -> list[ConsumedRecord]:
    """Every record of ``topic`` from the beginning to partition EOF on all ``partitions``
    (``client_config``: extra settings, e.g. security)."""
    settings = {"bootstrap.servers": bootstrap_servers, **(client_config or {})}
    return [ConsumedRecord(topic, message.partition(), message.offset(), key_serde.deserialize(message.key()),
                           value_serde.deserialize(message.value()), message.timestamp()[1], message.headers() or [])
            for message in read_to_end(settings, [(topic, p, OFFSET_BEGINNING) for p in range(partitions)],
                                       timeout=timeout)]


def committed_offsets(bootstrap_servers: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offset per partition (0 where none is committed)."""
    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": group, "enable.auto.commit": False})
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    finally:
        consumer.close()
    return {tp.partition: max(tp.offset, 0) for tp in committed}


def group_lag(bootstrap_servers: str, group: str, topic: str, partitions: int, timeout: float = 30.0) -> int:
    """Records of ``topic`` after the group's committed offsets, counted by reading to partition EOF."""
    committed = committed_offsets(bootstrap_servers, group, topic, partitions)
    starts = [(topic, p, committed[p] or OFFSET_BEGINNING) for p in range(partitions)]
    return sum(1 for _ in read_to_end({"bootstrap.servers": bootstrap_servers}, starts, timeout=timeout))


def wait_for(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.2) -> None:
    """Poll ``condition`` until it holds; after ``timeout`` s raise an AssertionError naming ``what``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
