"""StreamsProducer: the producer under the record collector, and how a commit makes its work durable.

As Kafka Streams' ``StreamsProducer``: the record collector sends through it; a commit asks it to
:meth:`~StreamsProducer.commit` the consumed offsets. Under ``at_least_once`` (:class:`AtLeastOnceProducer`)
that is "wait until every sent record is acknowledged, then commit the offsets to the consumer group".
The transactional producer of ``exactly_once_v2`` (:class:`~streaming.runtime.transactions.TransactionalProducer`)
implements the same two methods as "begin a transaction" and "send the offsets to the transaction and commit
it" — the runtime's commit path (:mod:`streaming.runtime.checkpoint`) is the same for both.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from streaming.config import StreamsConfig
from streaming.errors import ProducerFatalError
from streaming.runtime.broker_waits import BROKER_WAITS
from streaming.runtime.transactions import TransactionalProducer, kafka_error, transactional_id

log = logging.getLogger(__name__)


#: Offset commit failures that mean no group coordinator answered (a broker down or unreachable), not a rebalance.
COORDINATOR_UNREACHABLE = frozenset({
    KafkaError._WAIT_COORD, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT,
    KafkaError.REQUEST_TIMED_OUT, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR})


class StreamsProducer(Protocol):
    """What the record collector and the commit path need of a producer."""

    #: confluent-kafka's ``Producer.produce`` (the collector's hot path calls it directly).
    produce: Callable[..., None]

    def poll(self, timeout: float = 0) -> int:
        """Serve delivery reports; returns how many were served."""
        ...

    def flush(self, timeout: float) -> int:
        """Wait up to ``timeout`` s for outstanding records; returns how many are still outstanding."""
        ...

    def begin(self) -> None:
        """Start the unit of work the next sends belong to (a transaction; nothing under at-least-once)."""
        ...

    def commit(self, offsets: list[TopicPartition]) -> bool:
        """Make everything sent since :meth:`begin` durable together with ``offsets`` (the next offsets to
        read, per input partition). The caller flushed first (:meth:`RecordCollector.flush`, the commit path's
        step 2), so every record sent is acknowledged or handled. False if the group moved on (rebalance) and the
        offsets were refused (at-least-once); a transactional producer raises TaskMigratedError /
        TaskCorruptedError instead."""
        ...

    def renew(self) -> None:
        """Replace a producer that can send nothing more (fenced, or failed fatally) with a new one."""
        ...

    def close(self) -> None:
        """Flush what is outstanding (best effort) and release the connections."""
        ...


class AtLeastOnceProducer:
    """One idempotent confluent-kafka producer; a commit flushes it, then commits the offsets to the group.

    Only failed deliveries call back (``delivery.report.only.error``), so the hot path pays nothing per
    record for acknowledgements; ``on_delivery_error(error, message)`` receives them. A fatal error of the
    idempotent producer surfaces from :meth:`poll` and :meth:`flush` as :class:`ProducerFatalError`, and
    :meth:`renew` replaces the producer.
    """

    def __init__(self, producer_config: dict[str, Any], consumer: Consumer | None,
                 on_delivery_error: Callable[[Any, Any], None]) -> None:
        self._consumer = consumer
        self._config = {**producer_config, "delivery.report.only.error": True, "on_delivery": on_delivery_error}
        self.producer = Producer(self._config)
        self.produce = self.producer.produce

    def poll(self, timeout: float = 0) -> int:
        try:
            return self.producer.poll(timeout)
        except (KafkaException, SystemError) as exc:
            fatal = fatal_error(exc, "poll")
            if fatal is None:
                raise
            raise fatal from exc

    def flush(self, timeout: float) -> int:
        try:
            return self.producer.flush(timeout)
        except (KafkaException, SystemError) as exc:
            fatal = fatal_error(exc, "flush")
            if fatal is None:
                raise
            raise fatal from exc

    def renew(self) -> None:
        """Replace a producer that failed fatally with a new one (a new producer id, so new sequence numbers).
        What the old one still held is dropped unsent: its input is re-processed from the last commit."""
        old = self.producer
        try:
            old.purge()
        except Exception:  # a fatal producer may refuse even that: it is dropped either way
            log.debug("purging the failed producer failed", exc_info=True)
        self.producer = Producer(self._config)
        self.produce = self.producer.produce

    def begin(self) -> None:
        """Nothing to begin: at-least-once sends are not grouped."""

    def commit(self, offsets: list[TopicPartition]) -> bool:
        """Commit ``offsets`` synchronously to the consumer group. The commit path flushed the record collector
        first (every record acknowledged or handled), so the offsets never pass an output that was lost."""
        if not offsets or self._consumer is None:
            return True
        try:
            with BROKER_WAITS.waiting("an offset commit waits for the group coordinator"):
                self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            partitions = sorted({(tp.topic, tp.partition) for tp in offsets})
            if exc.args[0].code() in COORDINATOR_UNREACHABLE:
                # The offsets stay uncommitted in the tasks: the next commit carries them (at-least-once).
                log.warning("offset commit failed, no group coordinator answered (broker down or unreachable?): "
                            "%s; partitions %s are committed with the next commit, or re-read from the last one if "
                            "the group moves them meanwhile", exc.args[0].str(), partitions)
                return False
            # The group moved on (rebalance, fenced generation): the new owner re-reads from the last
            # committed offset. Outputs were acknowledged, so nothing is lost (at-least-once).
            log.warning("offset commit failed; partitions %s will be re-read from the last commit: %s",
                        partitions, exc)
            return False
        return True

    def close(self) -> None:
        try:
            self.producer.flush(10)
            self.producer.close()
        except Exception:  # closing after a failure: nothing more to report
            log.debug("producer close failed", exc_info=True)


def fatal_error(exc: BaseException, action: str) -> ProducerFatalError | None:
    """:class:`ProducerFatalError` if ``exc`` is the idempotent producer's fatal error (confluent-kafka raises it
    from a callback as the cause of a ``SystemError``; ``produce()`` afterwards as ``_FATAL``), else None."""
    error = kafka_error(exc)
    if error is None or not (error.fatal() or error.code() == KafkaError._FATAL):
        return None
    return ProducerFatalError(f"the producer failed fatally during {action}: {error.str()}; its unacknowledged "
                              f"records are dropped and re-produced from the last committed offsets")


def streams_producer(config: StreamsConfig, consumer: Consumer | None,
                     on_delivery_error: Callable[[Any, Any], None], thread_index: int,
                     process_id: str) -> StreamsProducer:
    """The producer ``processing.guarantee`` asks for: at-least-once, or under ``exactly_once_v2`` the
    transactional producer of stream thread ``thread_index`` (counted from 1) of the KafkaStreams instance
    ``process_id``: both name its transactional id (:func:`transactional_id`)."""
    if config.exactly_once:
        if not config["instance.name"] and thread_index == 1:
            log.warning("processing.guarantee=exactly_once_v2 without instance.name: a restart of this instance "
                        "cannot abort the transactions it leaves open when it dies, so read_committed readers of "
                        "its partitions wait for transaction.timeout.ms (on the embedded broker, which never times "
                        "transactions out: until a producer with the dead one's id initializes). Set "
                        "instance.name to a name unique per live instance.")
        return TransactionalProducer(config.producer_config(), consumer, on_delivery_error,
                                     transactional_id(config, thread_index, process_id), config["bootstrap.servers"])
    return AtLeastOnceProducer(config.producer_config(), consumer, on_delivery_error)
