"""Stream time across restarts: where a task's partition times are kept at each commit, and read back when
the task is created again (after a crash, a rebalance, or on another instance).

Kafka Streams keeps each input partition's partition time (the highest timestamp processed from it) in the
offset commit's metadata and, when a task starts, sets its partition times from the committed offsets'
metadata (``StreamTask.initializeTaskTime``); the task's stream time is the highest of them. Without that, a
restarted task rebuilds stream time from the records it replays, so a record that is late (behind a window's
grace) but arrives first after the restart is counted instead of dropped, and may re-open a window whose
final result was already emitted.

Brook does the same (:func:`encode_offset_metadata`: a version byte and the time, base64, as Kafka Streams
encodes it), and — because a broker may drop commit metadata (the embedded broker does:
docs/broker-limits.md) — the tasks of every sub-topology with a logged store also write their partition times to
``<application.id>-<subtopology>-stream-time`` (:func:`streaming.naming.stream_time_topic`: compacted, one
partition per task, keyed by task id) at each commit, through the same producer as their changelog writes:
under at-least-once the record is acknowledged before the offsets are committed, under exactly-once it is in
the commit's transaction. A task starting again takes, per input partition, the highest of the two.

Each record also names the offsets its times belong to (the next offset of each partition, as the commit
commits it). Under at-least-once the record is written before the offsets are committed, so a crash or a
refused commit in between leaves a record ahead of the committed offsets; only the records at or before the
committed offset count: the replayed records then meet the stream time they met the first time, as with Kafka
Streams' metadata, which is atomic with the offset. A new task reads only the partition's tail (its last
:data:`TAIL_RECORDS` records, further back only when they hold none that counts), so a restart reads a bounded
amount however long the topic grew. (Where the broker compacts the topic, an ignored record may have replaced
the one that counted; the commit metadata, kept by such a broker, still holds the time.)

Node times: each time-driven node (windowed aggregations, suppression, stream-stream joins) goes by its own
observed stream time (:meth:`StreamTask.observed_stream_time`), which the same commit keeps: in the offset
metadata as Kafka Streams' version 2 (``TopicPartitionMetadata`` with its ``ProcessorMetadata``: every partition of
the task carries the task's node times; a task takes the highest per node, as ``ProcessorMetadata.update``), and
in the stream-time record's ``operators`` field, counted only from a record whose every offset is committed. A node
with no recorded time (a commit by an older Brook) starts from the task's recovered stream time, which is never
behind it: a window it closed stays closed.

Only tasks with logged state get the topic: stream time decides what they keep (windows, grace, suppression,
join windows, stream-time punctuators over their stores); a stateless task has nothing that a wrong stream
time could corrupt across a restart beyond what it forwards, and still gets the commit metadata where the
broker keeps it.
"""

from __future__ import annotations

import base64
import json
import logging
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from streaming.errors import StreamsError
from streaming.runtime.client_configs import (
    STARVED_AFTER_S,
    STARVED_FETCH_WAIT_MS,
    starved_reader_config,
    stream_time_reader_config,
)
from streaming.runtime.task_timeouts import DEFAULT_TASK_TIMEOUT_MS, TaskTimeouts, is_transient
from streaming.topology.topology import Subtopology, Topology

if TYPE_CHECKING:
    from streaming.runtime.task import StreamTask

log = logging.getLogger(__name__)

TP = tuple[str, int]
#: The first byte of the offset metadata (Kafka Streams' ``TopicPartitionMetadata``): version 1 is the partition
#: time as a big-endian signed 64-bit integer after it; version 2 (``LATEST_MAGIC_BYTE``) adds the processor
#: metadata after the time: an int count, then per entry an int key length, the UTF-8 key and a long value.
METADATA_VERSION = 1
METADATA_VERSION_WITH_PROCESSORS = 2
#: Offset metadata longer than this is committed without the node times (Kafka's ``offset.metadata.max.bytes``
#: is 4096 by default and a broker refuses a commit over it); the stream-time topic still has them.
MAX_METADATA_CHARS = 3_000
RECORD_VERSION = 1  # the stream-time topic's value format ("operators" was added later: optional)
UNKNOWN = -1  # no time known for a partition (Kafka Streams' RecordQueue.UNKNOWN)
#: How many records at the end of a stream-time partition a new task reads first (see
#: :class:`StreamTimeRecovery`): enough for the records of commits that failed after their write.
TAIL_RECORDS = 1_000
#: The longest one call to the broker made while tasks are created may hold up the stream thread (the committed
#: offsets); a call that takes longer is made again at the next poll, under ``task.timeout.ms``.
CALL_TIMEOUT_S = 10.0
#: How long a new reader waits for the metadata of its topic before its first reads (normally ~10 ms; without it
#: librdkafka starts a read at the tail 500 ms later). A broker slower than this only costs those 500 ms.
METADATA_WAIT_S = 1.0
_OFFSET_TAIL_BASE = -2000  # librdkafka's RD_KAFKA_OFFSET_TAIL_BASE: offset _OFFSET_TAIL_BASE - n is "n before the end"
_LONG = struct.Struct(">q")
_INT = struct.Struct(">i")


def encode_offset_metadata(partition_time: int, processor_times: dict[str, int] | None = None,
                           where: str = "") -> str:
    """The offset commit metadata for a partition whose partition time is ``partition_time``, with the task's node
    times (``processor_times``, see :meth:`StreamTask.observed_stream_time`) as Kafka Streams' processor metadata.
    Node times that would make it longer than :data:`MAX_METADATA_CHARS` are left out (logged, naming ``where``)."""
    if not processor_times:
        return base64.b64encode(struct.pack(">bq", METADATA_VERSION, partition_time)).decode("ascii")
    parts = [struct.pack(">bq", METADATA_VERSION_WITH_PROCESSORS, partition_time), _INT.pack(len(processor_times))]
    for key, value in sorted(processor_times.items()):
        raw = key.encode()
        parts += [_INT.pack(len(raw)), raw, _LONG.pack(value)]
    encoded = base64.b64encode(b"".join(parts)).decode("ascii")
    if len(encoded) > MAX_METADATA_CHARS:
        log.warning("%s: the times of %d nodes make the offset metadata %d characters long; committing the "
                    "partition time alone (the stream-time topic keeps the node times)", where,
                    len(processor_times), len(encoded))
        return encode_offset_metadata(partition_time)
    return encoded


def decode_offset_metadata(metadata: str | None, where: str) -> tuple[int, dict[str, int]]:
    """The partition time in a committed offset's ``metadata`` (:data:`UNKNOWN` if there is none, or it is of
    another version or unreadable: logged, naming ``where``, the task and partition), and the node times in it."""
    if not metadata:
        return UNKNOWN, {}
    try:
        raw = base64.b64decode(metadata, validate=True)
        version = raw[0]
    except (ValueError, IndexError):
        log.warning("%s: committed offset metadata %r is not a stream time; starting without it", where,
                    metadata[:40])
        return UNKNOWN, {}
    if version == METADATA_VERSION and len(raw) == 9:
        return _LONG.unpack_from(raw, 1)[0], {}
    if version == METADATA_VERSION_WITH_PROCESSORS and len(raw) >= 9:
        try:
            return _LONG.unpack_from(raw, 1)[0], _processor_times(raw, 9)
        except (struct.error, UnicodeDecodeError, ValueError) as exc:
            log.warning("%s: committed offset metadata (version 2) has unreadable node times (%s); starting with the "
                        "partition time alone", where, exc)
            return _LONG.unpack_from(raw, 1)[0], {}
    log.warning("%s: committed offset metadata has version %d (%d bytes); this Brook reads versions %d and %d, "
                "starting without it", where, version, len(raw), METADATA_VERSION, METADATA_VERSION_WITH_PROCESSORS)
    return UNKNOWN, {}


def _processor_times(raw: bytes, position: int) -> dict[str, int]:
    """Kafka Streams' serialized ``ProcessorMetadata`` from ``position`` on (nothing: no entries)."""
    if position == len(raw):
        return {}
    count = _INT.unpack_from(raw, position)[0]
    position += 4
    times = {}
    for _ in range(count):
        size = _INT.unpack_from(raw, position)[0]
        key = raw[position + 4:position + 4 + size].decode()
        if len(key.encode()) != size:
            raise ValueError("a key runs past the end")
        times[key] = _LONG.unpack_from(raw, position + 4 + size)[0]
        position += 12 + size
    if position != len(raw):
        raise ValueError(f"{len(raw) - position} bytes after the last entry")
    return times


class StreamTimeRecord(NamedTuple):
    """A stream-time topic value: per input partition its partition time and the next offset to read (what the
    commit that wrote the record commits), and the task's node times at that commit."""

    partitions: dict[TP, tuple[int, int]]
    observed: dict[str, int]


def encode_record(times: dict[TP, tuple[int, int]], observed: dict[str, int] | None = None) -> bytes:
    """The stream-time topic's value: per input partition, its partition time and the next offset to read
    (what the commit that writes the record commits); and the task's node times (``observed``), if it has any."""
    value: dict[str, Any] = {"version": RECORD_VERSION,
                             "partitions": [[t, p, ts, offset] for (t, p), (ts, offset) in sorted(times.items())]}
    if observed:
        value["operators"] = dict(sorted(observed.items()))
    return json.dumps(value, separators=(",", ":")).encode()


def decode_record(value: bytes | None, where: str) -> StreamTimeRecord:
    """A stream-time topic value (``where``: its topic, partition and offset)."""
    if value is None:
        return StreamTimeRecord({}, {})
    try:
        data = json.loads(value)
        if data.get("version") != RECORD_VERSION:
            raise ValueError(f"version {data.get('version')!r}, this Brook reads {RECORD_VERSION}")
        return StreamTimeRecord({(str(topic), int(partition)): (int(ts), int(offset))
                                 for topic, partition, ts, offset in data["partitions"]},
                                {str(key): int(ts) for key, ts in data.get("operators", {}).items()})
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise StreamsError(f"stream-time record at {where} is unreadable ({exc}): {value[:80]!r}") from exc


def time_at_offsets(records: Iterable[StreamTimeRecord], committed: dict[TP, int]) -> dict[TP, int]:
    """Per input partition, the highest time among ``records`` written at or before its ``committed`` offset
    (a record past it was written for a commit that did not happen)."""
    times: dict[TP, int] = {}
    for record in records:
        for tp, (ts, offset) in record.partitions.items():
            if tp in committed and offset <= committed[tp]:
                times[tp] = max(times.get(tp, UNKNOWN), ts)
    return times


def observed_at_offsets(records: Iterable[StreamTimeRecord], committed: dict[TP, int]) -> dict[str, int]:
    """Per node time, the highest among ``records`` whose every offset is committed (a record written for a
    commit that did not happen names an offset past the committed one, or a partition with none committed)."""
    times: dict[str, int] = {}
    for record in records:
        if record.observed and all(tp in committed and offset <= committed[tp]
                                   for tp, (_, offset) in record.partitions.items()):
            for key, ts in record.observed.items():
                times[key] = max(times.get(key, UNKNOWN), ts)
    return times


def merge_max(target: dict[str, int], times: dict[str, int]) -> None:
    """Take the higher time per key into ``target`` (Kafka Streams' ``ProcessorMetadata.update``)."""
    for key, ts in times.items():
        if ts > target.get(key, UNKNOWN):
            target[key] = ts


def keeps_stream_time(topology: Topology, subtopology: Subtopology) -> bool:
    """Whether the tasks of ``subtopology`` keep their stream time in a stream-time topic: they have a
    logged store (state that outlives the task, and that stream time decides about)."""
    builders = topology.store_builders
    return any(builders[store].logging_enabled for store in subtopology.stores)


def stream_time_topics(topology: Topology, application_id: str) -> dict[int, str]:
    """The stream-time topic of every sub-topology that keeps one, by sub-topology id (its physical name, at the
    generation ``topology`` is bound with)."""
    return {sub.id: topology.generations.stream_time(application_id, sub.id) for sub in topology.subtopologies()
            if keeps_stream_time(topology, sub)}


class _NotAnswered(Exception):
    """The broker did not answer a call in time: the task asks again at the next poll (task.timeout.ms)."""


@dataclass(eq=False)
class _TailRead:
    """The read of one task's stream-time partition: its tail (the last :data:`TAIL_RECORDS` records) first, then
    further back, span by span, while none of the records read is at or before a committed offset of the task."""

    task: StreamTask
    tp: TP
    committed: dict[TP, int]  # the group's committed offsets of the task's partitions
    from_metadata: dict[TP, int]  # the partition times in their metadata
    observed_metadata: dict[TP, dict[str, int]]  # the node times in their metadata
    started: float  # when the task asked (monotonic s)
    start: int | None = None  # the span's first offset; None: the tail's, known from its first record or its EOF
    stop: int | None = None  # where the span ends; None: at partition EOF
    position: int | None = None  # the next offset of the span to read, once a record came
    span: list[StreamTimeRecord] = field(default_factory=list)  # the records of this span read so far
    records: list[StreamTimeRecord] = field(default_factory=list)  # those of the later spans, read before
    moved: bool = False  # a record or partition EOF came since the last poll
    quiet_since: float = field(default_factory=time.monotonic)  # no record or partition EOF since (monotonic s)
    problem: str = ""  # what the reader last said went wrong (a transient error)

    def resume_at(self) -> int:
        """Where a new reader goes on with this read: after its last record, at its span's start, or (a tail with
        no record yet) at the tail."""
        if self.position is not None:
            return self.position
        return self.start if self.start is not None else _OFFSET_TAIL_BASE - TAIL_RECORDS

    def where(self) -> str:
        """Which offset the read waits for, for the message of a task that makes no progress."""
        at = self.position if self.position is not None else self.start
        span = "its tail" if self.stop is None else f"offsets {self.start}..{self.stop - 1}"
        return f"{span}, {'no record yet' if at is None else f'read up to offset {at}'}"


class StreamTimeRecovery:
    """Gives newly created tasks the stream time they had at their last commit, without holding up the stream thread.

    ``committed(partitions, timeout)`` is the main consumer's ``committed`` (the group's offsets with their
    metadata). ``topics``: the stream-time topic per sub-topology id (:func:`stream_time_topics`). ``timeout``: the
    longest one call to the broker may block the thread (the committed offsets). ``timeouts``: the thread's
    ``task.timeout.ms`` deadlines (:mod:`streaming.runtime.task_timeouts`).

    :meth:`start` asks for the new tasks' committed offsets and starts reading their stream-time partitions;
    :meth:`poll`, at each iteration of the thread's loop, takes what the reader fetched meanwhile and initializes the
    tasks whose read is complete; :meth:`waits_for` says whether a task still waits (its input stays paused, the
    thread's other tasks process). A task the broker does not answer for is retried at the next poll — its committed
    offsets asked again, its read going on where it was — until ``task.timeout.ms`` passes without progress (Kafka
    Streams, KIP-572: a ``TimeoutException`` in ``StreamTask.initializeMetadata`` is rethrown "to trigger
    task.timeout.ms" and the task retried by ``TaskManager.tryToCompleteRestoration``). :meth:`recover` does it all
    at once.
    """

    def __init__(self, committed: Callable[..., list[TopicPartition]], consumer_config: dict[str, Any],
                 topics: dict[int, str], timeout: float = CALL_TIMEOUT_S, *,
                 timeouts: TaskTimeouts | None = None) -> None:
        self._committed = committed
        self._reader_config = stream_time_reader_config(consumer_config)
        self._topics = topics
        self._timeout = timeout
        self._timeouts = timeouts or TaskTimeouts(DEFAULT_TASK_TIMEOUT_MS)
        self._unasked: dict[str, tuple[StreamTask, float]] = {}  # tasks whose committed offsets are to be read
        self._reads: dict[TP, _TailRead] = {}  # per stream-time partition being read, the read of its task
        self._reader: Consumer | None = None  # while there are reads

    def recover(self, tasks: Iterable[StreamTask]) -> None:
        """All at once: :meth:`start`, then :meth:`poll` until every task has its stream time (or a task made no
        progress for ``task.timeout.ms``: :class:`~streaming.errors.TaskTimeoutError`)."""
        tasks = list(tasks)
        self.start(tasks)
        while any(self.waits_for(task) for task in tasks):
            self.poll(0.1)

    def start(self, tasks: Iterable[StreamTask]) -> None:
        """Attach each task to its stream-time topic (if its sub-topology keeps one) and start initializing its
        partition times: per input partition, the highest of the committed offset's metadata and the stream-time
        topic's records at or before that offset. A task without a stream-time topic is done once its committed
        offsets are read (here, unless the broker does not answer)."""
        now = time.monotonic()
        for task in tasks:
            task.stream_time_topic = self._topics.get(task.subtopology.id)
            self._unasked[task.id] = (task, now)
        if self._unasked:
            self._ask_committed()

    def poll(self, timeout: float) -> None:
        """Go on with the tasks that wait: ask again for the committed offsets the broker did not give, take what the
        reader fetched (waiting at most ``timeout`` s for it), initialize the tasks whose read is complete. Each task
        that made no progress counts against its ``task.timeout.ms``; one past it raises
        :class:`~streaming.errors.TaskTimeoutError`."""
        if self._unasked:
            self._ask_committed()
        if self._reads:
            self._take(timeout)

    def waits_for(self, task: StreamTask) -> bool:
        """Whether ``task`` still waits for its stream time."""
        unasked = self._unasked.get(task.id)
        read = self._reads.get((task.stream_time_topic, task.partition)) if task.stream_time_topic else None
        return (unasked is not None and unasked[0] is task) or (read is not None and read.task is task)

    def cancel(self, task: StreamTask) -> None:
        """Forget ``task`` (closed before its stream time was read)."""
        if task.id in self._unasked and self._unasked[task.id][0] is task:
            del self._unasked[task.id]
        tp = (task.stream_time_topic, task.partition)
        read = self._reads.get(tp)  # type: ignore[arg-type]
        if read is not None and read.task is task:
            self._end_read(read)

    def _ask_committed(self) -> None:
        tasks = [task for task, _ in self._unasked.values()]
        try:
            offsets, from_metadata, observed_metadata = self._read_committed(tasks)
        except _NotAnswered as exc:
            for task in tasks:
                self._timeouts.failed(task, task.id, f"cannot read the committed offsets of {sorted(task.partitions)} "
                                                     f"to initialize its stream time: {exc}")
            return
        reads = []
        for task in tasks:
            _, started = self._unasked.pop(task.id)
            self._timeouts.progressed(task)
            committed = {tp: offsets[tp] for tp in task.partitions if tp in offsets}
            observed = {tp: times for tp, times in observed_metadata.items() if tp in committed}
            if task.stream_time_topic is None:
                self._initialize(task, committed, from_metadata, observed, [], started)
            else:
                reads.append(_TailRead(task, (task.stream_time_topic, task.partition), committed,
                                       {tp: ts for tp, ts in from_metadata.items() if tp in committed}, observed,
                                       started))
        self._begin_reads(reads)

    def _initialize(self, task: StreamTask, committed: dict[TP, int], from_metadata: dict[TP, int],
                    observed_metadata: dict[TP, dict[str, int]], records: list[StreamTimeRecord],
                    started: float) -> None:
        """Per input partition, the highest of the committed offset's metadata and the stream-time records at or
        before that offset; and the task's node times (:meth:`StreamTask.observed_stream_time`) the same way, from
        the metadata and the records whose offsets are all committed."""
        stored = time_at_offsets(records, committed)
        times = {tp: max(from_metadata.get(tp, UNKNOWN), stored.get(tp, UNKNOWN)) for tp in task.partitions}
        observed: dict[str, int] = {}
        for tp in committed:
            merge_max(observed, observed_metadata.get(tp, {}))
        merge_max(observed, observed_at_offsets(records, committed))
        task.initialize_stream_time(times, committed, observed)
        if any(ts != UNKNOWN for ts in times.values()):
            log.info("task %s goes on from stream time %d (partition times %s; from the commit metadata: %s, "
                     "from %s: %s; node times %s)", task.id, max(times.values()), times,
                     {tp: ts for tp, ts in from_metadata.items() if tp in committed},
                     task.stream_time_topic, stored or "none", observed or "none")
        log.info("stream time of task %s read in %.0f ms", task.id, (time.monotonic() - started) * 1000)

    def _read_committed(self, tasks: list[StreamTask]) -> tuple[dict[TP, int], dict[TP, int], dict[TP, dict[str, int]]]:
        """The group's committed offsets of the tasks' partitions, and the partition times and node times in their
        metadata."""
        partitions = [tp for task in tasks for tp in task.partitions]
        try:
            committed = self._committed([TopicPartition(*tp) for tp in partitions], timeout=self._timeout)
        except KafkaException as exc:
            if is_transient(exc):
                raise _NotAnswered(str(exc)) from exc
            raise StreamsError(f"cannot read the committed offsets of {sorted(partitions)} to initialize the stream "
                               f"time of tasks {sorted(task.id for task in tasks)}: {exc}") from exc
        owner = {tp: task.id for task in tasks for tp in task.partitions}
        offsets, times, observed = {}, {}, {}
        for tp in committed:
            pair = (tp.topic, tp.partition)
            if tp.offset >= 0:
                offsets[pair] = tp.offset
                times[pair], observed[pair] = decode_offset_metadata(
                    tp.metadata, f"task {owner.get(pair)} {tp.topic}[{tp.partition}]")
        return offsets, times, observed

    # -- the reads of the stream-time partitions ----------------------------------------------------------------
    # A new task reads the tail of its partition (its last TAIL_RECORDS records), further back only while the tail
    # holds no record at or before a committed offset of the task, so a restart reads a bounded amount however long
    # the topic grew (the embedded broker never compacts it). The latest such record carries the task's time:
    # partition time only grows, and a task restarts from the time of the latest record that counted.
    #
    # The end is partition EOF (the fetched high watermark). The tail starts at librdkafka's logical offset
    # OFFSET_TAIL(TAIL_RECORDS): ListOffsets "latest" minus TAIL_RECORDS, at least 0, asked by the reader itself so
    # that nothing blocks the thread (on the embedded broker "latest" is a lower bound of the end, so the tail is at
    # least as long). One reader serves every read of the thread; it lives while there are reads.

    def _begin_reads(self, reads: list[_TailRead]) -> None:
        if not reads:
            return
        if self._reader is None:
            self._reader = Consumer(self._reader_config)
        for read in reads:
            self._reads[read.tp] = read
        self._assign(reads)

    def _assign(self, reads: Iterable[_TailRead]) -> None:
        """Give the reader ``reads``, each where it goes on (:meth:`_TailRead.resume_at`)."""
        assert self._reader is not None
        reads = list(reads)
        for topic in sorted({read.tp[0] for read in reads}):
            try:  # librdkafka resolves a logical offset at once when it knows the partition's leader, else 500 ms later
                self._reader.list_topics(topic, timeout=METADATA_WAIT_S)
            except KafkaException as exc:
                log.debug("no metadata of %s for the stream-time reader yet (%s); it asks again itself", topic, exc)
        self._reader.incremental_assign([TopicPartition(*read.tp, read.resume_at()) for read in reads])

    def _end_read(self, read: _TailRead) -> None:
        del self._reads[read.tp]
        assert self._reader is not None
        self._reader.incremental_unassign([TopicPartition(*read.tp)])
        if not self._reads:
            reader, self._reader = self._reader, None
            reader.close()

    def _take(self, timeout: float) -> None:
        """Apply what the reader fetched: records to their span, a span's end (partition EOF, or a record past its
        stop) to its read, which is then complete or goes further back."""
        assert self._reader is not None
        ended: dict[TP, int] = {}  # reads whose span ended in this batch: the span's end
        for message in self._reader.consume(10_000, timeout):
            tp = (message.topic(), message.partition())
            read = self._reads.get(tp)
            if read is None or tp in ended:  # not read (any more), or the rest of a span that just ended
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    read.moved = True
                    ended[tp] = message.offset() if read.stop is None else min(message.offset(), read.stop)
                elif is_transient(error):
                    read.problem = error.str()
                else:
                    raise StreamsError(f"cannot read the stream time of task {read.task.id} from {tp[0]}[{tp[1]}]: "
                                       f"{error.str()}")
                continue
            read.moved = True
            offset = message.offset()
            if read.start is None:
                read.start = offset
            if read.stop is not None and offset >= read.stop:
                ended[tp] = read.stop
                continue
            read.position = offset + 1
            task_id = message.key().decode() if message.key() is not None else None
            if task_id == read.task.id:
                read.span.append(decode_record(message.value(), f"{tp[0]}[{tp[1]}] offset {offset}"))
        for tp, end in ended.items():
            self._end_span(self._reads[tp], end)
        now = time.monotonic()
        for read in list(self._reads.values()):
            if read.moved:
                read.moved = False
                read.quiet_since = now
                self._timeouts.progressed(read.task)
            else:
                self._timeouts.failed(read.task, read.task.id, self._stalled(read))
        starved = [read for read in self._reads.values() if now - read.quiet_since >= STARVED_AFTER_S]
        if starved and int(self._reader_config["fetch.wait.max.ms"]) < STARVED_FETCH_WAIT_MS:
            self._widen_fetch_wait(starved)

    def _widen_fetch_wait(self, starved: list[_TailRead]) -> None:
        """``starved`` got neither a record nor partition EOF for STARVED_AFTER_S: go on with a reader that waits
        longer per fetch (:func:`starved_reader_config`), as the thread's later readers do. Every read goes on
        where it was."""
        assert self._reader is not None
        self._reader_config = starved_reader_config(self._reader_config)
        log.info("the stream-time reader got neither records nor partition EOF from %s for %.0f s: it goes on with "
                 "fetch.wait.max.ms=%s (a broker whose storage answers slower than the fetch wait brings nothing "
                 "within it: docs/broker-limits.md, fetch time budget)",
                 ", ".join(sorted(f"{read.tp[0]}[{read.tp[1]}]" for read in starved)), STARVED_AFTER_S,
                 self._reader_config["fetch.wait.max.ms"])
        self._reader.close()
        self._reader = Consumer(self._reader_config)
        now = time.monotonic()
        for read in self._reads.values():
            read.quiet_since = now
        self._assign(self._reads.values())

    def _end_span(self, read: _TailRead, end: int) -> None:
        """The span of ``read`` was read up to ``end``: initialize the task, or read the span before (four times
        as long) if nothing read so far counts."""
        if read.start is None:  # an empty tail
            read.start = end
        read.records = read.span + read.records
        read.span = []
        if read.start > 0 and read.committed and not time_at_offsets(read.records, read.committed):
            length = max(end - read.start, TAIL_RECORDS)
            read.stop, read.start, read.position = read.start, max(0, read.start - length * 4), None
            assert self._reader is not None
            self._reader.incremental_unassign([TopicPartition(*read.tp)])
            self._reader.incremental_assign([TopicPartition(*read.tp, read.start)])
            return
        self._end_read(read)
        self._initialize(read.task, read.committed, read.from_metadata, read.observed_metadata, read.records,
                         read.started)

    def _stalled(self, read: _TailRead) -> str:
        assert self._reader is not None
        _, high = self._reader.get_watermark_offsets(TopicPartition(*read.tp), cached=True) or (-1, -1)
        end = f"; the broker's last answer put its end at {high}" if high >= 0 else ""
        problem = f"; the reader says: {read.problem}" if read.problem else ""
        return (f"cannot read its stream time from {read.tp[0]}[{read.tp[1]}]: no partition EOF ({read.where()}"
                f"{end}){problem}")
