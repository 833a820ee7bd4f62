"""RecordCollector: sends serialized records to Kafka and knows when they are all acknowledged.

A production error names the input record the output came from, as Kafka Streams hands
``production.exception.handler`` the record context of the send (KIP-1033; ``RecordCollectorImpl``):

* a record the producer refuses at send time (e.g. larger than ``producer.message.max.bytes``): the task's sink
  catches the :class:`ProductionError` of :meth:`~KafkaRecordCollector.send` and names its input record exactly
  (topic, partition, offset, task) in it, in the handler's context and in the dead letter's ``source.*`` headers;
* a record a delivery report says failed after it was sent (the broker rejected it, a timeout): the report
  knows only the output, so the error names the input records it may be the output of — those the tasks
  writing to its topic processed since their last commit, none of which is committed (``inputs_of``, set by
  the stream thread: :meth:`~KafkaRecordCollector.name_inputs`). Binding each output's delivery callback to
  its input record would name it exactly, but costs 0.6-1.0 µs of CPU per input record (measured: a
  per-message callback object, +25-40% on a stateless app). Kafka Streams itself reads the task's record
  context when the callback runs on the producer's network thread (``errorHandlerContext(context, ...)`` in
  ``recordSendError``), which is the record being processed then, not necessarily the output's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from confluent_kafka import KafkaError, Message

from streaming.errors import ProductionError, StreamsError, TaskCorruptedError, TaskMigratedError
from streaming.runtime.broker_waits import BROKER_WAITS
from streaming.runtime.error_handlers import PRODUCTION, ErrorContext, fail_always
from streaming.runtime.streams_producer import StreamsProducer, fatal_error
from streaming.runtime.transactions import TransactionalProducer

log = logging.getLogger(__name__)

UNASSIGNED = -1  # librdkafka's RD_KAFKA_PARTITION_UA: let the producer's partitioner choose
#: While the producer's queue is full, serve delivery reports for this long between attempts to send.
QUEUE_FULL_POLL_S = 0.05
#: A stall of the producer queue is logged at most once per this many seconds (the next line counts the rest).
QUEUE_FULL_LOG_INTERVAL_S = 10.0
#: Delivery errors about the record itself, which production.exception.handler may skip; any other
#: (timeouts, authorization, a lost broker) always stops the thread.
RECORD_ERRORS = frozenset(getattr(KafkaError, name) for name in (
    "MSG_SIZE_TOO_LARGE", "_MSG_SIZE_TOO_LARGE", "INVALID_RECORD", "CORRUPT_MESSAGE", "RECORD_LIST_TOO_LARGE",
    "INVALID_TIMESTAMP", "POLICY_VIOLATION") if hasattr(KafkaError, name))
_FLUSH_SLICE_S = 1.0  # a flush without a deadline waits in slices of this length
#: A topic a dynamic sink names that the cached topic list lacks re-reads the list at most this often (a topic
#: created while the app runs is found within about this long; a flood of records to a missing topic costs one
#: metadata request per interval).
TOPIC_LIST_REFRESH_S = 1.0
#: How long a read of the cluster's topic list may take before the sink gives up (and the thread stops).
TOPIC_LIST_TIMEOUT_S = 10.0


class RecordCollector(Protocol):
    def send(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int, headers: Any,
             partition: int = UNASSIGNED) -> None: ...

    def partition_count(self, topic: str) -> int: ...

    def topic_exists(self, topic: str) -> bool: ...

    def flush(self) -> None: ...

    @property
    def producer(self) -> StreamsProducer: ...


class KafkaRecordCollector:
    """Sends through a :class:`~streaming.runtime.streams_producer.StreamsProducer` (at-least-once today; a
    transactional one plugs in at :func:`~streaming.runtime.streams_producer.streams_producer`).

    Only failed deliveries call back, so the hot path pays nothing per record for acknowledgements;
    ``flush()`` waits for every outstanding record; a failed one goes to ``production.exception.handler``
    (``errors``) when the failure is about the record (:data:`RECORD_ERRORS`) and the topic is not one
    ``always_fail(topic)`` names (changelogs, the dead-letter topic), else it raises
    :class:`ProductionError`, so offsets are never committed past a lost output.

    A full producer queue (``queue.buffering.max.messages`` / ``.kbytes``: librdkafka's QUEUE_FULL, a
    ``BufferError``) is waited out, never dropped: ``send`` serves delivery reports until there is room and
    sends the same record again (:meth:`_send_when_room`). If the broker never acknowledges, the queued
    records fail after ``message.timeout.ms`` and the failure is raised as above.
    """

    def __init__(self, make_producer: Callable[[Callable[[Any, Any], None]], StreamsProducer],
                 metadata_client: Any, always_fail: Callable[[str], bool] = lambda topic: True) -> None:
        self._failures: list[tuple[KafkaError, Message]] = []
        self.errors = fail_always()  # the stream thread sets its handlers (they write through this collector)
        self._always_fail = always_fail
        self.producer = make_producer(self._on_delivery)
        #: The producer's ``produce`` (confluent-kafka's, or the transactional producer's), replaced when the producer
        #: is renewed: a task's sink calls it directly, and hands what it raises to :meth:`send_failed`.
        self.produce = self.producer.produce
        self._inputs_of: Callable[[str], str] = lambda topic: ""
        self._metadata_client = metadata_client
        self._partition_counts: dict[str, int] = {}
        self._topics: frozenset[str] = frozenset()  # the cluster's topics, as last listed (topic_exists)
        self._topics_listed_at = -TOPIC_LIST_REFRESH_S
        self.topic_list_reads = 0
        self.queue_full_stalls = 0  # sends that waited for room in the producer's queue
        self.queue_full_seconds = 0.0
        self._stall_logged_at = -QUEUE_FULL_LOG_INTERVAL_S
        self._stalls_logged = 0

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self._failures.append((error, message))

    def name_inputs(self, inputs_of: Callable[[str], str]) -> None:
        """Have the errors of failed deliveries name the input records they may be the outputs of:
        ``inputs_of(topic)`` says which (the stream thread knows its tasks), the transactional producer's too."""
        self._inputs_of = inputs_of
        if isinstance(self.producer, TransactionalProducer):
            self.producer.inputs_of = inputs_of

    def send(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int, headers: Any,
             partition: int = UNASSIGNED) -> None:
        # All by position: confluent-kafka's produce() takes (topic, value, key, partition, callback, on_delivery,
        # timestamp, headers), so the timestamp is the SEVENTH (None callbacks: the producer's on_delivery). Passing
        # it by keyword costs ~0.3 us more per call (measured: 0.87 against 0.57 us), the keyword parsing.
        try:
            if headers is None:
                self.produce(topic, value, key, partition, None, None, timestamp)
            else:
                self.produce(topic, value, key, partition, None, None, timestamp, headers)
        except Exception as exc:  # noqa: BLE001 - send_failed raises all but a full queue
            self.send_failed(exc, topic, key, value, timestamp, headers, partition)

    def send_failed(self, exc: Exception, topic: str, key: bytes | None, value: bytes | None, timestamp: int,
                    headers: Any, partition: int) -> None:
        """``produce()`` of this record raised ``exc``: a full queue is waited out and the record sent (then this
        returns); an exactly-once transaction's failure is raised as it is; anything else raises the
        :class:`ProductionError` (or fatal producer error) :meth:`send` would."""
        if isinstance(exc, BufferError):
            self._send_when_room(topic, key, value, timestamp, headers, partition)
            return
        if isinstance(exc, (TaskMigratedError, TaskCorruptedError)):  # the transaction failed, not this record
            raise exc
        raise self._send_failure(exc, topic, partition) from exc

    @staticmethod
    def _send_failure(exc: Exception, topic: str, partition: int) -> StreamsError:
        """Why a send raised: the producer failed fatally (at-least-once: not this record's fault, the thread
        renews the producer), else this record could not be sent."""
        fatal = fatal_error(exc, f"a send to topic {topic!r}")
        if fatal is not None:
            return fatal
        return ProductionError(f"cannot send to topic {topic!r} (partition {partition}): {exc}")

    def _send_when_room(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int, headers: Any,
                        partition: int) -> None:
        """The producer's queue is full: serve delivery reports until there is room, then send the record."""
        started = time.monotonic()
        self.queue_full_stalls += 1
        if started - self._stall_logged_at >= QUEUE_FULL_LOG_INTERVAL_S:
            log.warning("producer queue full sending to topic %r: waiting for the broker to acknowledge records "
                        "(%d stalls since the last such line, %.1f s waited in all; the queue is bounded by the "
                        "producer.queue.buffering.max.messages / .kbytes settings)", topic,
                        self.queue_full_stalls - self._stalls_logged, self.queue_full_seconds)
            self._stall_logged_at, self._stalls_logged = started, self.queue_full_stalls
        try:
            while True:
                self.producer.poll(QUEUE_FULL_POLL_S)
                try:
                    self.produce(topic, value, key, partition, None, None, timestamp, headers)
                    return
                except BufferError:
                    continue
        except (TaskMigratedError, TaskCorruptedError):  # exactly-once: the transaction failed, not this record
            raise
        except Exception as exc:
            raise self._send_failure(exc, topic, partition) from exc
        finally:
            self.queue_full_seconds += time.monotonic() - started

    def poll(self) -> None:
        """Serve delivery reports without blocking (call once per loop)."""
        self.producer.poll(0)
        if self._failures:
            self._handle_failures()

    def partition_count(self, topic: str) -> int:
        count = self._partition_counts.get(topic)
        if count is None:
            metadata = self._metadata_client.list_topics(topic, timeout=10)
            partitions = metadata.topics[topic].partitions if topic in metadata.topics else {}
            if not partitions:
                raise ProductionError(f"output topic {topic!r} does not exist")
            count = self._partition_counts[topic] = len(partitions)
        return count

    def topic_exists(self, topic: str) -> bool:
        """Whether the cluster has ``topic`` (a dynamic sink asks before it sends: :mod:`streaming.runtime.dynamic_sink`).

        Answered from the cluster's topic list, read whole (a metadata request naming the topic may make a broker
        with ``auto.create.topics.enable`` create it) and cached; a topic the cached list lacks re-reads it, at
        most once per :data:`TOPIC_LIST_REFRESH_S`. A topic found once stays found. Raises
        :class:`ProductionError` when the list cannot be read within :data:`TOPIC_LIST_TIMEOUT_S`."""
        if topic in self._topics:
            return True
        now = time.monotonic()
        if now - self._topics_listed_at < TOPIC_LIST_REFRESH_S:
            return False
        self._topics_listed_at = now
        self.topic_list_reads += 1
        try:
            metadata = self._metadata_client.list_topics(timeout=TOPIC_LIST_TIMEOUT_S)
        except Exception as exc:
            raise ProductionError(f"cannot check whether topic {topic!r} exists: the cluster's topic list could "
                                  f"not be read: {exc}") from exc
        self._topics = frozenset(name for name, info in metadata.topics.items()
                                 if info.error is None and info.partitions)
        return topic in self._topics

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every sent record is acknowledged; raise if any failed, or if ``timeout`` s passed.

        Without a timeout it waits as long as the producer holds records: while the broker is down or
        unreachable, librdkafka retries them and fails each one only after its ``message.timeout.ms`` (5 minutes
        by default), so an outage shorter than that pauses the stream thread here (nothing is committed
        meanwhile) instead of failing it; :data:`~streaming.runtime.broker_waits.BROKER_WAITS` says so in the log.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with BROKER_WAITS.waiting("a commit waits for the broker to acknowledge the records sent since the last one"):
            while True:
                while (remaining := self.producer.flush(_FLUSH_SLICE_S if deadline is None
                                                        else max(0.0, deadline - time.monotonic()))) > 0:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise ProductionError(f"{remaining} records still unacknowledged after {timeout:.0f} s")
                if not self._failures:
                    return
                self._handle_failures()  # dead letters it writes are flushed in the next round

    def renew_producer(self) -> None:
        """Replace a producer that can send nothing more (fenced, or failed fatally) with a new one."""
        self.producer.renew()
        self.produce = self.producer.produce

    def discard_failures(self) -> None:
        """Forget failed deliveries not handled yet: their transaction was aborted (exactly-once), and the
        records are produced again when their input is re-processed."""
        self._failures.clear()

    def _handle_failures(self) -> None:
        failures, self._failures = self._failures, []
        for error, message in failures:
            topic, partition = message.topic(), message.partition()
            inputs = self._inputs_of(topic)
            failure = ProductionError(f"record to topic {topic!r} partition {partition} failed: {error}{inputs}")
            if error.code() not in RECORD_ERRORS or self._always_fail(topic) or self.errors.fails_on(PRODUCTION):
                raise ProductionError(f"{len(failures)} records failed to reach Kafka; first: topic {topic!r} "
                                      f"partition {partition}: {error}{inputs}")
            self.errors.handle(ErrorContext(PRODUCTION, None, output_topic=topic, output_partition=partition,
                                            output_key=message.key(), output_value=message.value()), failure)

    def close(self) -> None:
        """Flush what is outstanding (best effort) and release the producer's connections."""
        self.producer.close()
