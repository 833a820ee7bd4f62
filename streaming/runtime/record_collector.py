"""RecordCollector: sends serialized records to Kafka and knows when they are all acknowledged."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from confluent_kafka import KafkaError, Message

from streaming.errors import ProductionError
from streaming.runtime.streams_producer import StreamsProducer

UNASSIGNED = -1  # librdkafka's RD_KAFKA_PARTITION_UA: let the producer's partitioner choose


class RecordCollector(Protocol):
    def send(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int, headers: Any,
             partition: int = UNASSIGNED) -> None: ...

    def partition_count(self, topic: str) -> int: ...

    def flush(self) -> None: ...

    @property
    def producer(self) -> StreamsProducer: ...


class KafkaRecordCollector:
    """Sends through a :class:`~streaming.runtime.streams_producer.StreamsProducer` (at-least-once today; a
    transactional one plugs in at :func:`~streaming.runtime.streams_producer.streams_producer`).

    Only failed deliveries call back, so the hot path pays nothing per record for acknowledgements;
    ``flush()`` waits for every outstanding record and raises :class:`ProductionError` if any failed, so
    offsets are never committed past a lost output.
    """

    def __init__(self, make_producer: Callable[[Callable[[Any, Any], None]], StreamsProducer],
                 metadata_client: Any) -> None:
        self._failures: list[tuple[str, int, str]] = []
        self.producer = make_producer(self._on_delivery)
        self._produce = self.producer.produce
        self._metadata_client = metadata_client
        self._partition_counts: dict[str, int] = {}

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self._failures.append((message.topic(), message.partition(), str(error)))

    def send(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int, headers: Any,
             partition: int = UNASSIGNED) -> None:
        # Keywords, not positions: confluent-kafka's produce() takes (topic, value, key, partition,
        # callback, on_delivery, timestamp, ...), so a sixth positional argument is NOT the timestamp.
        try:
            if headers is None:
                self._produce(topic, value, key, partition, timestamp=timestamp)
            else:
                self._produce(topic, value, key, partition, timestamp=timestamp, headers=headers)
        except BufferError:
            # The producer queue is full: serve delivery reports until there is room, then send.
            while True:
                self.producer.poll(0.05)
                try:
                    self._produce(topic, value, key, partition, timestamp=timestamp, headers=headers)
                    break
                except BufferError:
                    continue
        except Exception as exc:
            raise ProductionError(f"cannot send to topic {topic!r} (partition {partition}): {exc}") from exc

    def poll(self) -> None:
        """Serve delivery reports without blocking (call once per loop)."""
        self.producer.poll(0)
        if self._failures:
            self._raise_failures()

    def partition_count(self, topic: str) -> int:
        count = self._partition_counts.get(topic)
        if count is None:
            metadata = self._metadata_client.list_topics(topic, timeout=10)
            partitions = metadata.topics[topic].partitions if topic in metadata.topics else {}
            if not partitions:
                raise ProductionError(f"output topic {topic!r} does not exist")
            count = self._partition_counts[topic] = len(partitions)
        return count

    def flush(self, timeout: float = 60.0) -> None:
        """Wait until every sent record is acknowledged; raise if any failed or the wait timed out."""
        deadline = time.monotonic() + timeout
        while (remaining := self.producer.flush(max(0.0, deadline - time.monotonic()))) > 0:
            if time.monotonic() >= deadline:
                raise ProductionError(f"{remaining} records still unacknowledged after {timeout:.0f} s")
        if self._failures:
            self._raise_failures()

    def _raise_failures(self) -> None:
        topic, partition, error = self._failures[0]
        count = len(self._failures)
        self._failures.clear()
        raise ProductionError(f"{count} records failed to reach Kafka; first: topic {topic!r} "
                              f"partition {partition}: {error}")

    def close(self) -> None:
        """Flush what is outstanding (best effort) and release the producer's connections."""
        self.producer.close()
