"""StreamTask: one partition of one sub-topology — its processors, stores, buffers and offsets."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any

from streaming.config import StreamsConfig
from streaming.errors import (
    DeserializationError,
    ProcessingError,
    ProductionError,
    RecordError,
    StreamsError,
    TaskCorruptedError,
    TaskMigratedError,
    TopologyError,
)
from streaming.processor.api import Cancellable, ObservedStreamTime, PunctuationType, Record, RecordContext, T
from streaming.runtime.context import NodeContext, fan_out
from streaming.runtime.dynamic_sink import reserved_topics, topic_name_problem
from streaming.runtime.error_handlers import (
    DESERIALIZATION,
    PROCESSING,
    PRODUCTION,
    ErrorContext,
    RecordErrorHandlers,
    fail_always,
)
from streaming.runtime.external_sinks import ExternalSink, flush_all
from streaming.runtime.partition_group import Buffered, PartitionGroup
from streaming.runtime.punctuation import PunctuationQueue, PunctuationSchedule
from streaming.runtime.record_collector import UNASSIGNED, RecordCollector
from streaming.runtime.record_source import RecordSource, output_of, record_source_of
from streaming.runtime.state_manager import ProcessorStateManager
from streaming.runtime.stream_time import encode_offset_metadata, encode_record
from streaming.state.bytes_store import FlushedUpdate, StoreContext
from streaming.state.caching import CacheBudget
from streaming.state.changelogging import ChangeLogger
from streaming.timestamps import is_record_time
from streaming.topology.nodes import Emit, ProcessorNodeDef, SinkNodeDef, SourceNodeDef, extractor_name
from streaming.topology.topology import Subtopology, Topology
from streaming.windows.serdes import WindowedSerde

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
#: What a cached write keeps of its input record (:meth:`StreamTask._record_source`): topic, partition, offset and
#: timestamp (epoch ms) — with the entry's headers and the task, the :class:`RecordSource` a flush forwards it with.
CachedSource = tuple[str, int, int, int]


def task_id_of(subtopology: int, partition: int) -> str:
    """Kafka Streams' task id: ``<subtopology>_<partition>``."""
    return f"{subtopology}_{partition}"


class _Source:
    """A source topic's decoding: deserializers, timestamp extractor and the first node's function."""

    __slots__ = ("node", "key_of_bytes", "key_of_null", "value_of_bytes", "value_of_null", "extractor", "emit")

    def __init__(self, node: SourceNodeDef, config: StreamsConfig, emit: Emit) -> None:
        self.node = node.name
        key_serde = node.key_serde or config.default_key_serde
        value_serde = node.value_serde or config.default_value_serde
        # Bytes that are not None go to the serde's not_none_deserializer() (a C function for the built-in serdes),
        # None to its deserialize(): the same results as deserialize() alone, one Python call fewer per record.
        self.key_of_bytes, self.key_of_null = key_serde.not_none_deserializer(), key_serde.deserialize
        self.value_of_bytes, self.value_of_null = value_serde.not_none_deserializer(), value_serde.deserialize
        extractor = node.timestamp_extractor or config.default_timestamp_extractor
        self.extractor = None if is_record_time(extractor) else extractor
        self.emit = emit


class StreamTask:
    """Runs one sub-topology for one partition number, the same way in production and the test driver.

    The stream thread (or the test driver) hands it messages; the task deserializes them, extracts
    timestamps, advances stream time (the highest timestamp seen), calls the sub-topology's nodes
    in-process, and remembers the next offset to commit per partition. ``prepare_commit`` flushes the
    stores; the caller commits the returned offsets only after the producer acknowledged everything.
    """

    def __init__(self, subtopology: Subtopology, partition: int, topology: Topology, config: StreamsConfig,
                 collector: RecordCollector, clock: Callable[[], int],
                 input_partitions: list[TopicPartition] | None = None,
                 cache_budget: CacheBudget | None = None, errors: RecordErrorHandlers | None = None) -> None:
        self.id = task_id_of(subtopology.id, partition)
        self.subtopology = subtopology
        self.partition = partition
        self.application_id = config.application_id
        self.config = config
        self.clock = clock
        self.partitions: list[TopicPartition] = input_partitions or [(t, partition) for t in subtopology.source_topics]
        self.stream_time = -1
        # Where this task keeps its partition times at each commit besides the offset metadata (set by the
        # runtime for tasks with logged stores: streaming.runtime.stream_time); None: offset metadata only.
        self.stream_time_topic: str | None = None
        self._written_times: dict[TopicPartition, int] = {}
        # The times of the task's time-driven nodes (observed_stream_time), what the last commit recorded of them,
        # and what was last written to the stream-time topic; a node with no recorded time starts from the stream
        # time the task started from.
        self._observed: dict[str, ObservedStreamTime] = {}
        self._recovered_observed: dict[str, int] = {}
        self._initial_stream_time = -1
        self._written_observed: dict[str, int] = {}
        self.dropped_records = 0  # records DSL operators skipped on purpose (null keys or values, late records)
        self.late_records = 0  # of those, records for windows already closed
        # The record being processed: an input message, the RecordSource of a cache entry a flush forwards, or None
        # (a punctuation: then ``punctuating`` names the punctuating processor).
        self.current: Any = None
        self.current_timestamp = -1
        self.punctuating: str | None = None
        self._source_message: Any = None  # the record _source was taken from
        self._source: CachedSource | None = None
        self.commit_requested = False
        self.consumed: dict[TopicPartition, int] = {}  # next offset to commit, per partition
        self._committed: dict[TopicPartition, int] = {}
        self._stream_punctuations = PunctuationQueue()
        self._wall_punctuations = PunctuationQueue()
        # Why wall-clock punctuators cannot run here (batch reprocessing has no wall clock), or None: they can.
        self.wall_clock_refused: str | None = None
        self._collector = collector
        self._topology = topology
        self.generations = topology.generations  # context.topic() names the logical topic
        self._processors: list[tuple[str, Any]] = []
        self.sink_topics = set(subtopology.sink_topics)  # fixed topics; a dynamic sink may write any output topic
        self.has_dynamic_sinks = bool(subtopology.dynamic_sinks)
        self._emits: dict[str, Emit] = {}
        self._sources: dict[str, _Source] = {}
        self.group: PartitionGroup | None = None
        if len(self.partitions) > 1:
            self.group = PartitionGroup(self.partitions, config["max.task.idle.ms"])
        self.initialized = False  # processors are built after the stores are restored
        self.pending: list[Any] = []  # input that arrived before the task could process it
        # Single-partition tasks: polled runs of messages not processed yet (see buffer / process_next).
        self._backlog: deque[list[Any]] = deque()
        self._backlog_start = 0  # index in _backlog[0] of its first unprocessed message
        self._backlog_records = 0
        self.last_processed: Any = None  # the last input message processed (for latency sampling)
        self.state = ProcessorStateManager(config["state.dir"], self.application_id, self.id, partition,
                                           topology.generations)
        self.stores: dict[str, Any] = {}
        self.global_stores: dict[str, Any] = topology.global_state_stores  # read-only views, shared
        self._cache_budget = cache_budget
        self._errors = errors or fail_always()
        self._skipped: dict[TopicPartition, list[int]] = {}  # skipped offsets not buffered (see _skip_unbuffered)
        # Destinations outside Kafka flushed at each commit before its offsets (streaming.runtime.external_sinks);
        # sinks_blocked: the last flush of one of them failed, so the task's offsets wait and its input is paused.
        self.external_sinks: list[ExternalSink] = []
        self.sinks_blocked = False

    # -- construction ------------------------------------------------------------------------------------
    def open_stores(self) -> None:
        """Open the task's stores in its state directory, which the caller holds (no other task of this
        instance uses it): read the checkpoint, wipe persistent stores it does not vouch for, open."""
        try:
            self.state.load_checkpoint()
            self._open_stores(self._cache_budget)
        except Exception:
            self.close()
            raise

    def _open_stores(self, cache_budget: CacheBudget | None) -> None:
        builders = self._topology.store_builders
        # In node order, which is topological: a commit flushes the stores in this order, so what an
        # upstream store's cache forwards on its flush reaches a downstream store before that one flushes.
        ordered = dict.fromkeys(store for node in self.subtopology.nodes if isinstance(node, ProcessorNodeDef)
                                for store in node.stores)
        for name in ordered:
            builder = builders[name]
            store = builder.build()
            self.state.prepare_store_dir(name, store.persistent, builder.logging_enabled)
            store.init(StoreContext(
                self.application_id, self.id, self.state.store_dir(name), self.config.default_key_serde,
                self.config.default_value_serde, changelogger=self._changelogger,
                timestamp=self._current_timestamp, cache_budget=cache_budget, register=self.state.register,
                record_source=self._record_source, forward_flushed=partial(self._forward_flushed, name)))
            self.stores[name] = store

    def _changelogger(self, store: str) -> ChangeLogger:
        return ChangeLogger(self._collector, self._topology.generations.changelog(self.application_id, store),
                            self.partition)

    def _current_timestamp(self) -> int:
        return self.current_timestamp

    def _record_source(self) -> CachedSource | None:
        """What a cached write keeps of the record being processed: its topic, partition, offset and timestamp (as
        processed: Kafka Streams' record context; taken once per record, when first asked for; no key or value
        bytes). None in a punctuation."""
        current = self.current
        if current is None:
            return None
        if current is not self._source_message:
            self._source_message = current
            self._source = (current.topic(), current.partition(), current.offset(), self.current_timestamp)
        return self._source

    def initialize_topology(self) -> None:
        """Build and ``init`` the processors (after the stores are restored: ``init`` may read them)."""
        try:
            for node in self.subtopology.nodes:
                if isinstance(node, SourceNodeDef):
                    emit = fan_out([self._build(child, self._topology) for child in node.children])
                    for topic in node.topics:
                        self._sources[topic] = _Source(node, self.config, emit)
        except Exception:
            self.close()
            raise
        self.initialized = True

    def _build(self, name: str, topology: Topology) -> Emit:
        """The function that runs node ``name`` (children are built first)."""
        if name in self._emits:
            return self._emits[name]
        node = topology.node(name)
        if isinstance(node, SinkNodeDef):
            emit = self._sink(node)
        elif isinstance(node, ProcessorNodeDef):
            children = {child: self._build(child, topology) for child in node.children}
            context = NodeContext(self, name, children, node.stores)
            if node.operator is not None:
                emit = node.operator.compile(children, context)
            else:
                emit = self._processor(node, context)
        else:
            raise TopologyError(f"node {name!r} cannot be a child: it is a source")
        self._emits[name] = emit
        return emit

    def _processor(self, node: ProcessorNodeDef, context: NodeContext) -> Emit:
        assert node.supplier is not None
        processor = node.supplier()
        if not callable(getattr(processor, "process", None)):
            raise TopologyError(f"the supplier of processor {node.name!r} returned {processor!r}, "
                                f"which has no process(record) method")
        processor.init(context)
        self._processors.append((node.name, processor))
        process = processor.process

        def emit(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            process(Record(key, value, timestamp, headers))
        return emit

    def _sink(self, node: SinkNodeDef) -> Emit:
        """The sink's function: serialize (a value that is not None through the serde's ``not_none_serializer()``, see
        :class:`~streaming.serdes.Serde`), choose the partition, send. With a Kafka record collector it calls the
        producer's ``produce`` itself (one Python call fewer per record) and hands a failure to the collector's
        ``send_failed``, which does what ``send`` would."""
        key_serde = node.key_serde or self.config.default_key_serde
        if isinstance(key_serde, WindowedSerde):  # a windowed table's keys around the default key serde
            key_serde = key_serde.with_default_inner(self.config.default_key_serde)
        value_serde = node.value_serde or self.config.default_value_serde
        if node.topic_extractor is not None:
            return self._dynamic_sink(node, key_serde.serialize, value_serde.serialize)
        key_of, key_of_null = key_serde.not_none_serializer(), key_serde.serialize
        value_of, value_of_null = value_serde.not_none_serializer(), value_serde.serialize
        collector = self._collector
        send = collector.send
        send_failed = getattr(collector, "send_failed", None)  # None: a collector without produce (test driver)
        topic = node.topic
        partitioner = node.partitioner

        def emit(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            try:
                key_bytes = key_of(key) if key is not None else key_of_null(key)
                value_bytes = value_of(value) if value is not None else value_of_null(value)
            except Exception as exc:
                raise self._sink_error(node, key, value, exc) from exc
            partition = UNASSIGNED
            if partitioner is not None:
                chosen = partitioner(topic, key, value, collector.partition_count(topic))
                if chosen is not None:
                    partition = chosen
            try:
                if send_failed is None:
                    send(topic, key_bytes, value_bytes, timestamp, headers, partition)
                else:
                    # By position, as KafkaRecordCollector.send: the timestamp is produce()'s seventh argument.
                    try:
                        if headers is None:
                            collector.produce(topic, value_bytes, key_bytes, partition, None, None, timestamp)
                        else:
                            collector.produce(topic, value_bytes, key_bytes, partition, None, None, timestamp,
                                              headers)
                    except Exception as exc:  # noqa: BLE001 - send_failed raises all but a full queue
                        send_failed(exc, topic, key_bytes, value_bytes, timestamp, headers, partition)
            except ProductionError as exc:  # the producer refused the record (e.g. larger than message.max.bytes)
                self._errors.handle(ErrorContext.of_message(
                    PRODUCTION, self.id, self.current, self.current_timestamp, output_topic=topic,
                    output_partition=partition, output_key=key_bytes, output_value=value_bytes),
                    self._refused(exc))
        return emit

    def _dynamic_sink(self, node: SinkNodeDef, serialize_key: Callable[[Any], bytes | None],
                      serialize_value: Callable[[Any], bytes | None]) -> Emit:
        """A sink whose topic ``node.topic_extractor(key, value, record_context)`` chooses per record: the extractor
        raising is a processing error; a chosen topic that is no valid name, is one the application reads or owns,
        or that the cluster does not have is a production error, handled before anything is sent
        (:mod:`streaming.runtime.dynamic_sink`). A topic that passed is not checked again."""
        extractor = node.topic_extractor
        assert extractor is not None
        partitioner = node.partitioner
        collector = self._collector
        send = collector.send
        logical = self.generations.logical
        reserved = reserved_topics(self._topology, self.application_id)
        checked: set[str] = set()

        def emit(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            current = self.current
            shown = headers if headers is not None else []
            context = RecordContext(None, None, None, timestamp, shown) if current is None else \
                RecordContext(logical(current.topic()), current.partition(), current.offset(), timestamp, shown)
            try:
                topic = extractor(key, value, context)
            except Exception as exc:  # user code may raise anything: a processing error
                where = (None,) * 3 if current is None else (current.topic(), current.partition(), current.offset())
                raise ProcessingError(f"task {self.id}: sink {node.name!r}: topic name extractor "
                                      f"{extractor_name(extractor)} raised for key {key!r}: {exc!r}", *where) from exc
            try:
                key_bytes = serialize_key(key)
                value_bytes = serialize_value(value)
            except Exception as exc:
                raise self._sink_error(node, key, value, exc, topic) from exc
            if topic.__class__ is not str or topic not in checked:
                problem = self._dynamic_topic_problem(topic, reserved)
                if problem is not None:
                    source = " (no input record)" if current is None else output_of(current, self.id)
                    self._errors.handle(ErrorContext.of_message(
                        PRODUCTION, self.id, current, self.current_timestamp,
                        output_topic=topic if isinstance(topic, str) else repr(topic), output_partition=UNASSIGNED,
                        output_key=key_bytes, output_value=value_bytes),
                        ProductionError(f"sink {node.name!r}: {problem}; key {key!r}{source}"))
                    return
                checked.add(topic)
            partition = UNASSIGNED
            if partitioner is not None:
                chosen = partitioner(topic, key, value, collector.partition_count(topic))
                if chosen is not None:
                    partition = chosen
            try:
                send(topic, key_bytes, value_bytes, timestamp, headers, partition)
            except ProductionError as exc:  # the producer refused the record (e.g. larger than message.max.bytes)
                self._errors.handle(ErrorContext.of_message(
                    PRODUCTION, self.id, current, self.current_timestamp, output_topic=topic,
                    output_partition=partition, output_key=key_bytes, output_value=value_bytes),
                    self._refused(exc))
        return emit

    def _dynamic_topic_problem(self, topic: Any, reserved: dict[str, str]) -> str | None:
        """Why a dynamic sink may not send to ``topic``, or None. Raises :class:`ProductionError` (which stops the
        thread: no handler skips a record for it) when the cluster's metadata cannot be read."""
        problem = topic_name_problem(topic)
        if problem is not None:
            return f"the topic name extractor returned {topic!r}, which is not a valid topic name ({problem})"
        if topic in reserved:
            return (f"the topic name extractor chose topic {topic!r}, which is {reserved[topic]}: a dynamic sink "
                    f"writes output topics only")
        if not self._collector.topic_exists(topic):
            return (f"the topic name extractor chose topic {topic!r}, which does not exist on the cluster (a dynamic "
                    f"sink's topics are never created: create it first)")
        return None

    def _refused(self, exc: ProductionError) -> ProductionError:
        """A refusal of the producer, naming the input record the output came from, as Kafka Streams hands the
        production handler the record context of the send (KIP-1033; ``SinkNode``, ``RecordCollectorImpl``)."""
        if self.current is None:  # a punctuator's output: no input record
            return exc
        error = ProductionError(f"{exc}{output_of(self.current, self.id)}")
        error.__cause__ = exc.__cause__  # what went wrong: the dead letter's brook.error.type
        return error

    def _sink_error(self, node: SinkNodeDef, key: Any, value: Any, exc: Exception,
                    topic: Any = None) -> StreamsError:
        key_serde = node.key_serde or self.config.default_key_serde
        value_serde = node.value_serde or self.config.default_value_serde
        try:
            key_serde.serialize(key)
        except Exception:
            what = f"the key {key!r} with key serde {key_serde!r}"
        else:
            what = f"the value {value!r} with value serde {value_serde!r}"
        hint = ""
        topic = node.topic if topic is None else topic
        if topic in self._topology.internal_topics:
            hint = " (a repartition topic: give the operation that repartitions, e.g. group_by, the serde it needs)"
        return StreamsError(f"sink {node.name!r} cannot serialize {what} for topic {topic!r}{hint}: {exc!r}")

    # -- processing ----------------------------------------------------------------------------------------
    def process_messages(self, messages: list[Any]) -> None:
        """Process messages of ONE input partition in offset order (the single-partition fast path)."""
        first = messages[0]
        source = self._sources[first.topic()]
        key_of_bytes, key_of_null, value_of_bytes, value_of_null, extractor, emit = (
            source.key_of_bytes, source.key_of_null, source.value_of_bytes, source.value_of_null, source.extractor,
            source.emit)
        stream_time = self.stream_time
        message = None
        remaining = iter(messages)  # after a skipped record, the loop resumes with the next one
        while True:
            try:
                for message in remaining:
                    self.current = message
                    try:
                        key = message.key()
                        key = key_of_bytes(key) if key is not None else key_of_null(key)
                        value = message.value()
                        value = value_of_bytes(value) if value is not None else value_of_null(value)
                    except Exception as exc:
                        raise self._deserialization_error(message, exc) from exc
                    if extractor is None:
                        timestamp = message.timestamp()[1]
                        if timestamp < 0:
                            raise self._invalid_timestamp(message, timestamp)
                    else:
                        timestamp = self._extract(extractor, key, value, message, stream_time)
                    if timestamp > stream_time:
                        stream_time = self.stream_time = timestamp
                    self.current_timestamp = timestamp
                    emit(key, value, timestamp, message.headers())
                break
            except Exception as exc:
                self._record_failed(message, exc)  # returns when the handler skips the record
            finally:
                self.stream_time = stream_time
                self.current = None
        self.consumed[(first.topic(), first.partition())] = message.offset() + 1
        if stream_time >= self._stream_punctuations.next_time:
            self._punctuate(self._stream_punctuations, stream_time)

    def add_messages(self, messages: list[Any]) -> None:
        """Buffer messages of one partition (multi-partition tasks); deserializes and extracts time now."""
        first = messages[0]
        tp = (first.topic(), first.partition())
        source = self._sources[tp[0]]
        key_of_bytes, key_of_null, value_of_bytes, value_of_null, extractor = (
            source.key_of_bytes, source.key_of_null, source.value_of_bytes, source.value_of_null, source.extractor)
        queue = self.group.queues[tp]  # type: ignore[union-attr]
        partition_time = queue.partition_time
        buffered: list[Buffered] = []
        append = buffered.append
        for message in messages:
            try:
                try:
                    key = message.key()
                    key = key_of_bytes(key) if key is not None else key_of_null(key)
                    value = message.value()
                    value = value_of_bytes(value) if value is not None else value_of_null(value)
                except Exception as exc:
                    raise self._deserialization_error(message, exc) from exc
                if extractor is None:
                    timestamp = message.timestamp()[1]
                    if timestamp < 0:
                        raise self._invalid_timestamp(message, timestamp)
                else:
                    timestamp = self._extract(extractor, key, value, message, partition_time)
            except DeserializationError as error:
                self._errors.handle(ErrorContext.of_message(DESERIALIZATION, self.id, message), error)
                self._skip_unbuffered(tp, message.offset(), queue, buffered)
                continue
            partition_time = max(partition_time, timestamp)
            append((timestamp, key, value, message))
        queue.partition_time = partition_time
        self.group.add(tp, buffered)  # type: ignore[union-attr]

    def process_buffered(self, max_records: int, caught_up: Callable[[TopicPartition], bool] | None = None) -> int:
        """Process up to ``max_records`` buffered records, lowest timestamp first. Returns how many.
        ``caught_up(tp)``: whether an empty partition has nothing more to fetch (see PartitionGroup).

        The queue :meth:`PartitionGroup.next_queue` chooses gives a run of records: its head, then the records after
        it while each is strictly below the lowest head of the other queues (a tie goes back to ``next_queue``).
        Nothing else changes while the run is processed (no records arrive, the time is the same), so this is the
        order choosing per record gives, without choosing per record."""
        group = self.group
        if group is None or not group.buffered:
            return 0
        done = 0
        now = self.clock()
        message = None
        consumed = self.consumed
        while True:
            try:
                while done < max_records:
                    queue = group.next_queue(now, caught_up)
                    if queue is None:
                        break
                    records, limit = queue.records, group.lowest_head_besides(queue)
                    emit, tp = self._sources[queue.topic].emit, (queue.topic, queue.partition)
                    while True:
                        timestamp, key, value, message = records.popleft()
                        group.buffered -= 1
                        self.current = message
                        queue.processed_time = max(queue.processed_time, timestamp)
                        self.stream_time = max(self.stream_time, timestamp)
                        self.current_timestamp = timestamp
                        emit(key, value, timestamp, message.headers())
                        consumed[tp] = message.offset() + 1
                        done += 1
                        if not records or done >= max_records or records[0][0] >= limit:
                            break
                break
            except Exception as exc:
                self._record_failed(message, exc)  # returns when the handler skips the record
                consumed[(message.topic(), message.partition())] = message.offset() + 1
                done += 1
            finally:
                self.current = None
        if message is not None:
            self.last_processed = message
        if self.stream_time >= self._stream_punctuations.next_time:
            self._punctuate(self._stream_punctuations, self.stream_time)
        return done

    def buffer(self, messages: list[Any]) -> None:
        """Keep polled messages of ONE partition until :meth:`process_next` takes them (a multi-partition
        task deserializes them now, to order them by timestamp: :meth:`add_messages`)."""
        if self.group is not None:
            self.add_messages(messages)
        else:
            self._backlog.append(messages)
            self._backlog_records += len(messages)

    @property
    def buffered_records(self) -> int:
        """Input records buffered and not processed yet (all partitions)."""
        return self._backlog_records if self.group is None else self.group.buffered

    def process_next(self, max_records: int, caught_up: Callable[[TopicPartition], bool] | None = None) -> int:
        """Process up to ``max_records`` buffered records: in offset order, or for a multi-partition task lowest
        timestamp first (:meth:`process_buffered`, which may wait for an empty partition). Returns how many."""
        if self.group is not None:
            return self.process_buffered(max_records, caught_up)
        done = 0
        backlog = self._backlog
        while backlog and done < max_records:
            run = backlog[0]
            start = self._backlog_start
            stop = min(len(run), start + max_records - done)
            chunk = run if start == 0 and stop == len(run) else run[start:stop]
            if stop == len(run):
                backlog.popleft()
                self._backlog_start = 0
            else:
                self._backlog_start = stop
            self._backlog_records -= len(chunk)
            self.process_messages(chunk)
            self.last_processed = chunk[-1]
            done += len(chunk)
        return done

    def take_unprocessed(self) -> list[list[Any]]:
        """Empty the buffers: the polled messages not processed yet, as runs of one partition each in offset
        order (a task rebuilt while its partitions stay assigned hands them to its successor: the consumer's
        position is past them)."""
        if self.group is not None:
            runs = [[record[3] for record in queue.records] for queue in self.group.queues.values() if queue.records]
            self.group.clear()
            return runs
        runs = list(self._backlog)
        if runs and self._backlog_start:
            runs[0] = runs[0][self._backlog_start:]
        self._backlog.clear()
        self._backlog_records = self._backlog_start = 0
        return runs

    def buffered_count(self, tp: TopicPartition) -> int:
        """Records of input partition ``tp`` buffered and not processed yet."""
        return self.group.size(tp) if self.group is not None else self._backlog_records

    def _extract(self, extractor: Any, key: Any, value: Any, message: Any, partition_time: int) -> int:
        try:
            timestamp = extractor.extract(key, value, message.timestamp()[1], partition_time)
        except Exception as exc:
            raise DeserializationError(f"task {self.id}: timestamp extractor {extractor!r} found no timestamp: "
                                       f"{exc!r}", message.topic(), message.partition(), message.offset()) from exc
        if not isinstance(timestamp, int) or isinstance(timestamp, bool) or timestamp < 0:
            raise self._invalid_timestamp(message, timestamp, extractor)
        return timestamp

    def _invalid_timestamp(self, message: Any, timestamp: Any, extractor: Any = None) -> DeserializationError:
        """A record without a usable timestamp is bad input, like one its serdes cannot read (Kafka Streams'
        FailOnInvalidTimestamp): it goes down the deserialization error path."""
        source = f"timestamp extractor {extractor!r}" if extractor is not None else "the record"
        return DeserializationError(f"task {self.id}: {source} gave an invalid timestamp {timestamp!r} (must be "
                                    f"a non-negative int of epoch ms; set a timestamp_extractor for such topics)",
                                    message.topic(), message.partition(), message.offset())

    def _deserialization_error(self, message: Any, exc: Exception) -> DeserializationError:
        source = self._sources[message.topic()]
        return DeserializationError(
            f"task {self.id}: source {source.node!r} cannot deserialize the record: {exc!r}; "
            f"key bytes={_preview(message.key())}, value bytes={_preview(message.value())}",
            message.topic(), message.partition(), message.offset())

    def _record_failed(self, message: Any, exc: Exception) -> None:
        """A record failed: hand it to its stage's handler, which skips it (returns) or fails (raises).

        A :class:`DeserializationError` goes to the deserialization handler; a :class:`ProductionError` was
        already seen by the production handler (the sink), which chose to fail; anything else is the
        processing handler's, wrapped in a :class:`ProcessingError` naming the task and the record. An error a
        handler already chose to stop on (a cache eviction's, say) goes up as it is."""
        if isinstance(exc, (ProductionError, TaskMigratedError, TaskCorruptedError)) or self._errors.decided(exc):
            raise exc  # TaskMigratedError, TaskCorruptedError: exactly-once
        if isinstance(exc, DeserializationError):
            stage, error = DESERIALIZATION, exc
        elif isinstance(exc, RecordError):
            stage, error = PROCESSING, exc
        else:
            stage, error = PROCESSING, self._processing_error(message, exc)
            error.__cause__ = exc
        if message is None:
            raise error
        self._errors.handle(ErrorContext.of_message(stage, self.id, message), error)

    def _skip_unbuffered(self, tp: TopicPartition, offset: int, queue: Any, batch: list[Buffered]) -> None:
        """A record skipped before buffering: committed at once if nothing of its partition waits before it,
        else once the records before it are processed (see :meth:`prepare_commit`)."""
        if not batch and not queue.records:
            self.consumed[tp] = max(self.consumed.get(tp, 0), offset + 1)
        else:
            self._skipped.setdefault(tp, []).append(offset)

    def _cover_skipped(self) -> None:
        """Commit past skipped, unbuffered records once every record of their partition before them is done."""
        for tp, offsets in self._skipped.items():
            records = self.group.queues[tp].records  # type: ignore[union-attr]
            head = records[0][3].offset() if records else None
            while offsets and (head is None or head > offsets[0]):
                self.consumed[tp] = max(self.consumed.get(tp, 0), offsets.pop(0) + 1)

    def _processing_error(self, message: Any, exc: Exception) -> ProcessingError:
        where = (message.topic(), message.partition(), message.offset()) if message is not None else (None,) * 3
        detail = str(exc) if isinstance(exc, StreamsError) else repr(exc)  # Brook's own messages read as they are
        return ProcessingError(f"task {self.id}: processing failed: {detail}", *where)

    # -- punctuation -----------------------------------------------------------------------------------------
    def schedule(self, interval: int, punctuation_type: PunctuationType, callback: Callable[[int], None],
                 node: str) -> Cancellable:
        if punctuation_type is PunctuationType.STREAM_TIME:
            # Aligned to 0: the first punctuation comes with the first record, then every interval.
            return self._stream_punctuations.add(PunctuationSchedule(0, interval, callback, node))
        if self.wall_clock_refused is not None:
            raise TopologyError(f"processor {node!r} schedules a wall-clock punctuator (every {interval} ms), which "
                                f"{self.wall_clock_refused}: schedule it on PunctuationType.STREAM_TIME instead")
        return self._wall_punctuations.add(PunctuationSchedule(self.clock() + interval, interval, callback, node))

    def stream_punctuation_times(self) -> dict[str, list[int]]:
        """When each stream-time punctuator fires next, per processor (what :meth:`resume_stream_punctuations` of
        a later run of the same topology goes on from)."""
        return self._stream_punctuations.next_times()

    def resume_stream_punctuations(self, times: dict[str, list[int]]) -> None:
        """Go on with the stream-time schedules of an earlier run (after :meth:`initialize_topology`, whose
        processors' ``init`` schedule them anew, aligned to 0: without this each would fire at the first record)."""
        self._stream_punctuations.set_next_times(times)

    def maybe_punctuate_wall_clock(self, now: int) -> bool:
        if now < self._wall_punctuations.next_time:
            return False
        return self._punctuate(self._wall_punctuations, now)

    def maybe_punctuate_stream_time(self) -> bool:
        if self.stream_time < 0 or self.stream_time < self._stream_punctuations.next_time:
            return False
        return self._punctuate(self._stream_punctuations, self.stream_time)

    def _punctuate(self, queue: PunctuationQueue, now: int) -> bool:
        def fire(schedule: PunctuationSchedule, timestamp: int) -> None:
            self.current = None
            self.current_timestamp = timestamp
            self.punctuating = schedule.node
            try:
                schedule.callback(timestamp)
            except Exception as exc:  # noqa: BLE001 - user code may raise anything; the handler decides
                # Kafka Streams' StreamTask.punctuate: the handler decides, with no record and no input record.
                self._without_input_failed(exc, f"punctuator of processor {schedule.node!r} failed at time {timestamp}")
            finally:
                self.punctuating = None
        return queue.punctuate(now, fire)

    # -- records processed with no input record of their own: what cache flushes and punctuators forward --------
    def forward_punctuated(self, emit: Emit, key: Any, value: Any, timestamp: int, headers: Any) -> None:
        """Forward a record a punctuator forwards to one child: an error downstream goes to the processing handler
        (no input record; Kafka Streams' ProcessorNode.process), and the punctuator goes on when it skips it."""
        try:
            emit(key, value, timestamp, headers)
        except Exception as exc:  # noqa: BLE001 - user code may raise anything; the handler decides
            self._without_input_failed(exc, f"processing failed on a record the punctuator of processor "
                                            f"{self.punctuating!r} forwarded at time {self.current_timestamp}")

    def _forward_flushed(self, store: str, listener: Callable[..., None], updates: list[FlushedUpdate]) -> None:
        """Hand the entries of store ``store``'s cache flush (or eviction) to ``listener``, one by one, which forwards
        them.

        As Kafka Streams sets the entry's record context around its flush listener
        (``CachingKeyValueStore.putAndMaybeForward``), each entry's source — the input record that last wrote it
        — is the current record meanwhile, and the entry's timestamp the current timestamp; an error downstream
        goes to the processing handler naming that source (``ProcessorNode.process``), and the flush goes on
        with the next entry when the handler skips this one (the store holds it already). The task's own record
        context is set back once all are forwarded (or one stopped the flush)."""
        outer = self.current, self.current_timestamp, self.punctuating
        self.punctuating = None
        task_id = self.id
        try:
            for source, key, new, old, timestamp, headers in updates:
                self.current = None if source is None else record_source_of((task_id, *source, headers))
                self.current_timestamp = timestamp
                try:
                    listener(key, new, old, timestamp, headers)
                except Exception as exc:  # noqa: BLE001 - user code may raise anything; the handler decides
                    self._without_input_failed(exc, f"processing failed on a record the cache of store {store!r} "
                                                    f"forwarded when it flushed (key bytes={_preview(key)})")
        finally:
            self.current, self.current_timestamp, self.punctuating = outer

    def _without_input_failed(self, exc: Exception, what: str) -> None:
        """A record a flush or a punctuator forwarded (or a punctuator itself) failed: the processing handler skips it
        (returns) or stops the thread (raises), with ``self.current`` as the record context (a cache entry's
        source, or None in a punctuation). Errors a handler decided already, production errors (the sink's handler
        saw them) and exactly-once's transaction errors go up as they are."""
        if isinstance(exc, (ProductionError, TaskMigratedError, TaskCorruptedError)) or self._errors.decided(exc):
            raise exc
        source = self.current
        where = (source.topic(), source.partition(), source.offset()) if source is not None else (None,) * 3
        detail = str(exc) if isinstance(exc, StreamsError) else repr(exc)
        error = ProcessingError(f"task {self.id}: {what}: {detail}", *where)
        error.__cause__ = exc
        self._errors.handle(ErrorContext.of_message(PROCESSING, self.id, source, self.current_timestamp), error)

    # -- stream time across restarts (streaming.runtime.stream_time) ------------------------------------------
    def partition_times(self) -> dict[TopicPartition, int]:
        """The highest timestamp processed per input partition (-1: none yet)."""
        if self.group is None:
            return {self.partitions[0]: self.stream_time}
        return {tp: queue.processed_time for tp, queue in self.group.queues.items()}

    def initialize_stream_time(self, times: dict[TopicPartition, int], committed: dict[TopicPartition, int],
                               observed: dict[str, int] | None = None) -> None:
        """Go on from the partition times of the last commit (before processing anything): stream time is the
        highest of them, as in Kafka Streams' ``initializeTaskTime``. ``committed``: the group's committed offsets
        of the task's partitions (a stream-time record names the offsets its times belong to). ``observed``: the
        times of the task's time-driven nodes at that commit (see :meth:`observed_stream_time`)."""
        self._committed.update(committed)
        for tp, ts in times.items():
            if self.group is not None and tp in self.group.queues:
                queue = self.group.queues[tp]
                queue.partition_time = max(queue.partition_time, ts)
                queue.processed_time = max(queue.processed_time, ts)
            self.stream_time = max(self.stream_time, ts)
        self._written_times = self.partition_times()
        self._initial_stream_time = self.stream_time
        self._recovered_observed = dict(observed or {})
        for key, tracker in self._observed.items():  # nodes built before (none, when tasks are created as usual)
            tracker.advance(self._recovered_observed.get(key, self._initial_stream_time))
        self._written_observed = self.observed_times()

    def observed_stream_time(self, key: str, kind: type[T] = ObservedStreamTime) -> T:  # type: ignore[assignment]
        """The task's :class:`ObservedStreamTime` named ``key`` (see ``ProcessorContext.observed_stream_time``)."""
        tracker = self._observed.get(key)
        if tracker is None:
            tracker = self._observed[key] = kind()
            tracker.time = self._recovered_observed.get(key, self._initial_stream_time)
        elif not isinstance(tracker, kind):
            raise TopologyError(f"task {self.id}: observed stream time {key!r} is a {type(tracker).__name__}, "
                                f"asked for as a {kind.__name__} (two nodes use the same key)")
        return tracker  # type: ignore[return-value]

    def observed_times(self) -> dict[str, int]:
        """The time of each of the task's time-driven nodes that has one (-1: no record yet)."""
        return {key: tracker.time for key, tracker in self._observed.items()}

    def uncommitted_spans(self) -> dict[TopicPartition, tuple[int | None, int]]:
        """Per input partition, the offsets processed since the last commit, ``[first, end)`` (``first`` None when
        nothing was ever committed): the input whose outputs and state changes an open transaction holds."""
        committed = self._committed
        return {tp: (committed.get(tp), end) for tp, end in self.consumed.items() if committed.get(tp) != end}

    def uncommitted_inputs(self) -> str:
        """The input records processed since the last commit, per partition (what a failed delivery names: its
        record is the output of one of them); "" if none."""
        spans = [f"topic {tp[0]!r} partition {tp[1]} "
                 + (f"offsets {start}-{end - 1}" if start is not None else f"offsets up to {end - 1}")
                 for tp, (start, end) in self.uncommitted_spans().items()]
        return f"task {self.id}: {', '.join(spans)}" if spans else ""

    def offset_metadata(self, tp: TopicPartition) -> str:
        """The metadata committed with ``tp``'s offset: its partition time and the task's node times (as Kafka
        Streams encodes its partition time and processor metadata)."""
        partition_time = self.stream_time if self.group is None else self.group.queues[tp].processed_time
        return encode_offset_metadata(partition_time, self.observed_times(), self.id)

    def _write_stream_time(self) -> None:
        """Send the partition times and the node times to the stream-time topic if they moved since the last
        write, with the next offset of each partition (the commit then makes the record durable with the offsets:
        acknowledged first, or in the same transaction). Partitions with no offset yet are left out."""
        times, observed = self.partition_times(), self.observed_times()
        if (times == self._written_times and observed == self._written_observed) or max(times.values()) < 0:
            return
        at = {tp: (ts, self.consumed.get(tp, self._committed.get(tp))) for tp, ts in times.items()}
        record = encode_record({tp: (ts, offset) for tp, (ts, offset) in at.items() if offset is not None}, observed)
        self._collector.send(self.stream_time_topic, self.id.encode(), record,  # type: ignore[arg-type]
                             max(times.values()), None, self.partition)
        self._written_times, self._written_observed = times, observed

    # -- commit and close -------------------------------------------------------------------------------------
    def prepare_commit(self) -> dict[TopicPartition, int]:
        """Flush the stores, then the external sinks (and send the partition times to the stream-time topic, if
        the task keeps one); return the offsets processed since the last commit (see :meth:`offset_metadata` for
        their metadata). Nothing while an external sink cannot write (:attr:`sinks_blocked`): nothing of this task
        is committed until a later flush succeeds."""
        for store in self.stores.values():
            store.flush()
        if self.external_sinks:
            self.sinks_blocked = not flush_all(self.external_sinks)
            if self.sinks_blocked:
                return {}
        if self._skipped:
            self._cover_skipped()
        if self.stream_time_topic is not None:
            self._write_stream_time()
        return {tp: offset for tp, offset in self.consumed.items() if self._committed.get(tp) != offset}

    def post_commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Record that ``offsets`` are committed (the checkpoint file will be written here)."""
        self._committed.update(offsets)
        self.commit_requested = False

    def suspend(self) -> None:
        """Close the processors cleanly (revocation, shutdown); the caller commits after this.

        As Kafka Streams: the stores' caches are flushed first, so cached results reach downstream while
        every processor is still open. Then the processors close upstream first, and the caches are
        flushed again after each ``close()``, so what a processor forwards or writes while closing reaches
        nodes that are still open. The commit that follows covers those records too.
        """
        self._flush_caches()
        self._close_processors(flush_after_each=True)

    def drop_buffered(self) -> None:
        """Forget input taken from the consumer but not processed (a suspended task: the consumer reads it
        again from the committed offsets when the task comes back)."""
        self.pending = []
        self._skipped.clear()
        self.take_unprocessed()

    def resume(self) -> None:
        """A suspended task comes back to this thread (Kafka Streams' SUSPENDED -> RUNNING): its stores stayed
        open and hold exactly what was committed, so nothing is restored; the processors are built and
        ``init``-ed again, with fresh punctuation schedules (``init`` schedules them anew)."""
        self._emits.clear()
        self._sources.clear()
        self._close_external_sinks()  # the nodes register new ones
        self._stream_punctuations = PunctuationQueue()
        self._wall_punctuations = PunctuationQueue()
        self.commit_requested = False
        self.initialized = False
        self.initialize_topology()

    def add_external_sink(self, sink: ExternalSink) -> None:
        """Flush ``sink`` at each commit, before the offsets (see :mod:`streaming.runtime.external_sinks`)."""
        self.external_sinks.append(sink)

    def reject_output(self, destination: str, source: Any, key: bytes | None, value: bytes | None,
                      error: Exception) -> None:
        """An output an external sink's destination refused (see ``NodeContext.reject_output``); ``source`` is the
        input it came from: a consumed message, a :class:`RecordSource` or None. The dead letter keeps the output,
        never the input's bytes (the row may stand for many inputs)."""
        if source is not None and not isinstance(source, RecordSource):
            source = RecordSource(self.id, source.topic(), source.partition(), source.offset(), source.timestamp()[1],
                                  source.headers())
        timestamp = source.timestamp_ms if source is not None else self.current_timestamp
        self._errors.handle(ErrorContext.of_message(PRODUCTION, self.id, source, timestamp, output_topic=destination,
                                                    output_partition=-1, output_key=key, output_value=value), error)

    def sink_retry_at(self) -> float:
        """When the earliest blocked external sink may be flushed again (``time.monotonic()``; 0.0: none is)."""
        return min((sink.retry_at for sink in self.external_sinks if sink.retry_at), default=0.0)

    def _close_external_sinks(self) -> None:
        for sink in self.external_sinks:
            sink.close()
        self.external_sinks.clear()
        self.sinks_blocked = False

    def _flush_caches(self) -> None:
        for store in self.stores.values():
            store.flush()

    def _close_processors(self, flush_after_each: bool) -> None:
        # _processors is in post-order (children are built first), so reversed() is upstream first.
        processors, self._processors = self._processors, []
        for name, processor in reversed(processors):
            try:
                processor.close()
            except Exception:
                log.exception("task %s: processor %r failed to close", self.id, name)
            if flush_after_each:
                self._flush_caches()

    def close(self) -> None:
        """Close processors (unless suspended, and without flushing: a dirty close keeps nothing cached),
        then stores. Errors are logged so everything gets closed."""
        self._close_processors(flush_after_each=False)
        for name, store in self.stores.items():
            try:
                if store.is_open:
                    store.close()
            except Exception:
                log.exception("task %s: store %r failed to close", self.id, name)
        self._close_external_sinks()
        if self.group is not None:
            self.group.clear()
        self._backlog.clear()
        self._backlog_records = self._backlog_start = 0


def _preview(data: bytes | None, limit: int = 60) -> str:
    if data is None:
        return "None"
    shown = data[:limit]
    return repr(shown) + ("..." if len(data) > limit else "")
