"""Stream time across restarts: where a task's partition times are kept at each commit, and read back when
the task is created again (after a crash, a rebalance, or on another instance).

Kafka Streams keeps each input partition's partition time (the highest timestamp processed from it) in the
offset commit's metadata and, when a task starts, sets its partition times from the committed offsets'
metadata (``StreamTask.initializeTaskTime``); the task's stream time is the highest of them. Without that, a
restarted task rebuilds stream time from the records it replays, so a record that is late (behind a window's
grace) but arrives first after the restart is counted instead of dropped, and may re-open a window whose
final result was already emitted.

Brook does the same (:func:`encode_offset_metadata`: a version byte and the time, base64, as Kafka Streams
encodes it), and — because a broker may drop commit metadata (the embedded broker does: README, broker
limits) — the tasks of every sub-topology with a logged store also write their partition times to
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
from typing import TYPE_CHECKING, Any, NamedTuple

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from streaming.errors import StreamsError
from streaming.naming import stream_time_topic
from streaming.runtime.client_configs import stream_time_reader_config
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
#: :meth:`StreamTimeRecovery._read_topics`): enough for the records of commits that failed after their write.
TAIL_RECORDS = 1_000
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
    """The stream-time topic of every sub-topology that keeps one, by sub-topology id."""
    return {sub.id: stream_time_topic(application_id, sub.id) for sub in topology.subtopologies()
            if keeps_stream_time(topology, sub)}


class StreamTimeRecovery:
    """Gives newly created tasks the stream time they had at their last commit.

    ``committed(partitions, timeout)`` is the main consumer's ``committed`` (the group's offsets with their
    metadata). ``topics``: the stream-time topic per sub-topology id (:func:`stream_time_topics`).
    """

    def __init__(self, committed: Callable[..., list[TopicPartition]], consumer_config: dict[str, Any],
                 topics: dict[int, str], timeout: float = 30.0) -> None:
        self._committed = committed
        self._reader_config = stream_time_reader_config(consumer_config)
        self._topics = topics
        self._timeout = timeout

    def recover(self, tasks: Iterable[StreamTask]) -> None:
        """Attach each task to its stream-time topic (if its sub-topology keeps one) and initialize its partition
        times: per input partition, the highest of the committed offset's metadata and the stream-time topic's
        records at or before that offset; and its node times (:meth:`StreamTask.observed_stream_time`) the same
        way, from the metadata and the records whose offsets are all committed."""
        tasks = list(tasks)
        if not tasks:
            return
        started = time.monotonic()
        for task in tasks:
            task.stream_time_topic = self._topics.get(task.subtopology.id)
        offsets, from_metadata, observed_metadata = self._read_committed(tasks)
        records = self._read_topics([task for task in tasks if task.stream_time_topic is not None], offsets)
        for task in tasks:
            committed = {tp: offsets[tp] for tp in task.partitions if tp in offsets}
            stored = time_at_offsets(records.get(task.id, []), committed)
            times = {tp: max(from_metadata.get(tp, UNKNOWN), stored.get(tp, UNKNOWN)) for tp in task.partitions}
            observed: dict[str, int] = {}
            for tp in committed:
                merge_max(observed, observed_metadata.get(tp, {}))
            merge_max(observed, observed_at_offsets(records.get(task.id, []), committed))
            task.initialize_stream_time(times, committed, observed)
            if any(ts != UNKNOWN for ts in times.values()):
                log.info("task %s goes on from stream time %d (partition times %s; from the commit metadata: %s, "
                         "from %s: %s; node times %s)", task.id, max(times.values()), times,
                         {tp: ts for tp, ts in from_metadata.items() if tp in committed},
                         task.stream_time_topic, stored or "none", observed or "none")
        log.info("stream time of tasks %s read in %.0f ms", sorted(task.id for task in tasks),
                 (time.monotonic() - started) * 1000)

    def _read_committed(self, tasks: list[StreamTask]) -> tuple[dict[TP, int], dict[TP, int], dict[TP, dict[str, int]]]:
        """The group's committed offsets of the tasks' partitions, and the partition times and node times in their
        metadata."""
        partitions = [tp for task in tasks for tp in task.partitions]
        try:
            committed = self._committed([TopicPartition(*tp) for tp in partitions], timeout=self._timeout)
        except KafkaException as exc:
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

    def _read_topics(self, tasks: list[StreamTask],
                     committed: dict[TP, int]) -> dict[str, list[StreamTimeRecord]]:
        """The records of the tasks' stream-time partitions that can decide their time, per task id: the tail of
        each partition (its last TAIL_RECORDS records), read further back only while the tail holds no record at
        or before a committed offset of the task, so a restart reads a bounded amount however long the topic grew
        (the embedded broker never compacts it). The latest such record carries the task's time: partition time
        only grows, and a task restarts from the time of the latest record that counted.

        The end is read from partition EOF (the fetched high watermark); ListOffsets "latest" only places the
        tail's start (on the embedded broker it is a lower bound of the end, so the tail is at least as long)."""
        if not tasks:
            return {}
        wanted = {(task.stream_time_topic, task.partition): task for task in tasks}
        reader = Consumer(self._reader_config)
        try:
            starts = {tp: max(0, self._end_hint(reader, tp) - TAIL_RECORDS) for tp in wanted}
            ends: dict[tuple[str, int], int] = {}
            records: dict[str, list[StreamTimeRecord]] = {}
            while starts:
                read, ends_read = self._read_from(reader, starts, ends, {task.id for task in tasks})
                ends.update(ends_read)
                further = {}
                for tp, start in starts.items():
                    task = wanted[tp]
                    records[task.id] = read.get(task.id, []) + records.get(task.id, [])
                    task_committed = {p: committed[p] for p in task.partitions if p in committed}
                    if start > 0 and task_committed and not time_at_offsets(records[task.id], task_committed):
                        further[tp] = max(0, start - (ends[tp] - start) * 4)
                        ends[tp] = start  # the next round reads the span before this one
                starts = further
        finally:
            reader.close()
        return records

    def _end_hint(self, reader: Consumer, tp: tuple[str, int]) -> int:
        """The partition's end offset as ListOffsets answers it (a lower bound on the embedded broker); 0 when
        it cannot be read (the tail is then the whole partition)."""
        try:
            return max(reader.get_watermark_offsets(TopicPartition(*tp), timeout=self._timeout, cached=False)[1], 0)
        except KafkaException as exc:
            log.warning("cannot read the end offset of %s[%d] (%s): reading it from the beginning", tp[0], tp[1], exc)
            return 0

    def _read_from(self, reader: Consumer, starts: dict[tuple[str, int], int], stops: dict[tuple[str, int], int],
                   ids: set[str]) -> tuple[dict[str, list[StreamTimeRecord]], dict[tuple[str, int], int]]:
        """The records of each stream-time partition from its start to its stop (partition EOF where there is no
        stop), per task id, and each partition's end: its EOF offset, or its stop."""
        reader.assign([TopicPartition(topic, partition, start) for (topic, partition), start in starts.items()])
        pending = set(starts)
        ends: dict[tuple[str, int], int] = {}
        records: dict[str, list[StreamTimeRecord]] = {}
        deadline = time.monotonic() + self._timeout
        try:
            while pending:
                if time.monotonic() > deadline:
                    raise StreamsError(f"cannot read the stream time of tasks {sorted(ids)}: no end of "
                                       f"{sorted(pending)} within {self._timeout:.0f} s")
                for message in reader.consume(10_000, 0.1):
                    tp = (message.topic(), message.partition())
                    if tp not in pending:
                        continue
                    error = message.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            pending.discard(tp)
                            ends[tp] = message.offset()
                            continue
                        raise StreamsError(f"cannot read the stream time of tasks {sorted(ids)} from "
                                           f"{tp[0]}[{tp[1]}]: {error.str()}")
                    if tp in stops and message.offset() >= stops[tp]:
                        pending.discard(tp)
                        ends[tp] = stops[tp]
                        continue
                    task_id = message.key().decode() if message.key() is not None else None
                    if task_id not in ids:
                        continue
                    records.setdefault(task_id, []).append(
                        decode_record(message.value(), f"{tp[0]}[{tp[1]}] offset {message.offset()}"))
        finally:
            reader.unassign()
        return records, ends
