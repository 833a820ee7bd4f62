"""The stream-time records of a re-sharded sub-topology's new tasks.

A stateful sub-topology's tasks keep their stream time in ``<application.id>-<subtopology>-stream-time``, one
record per task keyed by the task id (:mod:`streaming.runtime.stream_time`). Task ids do not re-hash: after
re-sharding, each new task holds keys from every old task (scaling up) or the keys of several (scaling down). So
every new task starts from the *highest* time of the old tasks: per input topic, the highest partition time
among the topic's old partitions; per node (windowed aggregation, suppression, stream-stream join), the highest
node time among the old tasks.

Why the highest (Kafka Streams' semantics): stream time never goes back (``PartitionGroup`` and
``StreamTask.initializeTaskTime`` keep the highest time seen; ``ProcessorMetadata.update`` the highest node
time). A window that an old task closed — its final result emitted by ``suppress``, its late records dropped —
lives on in a new task after the re-shard, and must stay closed there: a lower time would take late records into
it again and emit a second final result. Scaling down merges tasks, and a merged task's stream time is the
highest of its partitions' in Kafka Streams anyway. The cost: a key whose old task lagged behind the others may
see a record dropped as late that its old task would still have taken; the drain before scaling (every input
read to its end) makes that gap the disorder the old tasks had between each other at the end.

Each record names, per partition, the next offset to read; a new task counts a record only at or before its
committed offsets, so the new records carry the offsets the scaling job commits for the group on the new
generation: the ends of what it copied.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from streaming.runtime.stream_time import UNKNOWN, StreamTimeRecord, decode_record, encode_record
from streaming.runtime.task import task_id_of

__all__ = ["new_stream_time_records", "old_stream_times"]


def old_stream_times(records: Iterable[tuple[bytes, bytes | None]], where: str) -> tuple[dict[str, int],
                                                                                            dict[str, int]]:
    """From the old generation's stream-time records ``(task id, value)`` (a tombstone forgets its task), the
    highest partition time per input topic and the highest time per node, over the latest record of every task.
    ``where`` names the topic in errors."""
    latest: dict[bytes, StreamTimeRecord] = {}
    for task_id, value in records:
        if value is None:
            latest.pop(task_id, None)
        else:
            latest[task_id] = decode_record(value, f"{where} (task {task_id.decode(errors='replace')})")
    topics: dict[str, int] = {}
    nodes: dict[str, int] = {}
    for record in latest.values():
        for (topic, _), (ts, _) in record.partitions.items():
            topics[topic] = max(topics.get(topic, UNKNOWN), ts)
        for node, ts in record.observed.items():
            nodes[node] = max(nodes.get(node, UNKNOWN), ts)
    return topics, nodes


def new_stream_time_records(subtopology: int, topic_times: Mapping[str, int], node_times: Mapping[str, int],
                            renamed: Mapping[str, str], committed: Mapping[tuple[str, int], int],
                            partitions: int) -> dict[int, tuple[bytes, bytes]]:
    """The stream-time record ``(key, value)`` of each new task ``<subtopology>_<p>`` (``p`` < ``partitions``), by
    partition ``p`` (module doc). ``topic_times``/``node_times``: the old tasks' highest times
    (:func:`old_stream_times`); ``renamed``: old physical source topic -> new physical name; ``committed``: the
    group's offsets on the new generation ``(new topic, p)`` -> offset (a partition without one is left out, as a
    task leaves out a partition it has not read). A task with no time known gets no record."""
    records = {}
    for p in range(partitions):
        times = {(renamed.get(topic, topic), p): (ts, committed[(renamed.get(topic, topic), p)])
                 for topic, ts in topic_times.items()
                 if ts != UNKNOWN and (renamed.get(topic, topic), p) in committed}
        if not times:
            continue
        records[p] = (task_id_of(subtopology, p).encode(), encode_record(times, dict(node_times)))
    return records
