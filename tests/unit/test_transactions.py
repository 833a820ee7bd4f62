"""The transactional producer's error classification and commit sequence, for errors the embedded broker
cannot produce (an unsupported broker, an abortable error, a retriable commit, a stale epoch code).

The fake stands in for confluent-kafka's ``Producer`` only; what the real broker does (commit, abort,
fencing) is covered by tests/integration/test_exactly_once.py.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streaming.config import StreamsConfig
from streaming.errors import ConfigError, ProductionError, StreamsError, TaskCorruptedError, TaskMigratedError
from streaming.runtime import transactions
from streaming.runtime.client_configs import global_consumer_config, restore_consumer_config
from streaming.runtime.record_collector import KafkaRecordCollector
from streaming.runtime.transactions import TransactionalProducer, classify, transactional_id
from streaming.state.caching import CacheBudget, CachingBytesStore
from streaming.state.memory import InMemoryBytesStore

BASE = {"application.id": "app", "bootstrap.servers": "127.0.0.1:9092"}


def kafka_exception(code: int, *, fatal: bool = False, abortable: bool = False, retriable: bool = False) -> KafkaException:
    return KafkaException(KafkaError(code, "broker said no", fatal=fatal, txn_requires_abort=abortable,
                                     retriable=retriable))


class FakeProducer:
    """Records the transactional calls; ``fail`` maps a method name to the exceptions it raises, in turn."""

    instances: ClassVar[list[FakeProducer]] = []
    fail: ClassVar[dict[str, list[BaseException]]] = {}

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.calls: list[str] = []
        self.offsets: list[TopicPartition] = []
        self.reports: list[KafkaError] = []  # delivery reports the next poll serves
        FakeProducer.instances.append(self)

    def _call(self, name: str) -> None:
        self.calls.append(name)
        failures = FakeProducer.fail.get(name)
        if failures:
            raise failures.pop(0)

    def init_transactions(self, timeout: float) -> None:
        self._call("init_transactions")

    def begin_transaction(self) -> None:
        self._call("begin_transaction")

    def produce(self, *args: Any, **kwargs: Any) -> None:
        self._call("produce")

    def send_offsets_to_transaction(self, offsets: list[TopicPartition], metadata: Any, timeout: float) -> None:
        self._call("send_offsets_to_transaction")
        self.offsets = offsets

    def commit_transaction(self, timeout: float) -> None:
        self._call("commit_transaction")

    def abort_transaction(self, timeout: float) -> None:
        self._call("abort_transaction")

    def flush(self, timeout: float) -> int:
        return 0

    def poll(self, timeout: float) -> int:
        reports, self.reports = self.reports, []
        for error in reports:
            self.config["on_delivery"](error, object())
        return len(reports)

    def purge(self) -> None:
        pass

    def close(self) -> None:
        self.calls.append("close")


class FakeConsumer:
    def __init__(self) -> None:
        self.commits = 0

    def consumer_group_metadata(self) -> str:
        return "group-metadata"

    def commit(self, *args: Any, **kwargs: Any) -> None:
        self.commits += 1


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> type[FakeProducer]:
    FakeProducer.instances = []
    FakeProducer.fail = {}
    monkeypatch.setattr(transactions, "Producer", FakeProducer)
    return FakeProducer


def producer(consumer: FakeConsumer | None = None, delivery_errors: list[Any] | None = None) -> TransactionalProducer:
    errors = delivery_errors if delivery_errors is not None else []
    return TransactionalProducer({"bootstrap.servers": "b:9092"}, consumer or FakeConsumer(),  # type: ignore[arg-type]
                                 lambda error, message: errors.append(error), "app-x-1")


OFFSETS = [TopicPartition("in", 0, 42)]


def test_transactional_id_is_stable_with_an_instance_name_and_per_instance_without() -> None:
    assert transactional_id(StreamsConfig({**BASE, "instance.name": "host-7"}), 2, "p1") == "app-host-7-2"
    assert transactional_id(StreamsConfig(BASE), 1, "p1") == "app-p1-1"


def test_two_instances_in_one_process_without_an_instance_name_get_distinct_transactional_ids() -> None:
    """The id was once per Python process: two KafkaStreams of one application in one process shared their
    threads' transactional ids and fenced each other in turn (found by tests/integration/test_exactly_once_threads)."""
    from streaming import KafkaStreams, Serdes, Topology

    topology = Topology().add_source("in", "input", key_serde=Serdes.String(), value_serde=Serdes.String())
    config = StreamsConfig({**BASE, "processing.guarantee": "exactly_once_v2"})
    first, second = KafkaStreams(topology, config), KafkaStreams(topology, config)
    assert first.process_id != second.process_id
    assert transactional_id(config, 1, first.process_id) != transactional_id(config, 1, second.process_id)


@pytest.mark.parametrize(("error", "expected"), [
    (kafka_exception(KafkaError._FENCED, fatal=True), TaskMigratedError),
    (kafka_exception(KafkaError._FENCED, abortable=True), TaskMigratedError),  # measured: send_offsets after fencing
    (kafka_exception(KafkaError.PRODUCER_FENCED), TaskMigratedError),
    (kafka_exception(KafkaError._FATAL), TaskMigratedError),  # measured: produce() after a fatal error
    (kafka_exception(KafkaError.INVALID_PRODUCER_EPOCH, abortable=True), TaskMigratedError),
    (kafka_exception(KafkaError.ILLEGAL_GENERATION, abortable=True), TaskMigratedError),
    (kafka_exception(KafkaError.UNKNOWN_MEMBER_ID, abortable=True), TaskMigratedError),
    (kafka_exception(KafkaError._MSG_TIMED_OUT, abortable=True), TaskCorruptedError),
    (kafka_exception(KafkaError._TIMED_OUT, retriable=True), TaskCorruptedError),
    (RuntimeError("anything else"), TaskCorruptedError),
])
def test_classify(error: BaseException, expected: type[StreamsError]) -> None:
    failure = classify(error, "commit", "app-x-1")
    assert type(failure) is expected
    assert "app-x-1" in str(failure) and "commit" in str(failure)


def test_a_fatal_error_raised_inside_a_delivery_callback_is_found_behind_the_system_error() -> None:
    # confluent-kafka raises a fatal error while serving callbacks as the cause of a SystemError (measured)
    try:
        try:
            raise kafka_exception(KafkaError._FENCED, fatal=True)
        except KafkaException as fatal:
            raise SystemError("<method 'append' of 'list' objects> returned a result with an exception set") from fatal
    except SystemError as exc:
        assert isinstance(classify(exc, "flush", "app-x-1"), TaskMigratedError)


def test_a_broker_without_transactions_fails_at_start_naming_the_guarantee_and_the_broker(
        fake: type[FakeProducer]) -> None:
    fake.fail = {"init_transactions": [kafka_exception(KafkaError._UNSUPPORTED_FEATURE)]}
    with pytest.raises(StreamsError) as raised:
        producer()
    message = str(raised.value)
    assert "processing.guarantee=exactly_once_v2" in message and "b:9092" in message
    assert "does not support" in message and "\n" not in message


def test_commit_sends_the_offsets_to_the_transaction_never_to_the_consumer(fake: type[FakeProducer]) -> None:
    consumer = FakeConsumer()
    txn = producer(consumer)
    txn.begin()
    txn.produce("out", b"v", b"k")
    assert txn.commit(OFFSETS)
    real = fake.instances[0]
    assert real.calls == ["init_transactions", "begin_transaction", "produce", "send_offsets_to_transaction",
                          "commit_transaction"]
    assert real.offsets == OFFSETS and consumer.commits == 0
    assert real.config["transactional.id"] == "app-x-1"


def test_an_empty_transaction_is_not_committed(fake: type[FakeProducer]) -> None:
    txn = producer()
    txn.begin()
    assert txn.commit([])
    assert "commit_transaction" not in fake.instances[0].calls


def test_an_abortable_failure_aborts_and_raises_task_corrupted(fake: type[FakeProducer]) -> None:
    fake.fail = {"send_offsets_to_transaction": [kafka_exception(KafkaError._MSG_TIMED_OUT, abortable=True)]}
    txn = producer()
    txn.begin()
    txn.produce("out", b"v", b"k")
    with pytest.raises(TaskCorruptedError):
        txn.commit(OFFSETS)
    assert fake.instances[0].calls[-1] == "abort_transaction"
    txn.begin()  # the next transaction starts cleanly
    assert fake.instances[0].calls[-1] == "begin_transaction"


def test_a_fenced_commit_raises_task_migrated_without_trying_to_abort(fake: type[FakeProducer]) -> None:
    # measured on the embedded broker: after fencing, abort_transaction waits for its whole timeout
    fake.fail = {"commit_transaction": [kafka_exception(KafkaError.INVALID_PRODUCER_EPOCH, abortable=True)]}
    txn = producer()
    txn.begin()
    txn.produce("out", b"v", b"k")
    with pytest.raises(TaskMigratedError):
        txn.commit(OFFSETS)
    assert "abort_transaction" not in fake.instances[0].calls
    txn.renew()  # a new producer of the same transactional id: init_transactions bumps the epoch
    # the fenced producer is dropped, not closed: close() would abort first, which never returns on the embedded
    # broker for a fenced producer (measured)
    assert len(fake.instances) == 2 and "close" not in fake.instances[0].calls
    assert fake.instances[1].calls == ["init_transactions"]


def test_a_retriable_commit_is_retried(fake: type[FakeProducer]) -> None:
    fake.fail = {"commit_transaction": [kafka_exception(KafkaError._TIMED_OUT, retriable=True)]}
    txn = producer()
    txn.begin()
    txn.produce("out", b"v", b"k")
    assert txn.commit(OFFSETS)
    assert fake.instances[0].calls.count("commit_transaction") == 2


def test_a_send_on_a_fenced_producer_raises_task_migrated(fake: type[FakeProducer]) -> None:
    fake.fail = {"produce": [kafka_exception(KafkaError._FENCED, fatal=True)]}
    txn = producer()
    txn.begin()
    with pytest.raises(TaskMigratedError):
        txn.produce("out", b"v", b"k")


def test_the_record_collector_passes_a_fenced_send_through_unwrapped(fake: type[FakeProducer]) -> None:
    """A fencing is the transaction's failure, not the record's: the collector must not turn it into a
    ProductionError (which production.exception.handler would then take), or the thread fails instead of
    recovering."""
    fake.fail = {"produce": [kafka_exception(KafkaError._FENCED, fatal=True)]}
    txn = producer()
    txn.begin()
    collector = KafkaRecordCollector(lambda on_delivery_error: txn, metadata_client=None)
    with pytest.raises(TaskMigratedError):
        collector.send("out", b"k", b"v", 0, None)


class Message:
    def topic(self) -> str:
        return "out"

    def partition(self) -> int:
        return 3


def test_delivery_reports_purged_by_an_abort_are_dropped_and_fencing_surfaces_at_poll(fake: type[FakeProducer]) -> None:
    delivered: list[Any] = []
    txn = producer(delivery_errors=delivered)
    txn._aborting = True
    txn._on_delivery(KafkaError(KafkaError._PURGE_QUEUE), Message())
    txn._aborting = False
    txn.poll(0)
    txn._on_delivery(KafkaError(KafkaError._FENCED, fatal=True), Message())
    with pytest.raises(TaskMigratedError):
        txn.poll(0)
    assert delivered == []


def test_a_record_purged_after_a_fatal_error_is_no_rejection_and_the_abort_names_the_fencing(
        fake: type[FakeProducer]) -> None:
    # measured on the embedded broker: a producer fenced inside flush() has its queue purged ("Purged in queue", no
    # abort of ours), and confluent-kafka's flush then raises a bare SystemError; the abort names the fencing
    class Flushing(FakeProducer):
        def flush(self, timeout: float) -> int:
            self.config["on_delivery"](KafkaError(KafkaError._PURGE_QUEUE), Message())
            raise SystemError("<method 'flush' of 'cimpl.Producer' objects> returned NULL without setting an exception")

    transactions.Producer = Flushing  # type: ignore[misc]  # the fixture's monkeypatch restores it
    fake.fail = {"abort_transaction": [kafka_exception(KafkaError._FENCED, fatal=True)]}
    txn = producer()
    txn.begin()
    txn.produce("out", b"v", b"k")
    with pytest.raises(TaskCorruptedError, match="failed during flush"):  # the flush alone cannot say why
        txn.flush(1)
    assert txn.failure is None  # the purged record is not taken for a record the broker rejected
    txn.abort()  # what the stream thread's recovery does next
    assert txn.fenced and isinstance(txn.abort_failure, TaskMigratedError)
    assert "was fenced during abort_transaction" in str(txn.abort_failure)


def test_a_record_the_broker_rejects_fails_the_transaction_and_stops_the_thread(fake: type[FakeProducer]) -> None:
    """Not TaskCorruptedError: re-processing would fail the same record again, for ever. The error names the
    input records the rejected one may come from (what the stream thread's tasks processed in the transaction)."""
    txn = producer()
    collector = KafkaRecordCollector(lambda on_delivery_error: txn, metadata_client=None)
    collector.name_inputs(lambda topic: f" (output of one of {topic}'s inputs: task 0_0: topic 'in' offsets 40-41)")
    txn.begin()
    txn.produce("out", b"v", b"k")
    txn._on_delivery(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), Message())
    with pytest.raises(ProductionError, match=r"topic 'out' partition 3 failed: .* \(output of one of out's inputs: "
                                              r"task 0_0: topic 'in' offsets 40-41\); under .*exactly_once_v2"):
        txn.commit(OFFSETS)
    assert fake.instances[0].calls[-1] == "abort_transaction"


def test_consumers_read_committed_under_exactly_once_and_uncommitted_otherwise() -> None:
    eos = StreamsConfig({**BASE, "processing.guarantee": "exactly_once_v2"})
    alos = StreamsConfig(BASE)
    for config, level in ((eos, "read_committed"), (alos, "read_uncommitted")):
        consumer = config.consumer_config()
        assert consumer["isolation.level"] == level
        assert restore_consumer_config(consumer)["isolation.level"] == level
        assert global_consumer_config(consumer, "app")["isolation.level"] == level


@pytest.mark.parametrize("key", ["producer.transactional.id", "producer.enable.idempotence",
                                 "consumer.isolation.level"])
def test_settings_that_break_exactly_once_are_refused_naming_the_key(key: str) -> None:
    value = {"producer.transactional.id": "mine", "producer.enable.idempotence": "false",
             "consumer.isolation.level": "read_uncommitted"}[key]
    with pytest.raises(ConfigError, match=f"'{key}'.*exactly_once_v2"):
        StreamsConfig({**BASE, "processing.guarantee": "exactly_once_v2", key: value})


def test_a_send_in_an_erroneous_state_is_fenced_when_a_pending_delivery_report_says_so(fake: type[FakeProducer]) -> None:
    # measured on the embedded broker: a zombie's in-flight records fail with PRODUCER_FENCED (not fatal), and
    # its next produce() only says "Erroneous state"
    fake.fail = {"produce": [kafka_exception(KafkaError._STATE)]}
    txn = producer()
    txn.begin()
    fake.instances[0].reports = [KafkaError(KafkaError.PRODUCER_FENCED)]
    with pytest.raises(TaskMigratedError):
        txn.produce("out", b"v", b"k")
    assert txn.fenced


def test_a_transaction_that_cannot_be_aborted_leaves_a_producer_that_is_not_used_again(fake: type[FakeProducer]) -> None:
    # measured on the embedded broker: a fenced producer's abort_transaction waits out its timeout
    fake.fail = {"commit_transaction": [kafka_exception(KafkaError._MSG_TIMED_OUT, abortable=True)],
                 "abort_transaction": [kafka_exception(KafkaError._TIMED_OUT, retriable=True)]}
    txn = producer()
    txn.begin()
    txn.produce("out", b"v", b"k")
    with pytest.raises(TaskCorruptedError):
        txn.commit(OFFSETS)
    assert txn.fenced
    with pytest.raises(TaskMigratedError):
        txn.begin()
    txn.renew()
    assert not txn.fenced
    txn.begin()
    assert fake.instances[1].calls == ["init_transactions", "begin_transaction"]


def test_a_dirty_close_drops_the_cache_and_gives_its_bytes_back_to_the_thread_s_budget() -> None:
    """After an aborted transaction the tasks close dirty: their cached writes must neither reach the store
    nor keep holding the stream thread's cache budget (the re-created tasks share it)."""
    budget = CacheBudget(1 << 20)
    inner = InMemoryBytesStore("counts")
    inner.open(None)
    cached = CachingBytesStore(inner, budget)
    cached.put(b"k", b"uncommitted", 1)
    assert budget.used > 0
    cached.close()
    assert budget.used == 0 and len(cached.cache) == 0


def test_an_abort_inside_a_revocation_re_creates_no_task_for_the_partitions_it_gave_up(
        fake: type[FakeProducer], tmp_path: Any) -> None:
    """An abortable failure raised inside a revocation (its commit) reaches the stream thread once the consumer
    gave the revoked partitions up. The recovery used to re-create their tasks and seek on them, which failed
    ("Erroneous state": not assigned) and killed the thread (found by tests/integration/test_exactly_once_threads).
    Now it aborts, wipes, and leaves the partitions to the assignment that ends the rebalance. (A real consumer
    with nothing assigned; the fake producer only stands in for the broker's transactions.)"""
    from streaming import Serdes, Topology
    from streaming.runtime.stream_thread import StreamThread

    topology = (Topology().add_source("in", "input", key_serde=Serdes.String(), value_serde=Serdes.String())
                .add_sink("out", "output", "in", key_serde=Serdes.String(), value_serde=Serdes.String())).bind("app")
    config = StreamsConfig({**BASE, "processing.guarantee": "exactly_once_v2", "instance.name": "x",
                            "state.dir": str(tmp_path)})
    states: list[str] = []
    thread = StreamThread("app-StreamThread-1", topology, config, lambda _, state: states.append(state),
                          process_id="p")
    thread.tasks._stream_times = None  # no group coordinator here to read the tasks' committed stream time from
    try:
        thread.tasks.assign([("input", 0), ("input", 1)])
        thread.collector.producer.begin()
        thread._waiting_since = 0.0  # what the revocation sets: the thread waits for its next assignment
        assert thread.consumer.assignment() == []
        thread._recover_transaction(TaskCorruptedError("the revocation's commit failed"))
        assert thread.tasks.tasks == {} and thread.tasks.task_of == {}
        assert states == ["REBALANCING"]
        assert fake.instances[0].calls == ["init_transactions", "begin_transaction", "abort_transaction",
                                           "begin_transaction"]
    finally:
        thread.discard()
