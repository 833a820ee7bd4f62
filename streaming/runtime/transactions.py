"""TransactionalProducer: the exactly-once (``exactly_once_v2``) producer of one stream thread.

As Kafka Streams' EOS-v2 ``StreamsProducer``: one transactional producer per stream thread, whose
``transactional.id`` is ``<application.id>-<instance.name>-<thread index>`` when the instance has a stable
name (``instance.name``), else ``<application.id>-<a random id of this KafkaStreams instance>-<thread index>``.
Everything the thread sends between two commits — outputs, changelog writes, dead letters — belongs to one
transaction, and the input offsets are committed only through it (``send_offsets_to_transaction``, never the
consumer's own commit), so a commit makes all of it visible to ``read_committed`` readers at once, or none of it.

What goes wrong, and what the stream thread does about it (:meth:`StreamThread._recover_transaction`):

* **Fenced** (:class:`~streaming.errors.TaskMigratedError`): another producer with the same transactional
  id initialized after this one (the epoch was bumped: this instance is a zombie), or the broker says this
  producer's epoch is stale, or librdkafka raised a fatal error. Nothing of the open transaction is
  committed. The thread closes its tasks dirty and wipes their state; with ``instance.name`` set, the fencer
  is a newer incarnation of this very instance (same name, so same transactional id), and this thread
  stops rather than fence it back. Without ``instance.name`` no other process shares the id, so the thread
  takes a new producer and rejoins the group, as Kafka Streams does on a ``TaskMigratedException``.
* **Aborted** (:class:`~streaming.errors.TaskCorruptedError`): an abortable error (a failed send, a
  refused offset commit). The transaction is aborted; the thread closes its tasks dirty, wipes their state
  and re-creates them from the last committed offsets (Kafka Streams' ``TaskCorruptedException``).
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from streaming.config import StreamsConfig
from streaming.errors import ProductionError, StreamsError, TaskCorruptedError, TaskMigratedError

log = logging.getLogger(__name__)

INIT_TIMEOUT_S = 30.0
COMMIT_TIMEOUT_S = 60.0
ABORT_TIMEOUT_S = 10.0
#: Error codes that mean another producer with this transactional id took over (or the broker says so), or that
#: the producer hit a fatal error (``_FATAL``: what produce() says once one was raised; measured on a zombie).
FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH,
                          KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, KafkaError._FATAL})
#: Offset commits the group refused because it moved on (KIP-447): the partitions may be someone else's now.
GROUP_MOVED_CODES = frozenset({KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION,
                               KafkaError.REBALANCE_IN_PROGRESS, KafkaError.FENCED_INSTANCE_ID})
#: Delivery reports of records an abort purged: they belonged to the aborted transaction, nothing to report.
PURGED_CODES = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})
#: What a broker without transactions answers ``InitProducerId`` with a transactional id.
UNSUPPORTED_CODES = frozenset({KafkaError._UNSUPPORTED_FEATURE, KafkaError._NOT_IMPLEMENTED,
                               KafkaError.UNSUPPORTED_VERSION, KafkaError.INVALID_REQUEST})


def transactional_id(config: StreamsConfig, thread_index: int, process_id: str) -> str:
    """``<application.id>-<instance.name or process_id>-<thread index>`` (threads count from 1).

    With ``instance.name`` the id survives restarts, so a restarted instance fences its previous incarnation
    (and aborts the transaction it left open); two live instances must never share a name. Without it,
    ``process_id`` is the KafkaStreams instance's random id (Kafka Streams' process id, one per instance, not per
    Python process: two instances of one application in one process would otherwise share transactional ids
    and fence each other in turn)."""
    return f"{config.application_id}-{config['instance.name'] or process_id}-{thread_index}"


def kafka_error(exc: BaseException) -> KafkaError | None:
    """The :class:`KafkaError` behind ``exc``, following ``__cause__``/``__context__``: confluent-kafka raises a
    fatal error from inside a delivery callback as the cause of a ``SystemError``."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 10:
        if isinstance(current, KafkaException) and current.args and isinstance(current.args[0], KafkaError):
            return current.args[0]
        current = current.__cause__ or current.__context__
        seen += 1
    return None


def classify(exc: BaseException, action: str, transactional_id: str) -> StreamsError:
    """What a transactional producer's failure in ``action`` means (see the module doc): fenced or fatal ->
    :class:`TaskMigratedError`; the group moved on or anything abortable -> :class:`TaskCorruptedError`.
    Anything else (a timeout librdkafka could not resolve, an unknown error) is treated as abortable: the
    open transaction is aborted and its tasks rebuilt, which is safe whatever the cause."""
    if isinstance(exc, (TaskMigratedError, TaskCorruptedError)):
        return exc
    error = kafka_error(exc)
    detail = error.str() if error is not None else repr(exc)
    if error is not None and (error.fatal() or error.code() in FENCED_CODES):
        return TaskMigratedError(f"transactional producer {transactional_id!r} was fenced during {action}: "
                                 f"{detail} (another producer with this transactional.id took over, or the broker "
                                 f"expired this one)")
    if error is not None and error.code() in GROUP_MOVED_CODES:
        return TaskMigratedError(f"the consumer group refused the offsets of transaction {transactional_id!r} "
                                 f"({action}): {detail} (the group moved on: the partitions may be another "
                                 f"member's now)")
    return TaskCorruptedError(f"transaction of producer {transactional_id!r} failed during {action} and is "
                              f"aborted: {detail}")


class TransactionalProducer:
    """One transactional confluent-kafka producer; a commit sends the offsets to the transaction and commits it.

    ``begin()`` starts a transaction; ``commit(offsets)`` flushes, adds ``offsets`` with the consumer's group
    metadata (``send_offsets_to_transaction``) and commits. Failures raise :class:`TaskMigratedError` or
    :class:`TaskCorruptedError` (see :func:`classify`), after aborting what can be aborted. ``renew()``
    replaces a fenced producer with a new one (same transactional id: ``init_transactions`` bumps the epoch).
    Records an abort purged are not reported; a record the broker rejected raises :class:`ProductionError` from
    the next ``poll``/``flush`` (it fails the transaction, so no handler can skip it), naming the input records
    it may be the output of (``inputs_of(topic)``: the record collector sets it, see
    :meth:`~streaming.runtime.record_collector.KafkaRecordCollector.name_inputs`). ``on_delivery_error`` is kept
    for the :class:`StreamsProducer` signature: failed deliveries do not reach it.
    """

    def __init__(self, producer_config: dict[str, Any], consumer: Consumer | None,
                 on_delivery_error: Callable[[Any, Any], None], transactional_id: str,
                 bootstrap_servers: str = "") -> None:
        self.transactional_id = transactional_id
        self._config = {**{k: v for k, v in producer_config.items() if k != "delivery.report.only.error"},
                        "transactional.id": transactional_id, "enable.idempotence": "true",
                        "delivery.report.only.error": True, "on_delivery": self._on_delivery}
        self._consumer = consumer
        self._on_delivery_error = on_delivery_error
        self._bootstrap = bootstrap_servers or str(producer_config.get("bootstrap.servers", ""))
        self._in_transaction = False
        self._sent = False  # whether the open transaction has records (an empty one is not committed)
        self._aborting = False
        self._fenced = False  # this producer cannot abort (or do anything) any more: renew() replaces it
        self._closed = False
        self.failure: StreamsError | None = None  # a transactional failure seen in a delivery report
        self.abort_failure: StreamsError | None = None  # why the last abort failed (it names a fencing as such)
        self.inputs_of: Callable[[str], str] = lambda topic: ""
        self.producer = self._initialized_producer()
        self._produce = self.producer.produce

    def _initialized_producer(self) -> Producer:
        producer = Producer(self._config)
        try:
            producer.init_transactions(INIT_TIMEOUT_S)
        except KafkaException as exc:
            error = kafka_error(exc)
            code = error.code() if error is not None else None
            if code in UNSUPPORTED_CODES:
                raise StreamsError(
                    f"processing.guarantee=exactly_once_v2 needs transactions, which the broker at "
                    f"{self._bootstrap} does not support ({error.str()}); use at_least_once or a broker with "
                    f"transactions (Apache Kafka 2.5+)") from None
            if code == KafkaError._TIMED_OUT:
                raise StreamsError(
                    f"processing.guarantee=exactly_once_v2: the broker at {self._bootstrap} found no transaction "
                    f"coordinator for transactional.id {self.transactional_id!r} within {INIT_TIMEOUT_S:.0f} s "
                    f"(transactions not supported or not available: check the broker's transaction state log "
                    f"settings, or use at_least_once)") from None
            raise StreamsError(f"processing.guarantee=exactly_once_v2: cannot initialize the transactional producer "
                               f"{self.transactional_id!r} on {self._bootstrap}: "
                               f"{error.str() if error else exc}") from None
        log.info("transactional producer %r initialized", self.transactional_id)
        return producer

    def _failed(self, exc: BaseException, action: str) -> StreamsError:
        failure = classify(exc, action, self.transactional_id)
        if isinstance(failure, TaskMigratedError):
            self._fenced = True
        return failure

    def _on_delivery(self, error: KafkaError | None, message: Any) -> None:
        if error is None:
            return
        try:
            code, fatal = error.code(), error.fatal()
        except SystemError:  # the producer failed fatally inside this flush: its KafkaException is pending, and
            return           # flush() raises it (see flush)
        if code in PURGED_CODES:  # purged by an abort, or by librdkafka after a fatal error: never a rejection,
            return                # and the transaction fails either way (the abort, or that fatal error)
        if fatal or code in FENCED_CODES:
            self.failure = self.failure or self._failed(KafkaException(error), "a send")
            return
        # A record the broker rejected fails its whole transaction, and re-processing would fail it again: the
        # thread stops (production.exception.handler sees the records the client refuses before sending).
        self.failure = self.failure or ProductionError(
            f"record to topic {message.topic()!r} partition {message.partition()} failed: {error.str()}"
            f"{self.inputs_of(message.topic())}; under processing.guarantee=exactly_once_v2 it fails its "
            f"transaction, so it cannot be skipped or dead-lettered")

    def produce(self, *args: Any, **kwargs: Any) -> None:
        """confluent-kafka's ``produce``; a producer the broker fenced raises :class:`TaskMigratedError`."""
        self._sent = True
        try:
            self._produce(*args, **kwargs)
        except KafkaException as exc:
            error = kafka_error(exc)
            if error is not None and (error.fatal() or error.code() in FENCED_CODES or error.code() == KafkaError._STATE
                                      or error.txn_requires_abort()):
                # "Erroneous state" says only that the transaction failed; why is in a delivery report not served
                # yet (measured: a zombie's in-flight records fail with PRODUCER_FENCED, then produce() says _STATE)
                self._serve_reports()
                raise (self.failure or self._failed(exc, "a send")) from exc
            raise

    def _serve_reports(self) -> None:
        try:
            self.producer.poll(0)
        except (KafkaException, SystemError) as exc:
            self.failure = self.failure or self._failed(exc, "poll")

    @property
    def fenced(self) -> bool:
        """Whether this producer can no longer be used (fenced, fatal, or its transaction could not be aborted):
        :meth:`renew` replaces it."""
        return self._fenced

    def poll(self, timeout: float = 0) -> int:
        try:
            served = self.producer.poll(timeout)
        except (KafkaException, SystemError) as exc:  # a fatal error surfaces from poll (see kafka_error)
            raise self._failed(exc, "poll") from exc
        if self.failure is not None:
            raise self.failure
        return served

    def flush(self, timeout: float) -> int:
        try:
            remaining = self.producer.flush(timeout)
        except (KafkaException, SystemError) as exc:
            if isinstance(self.failure, (TaskMigratedError, TaskCorruptedError)):  # a delivery report said why
                raise self.failure from exc
            raise self._failed(exc, "flush") from exc
        if self.failure is not None:
            raise self.failure
        return remaining

    def begin(self) -> None:
        """Begin the transaction the thread's next sends belong to."""
        if self._in_transaction:
            return
        if self._fenced:
            raise TaskMigratedError(f"transactional producer {self.transactional_id!r} cannot begin a transaction: it "
                                    f"was fenced, or its last transaction could not be aborted")
        try:
            self.producer.begin_transaction()
        except KafkaException as exc:
            raise self._failed(exc, "begin_transaction") from exc
        self._in_transaction = True

    def commit(self, offsets: list[TopicPartition]) -> bool:
        """Add ``offsets`` to the transaction (with the consumer's group metadata, so a zombie member's
        commit is refused) and commit it. Raises :class:`TaskMigratedError` / :class:`TaskCorruptedError`
        after aborting the transaction when it cannot be committed."""
        if not offsets and not self._sent:
            return True  # nothing to commit: the open transaction stays open for the next sends
        if not self._in_transaction:
            self.begin()
        try:
            if self.failure is not None:  # a delivery report said a record of this transaction failed
                raise self.failure
            if offsets and self._consumer is not None:
                self.producer.send_offsets_to_transaction(offsets, self._consumer.consumer_group_metadata(),
                                                          COMMIT_TIMEOUT_S)
            self._commit_transaction()
        except BaseException as exc:
            self._serve_reports()  # a fencing may be known only from a delivery report
            failure = self.failure if isinstance(self.failure, (TaskMigratedError, ProductionError)) \
                else self._failed(exc, "commit")
            self.abort()
            if failure is exc:
                raise
            raise failure from exc
        self._in_transaction = self._sent = False
        return True

    def _commit_transaction(self) -> None:
        """``commit_transaction``, retried while librdkafka says the call may be retried (a timeout)."""
        deadline = time.monotonic() + COMMIT_TIMEOUT_S
        while True:
            try:
                self.producer.commit_transaction(max(1.0, deadline - time.monotonic()))
                return
            except KafkaException as exc:
                error = kafka_error(exc)
                if error is None or not error.retriable() or time.monotonic() >= deadline:
                    raise

    def abort(self) -> None:
        """Abort the open transaction, if any and if the producer still can (best effort: a fenced producer
        cannot, and its transaction is aborted by the producer that fenced it)."""
        if not self._in_transaction:
            return
        had_records = self._sent
        self._in_transaction = self._sent = False
        if self._fenced:  # the producer that fenced this one aborted the transaction; this one can't (measured)
            return
        self._aborting = True
        try:
            self.producer.abort_transaction(ABORT_TIMEOUT_S)
            if had_records:
                log.info("transaction of producer %r aborted", self.transactional_id)
        except (KafkaException, SystemError) as exc:
            # Measured on the embedded broker: a fenced producer's abort waits out its whole timeout. Either way
            # this producer cannot go on (a later call conflicts with the unfinished abort): treat it as fenced.
            self._fenced = True
            self.abort_failure = classify(exc, "abort_transaction", self.transactional_id)
            log.warning("transaction of producer %r could not be aborted by it (%s): the producer that fenced it, "
                        "or the transaction timeout, aborts it; this producer is not used again",
                        self.transactional_id, exc)
        finally:
            try:
                self.producer.poll(0)  # serve the purged records' reports while they are known to be purged
            except (KafkaException, SystemError):
                log.debug("poll after abort failed", exc_info=True)
            self._aborting = False
        self.failure = None

    def renew(self) -> None:
        """Replace a fenced producer with a new one of the same transactional id (``init_transactions`` bumps
        the epoch and aborts what the old one left open)."""
        self.abort()
        self._close_producer()
        self.failure = self.abort_failure = None
        self._fenced = self._closed = False
        self.producer = self._initialized_producer()
        self._produce = self.producer.produce

    def _close_producer(self) -> None:
        """Release the producer. A fenced one is only dropped: its ``close()`` aborts the open transaction first,
        which on the embedded broker never returns for a fenced producer (measured: still blocked after 20 s;
        dropping it takes 10 ms)."""
        if self._closed:
            return
        self._closed = True
        if self._fenced:
            try:
                self.producer.purge()
            except Exception:
                log.debug("purging producer %r failed", self.transactional_id, exc_info=True)
            del self._produce, self.producer  # the last references: librdkafka destroys it without a flush
            return
        try:
            self.producer.purge()
            with warnings.catch_warnings():  # close() aborts an open transaction itself and warns when fenced
                warnings.simplefilter("ignore", RuntimeWarning)
                self.producer.close()
        except Exception:  # a fenced producer: nothing more to report
            log.debug("closing producer %r failed", self.transactional_id, exc_info=True)

    def close(self) -> None:
        """Abort an open transaction (a clean shutdown committed first, so only a failed one has one) and close."""
        self.abort()
        self._close_producer()

