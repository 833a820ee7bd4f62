"""Exceptions raised by Brook. Every message names what was wrong and where."""

from __future__ import annotations


class StreamsError(Exception):
    """Base class of Brook's errors."""


class ConfigError(StreamsError):
    """A configuration key is unknown or its value is invalid (raised at construction)."""


class TopologyError(StreamsError):
    """The topology is invalid: a duplicate or missing node or store, a bad connection."""


class MissingSourceTopicError(StreamsError):
    """A source (or sink) topic the topology needs does not exist on the cluster."""


class CoPartitioningError(StreamsError):
    """Topics that must be co-partitioned (read by one sub-topology, or joined) have different partition
    counts; the message names the join (if one), both topics and both counts."""


class RecordError(StreamsError):
    """A record failed; ``topic``, ``partition`` and ``offset`` say which one (None: it had no input record,
    such as a punctuator's)."""

    def __init__(self, message: str, topic: str | None, partition: int | None, offset: int | None) -> None:
        where = "no input record" if topic is None else f"topic={topic}, partition={partition}, offset={offset}"
        super().__init__(f"{message} ({where})")
        self.topic = topic
        self.partition = partition
        self.offset = offset


class DeserializationError(RecordError):
    """A record's key or value could not be read by its serde."""


class ProcessingError(RecordError):
    """User code (a processor, predicate or mapper) raised while processing a record."""


class DecryptionError(StreamsError):
    """An encrypted field could not be decrypted (:mod:`streaming.encryption`): its key id is not in the keyring,
    the key held under that id is the wrong one, or the value was altered, moved or is not in the wire form.
    ``key_id`` and ``field`` say which (None when unknown); the message names both and never holds a key or the
    value. From a source serde it is a deserialization error; from ``map_values``, a processing error."""

    def __init__(self, message: str, key_id: str | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.key_id = key_id
        self.field = field

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self), self.key_id, self.field))


class ProductionError(StreamsError):
    """A record could not be serialized or written to its output topic."""


class TaskMigratedError(StreamsError):
    """The task's partitions were lost to another instance: its transactional producer was fenced, or the
    group refused its offsets (Kafka Streams' TaskMigratedException). Its open transaction is not committed."""


class ProducerFatalError(TaskMigratedError):
    """At-least-once: the idempotent producer failed fatally (librdkafka; e.g. its sequence numbers fell out of
    step with a restarted broker: ``OUT_OF_ORDER_SEQUENCE_NUMBER``) and can send nothing more. As Kafka Streams
    treats ``OutOfOrderSequenceException`` (``RecordCollectorImpl.recordSendError``: a TaskMigratedException), the
    thread closes its tasks dirty, takes a new producer and re-processes from the last committed offsets."""


class TaskCorruptedError(StreamsError):
    """Exactly-once: a transaction failed and was aborted, so the tasks' local state holds writes that never
    became visible; they are closed dirty, wiped and restored (Kafka Streams' TaskCorruptedException)."""


class InvalidStateStoreError(StreamsError):
    """A state store cannot be queried right now: the instance is rebalancing or restoring, not running,
    or the store's task moved away during the query (Kafka Streams' InvalidStateStoreException).
    Retrying after the instance is RUNNING again usually succeeds."""


class UnknownStateStoreError(StreamsError):
    """No state store of that name exists in the topology (the message lists the known stores).
    Not retriable, unlike :class:`InvalidStateStoreError`."""


class StateDirectoryLockedError(StreamsError):
    """Another process (or another instance in this process) holds the lock of the state directory
    ``<state.dir>/<application.id>``: each running instance of an app needs a ``state.dir`` of its own."""


class ChangelogMissingError(StreamsError):
    """Local state (its checkpoint) or a snapshot claims changelog offsets the changelog does not have: the topic
    was recreated (an application reset, a broker that lost its storage) or truncated. ``summary`` says so in one
    short sentence naming the store, the task and the changelog partition (the message adds the why and the fix);
    ``app_dir`` is the application's local state directory, what deleting the old local state removes."""

    def __init__(self, message: str, summary: str, app_dir: str | None) -> None:
        super().__init__(message)
        self.summary = summary
        self.app_dir = app_dir

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self), self.summary, self.app_dir))


class TaskTimeoutError(StreamsError):
    """A task made no progress for ``task.timeout.ms``: what it waits for from the broker (its committed offsets,
    the end of its stream-time partition, a changelog's end) kept failing (Kafka Streams' ``TimeoutException``
    wrapped in a ``StreamsException``). The message names the task, the topic and partition, and how long it
    waited; ``task_id`` says which task."""

    def __init__(self, message: str, task_id: str) -> None:
        super().__init__(message)
        self.task_id = task_id
