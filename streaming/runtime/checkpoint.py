"""The commit path: the one order in which a stream thread, the task manager and the test driver commit.

1. **Stores and caches.** Every task flushes its stores (a cache forwards what it holds downstream, so
   outputs and changelog writes reach the producer), sends its partition times to its stream-time topic if
   it keeps one, and reports the offsets it processed; each offset carries its partition's time as metadata
   (:mod:`streaming.runtime.stream_time`). Then it flushes its external sinks (a database table:
   :mod:`streaming.runtime.external_sinks`); a task whose sink cannot write reports no offsets (under
   exactly-once nothing is committed: the tasks share the transaction).
2. **Producer.** The collector waits until every output, changelog write and dead letter is acknowledged;
   a failed delivery goes to ``production.exception.handler`` or raises :class:`ProductionError` (then
   nothing is committed, and the input is read again: at-least-once).
3. **Offsets.** The producer commits the offsets (:meth:`StreamsProducer.commit`: to the consumer group
   under at-least-once; with the transaction under exactly-once, where every task of the thread commits
   together because they share the transaction), then starts the next unit of work. Under exactly-once a
   transaction that cannot commit is aborted and :class:`~streaming.errors.TaskMigratedError` or
   :class:`~streaming.errors.TaskCorruptedError` is raised: the stream thread closes its tasks dirty and
   wipes their state (:meth:`StreamThread._recover_transaction`), so no checkpoint is written for them.
4. **Checkpoint files.** Only when tasks close cleanly, after their stores closed (RocksDB flushed its
   memtables), each writes the changelog offsets its local state covers (:func:`write_checkpoints`), so
   a restart restores only the changelog's tail. A task that opens without a checkpoint wipes its
   persistent logged stores and restores them from the changelog (a crash, or a dirty close, leaves none).
"""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import TopicPartition

from streaming.runtime.record_collector import RecordCollector
from streaming.runtime.task import StreamTask
from streaming.runtime.transactions import TransactionalProducer


def commit(tasks: Sequence[StreamTask], collector: RecordCollector) -> bool:
    """Steps 1-3 for ``tasks``. False if the offsets were refused (the group moved on): the tasks keep their
    uncommitted offsets, and whoever owns the partitions next re-reads from the last commit."""
    per_task = {task.id: task.prepare_commit() for task in tasks}
    producer = collector.producer
    if isinstance(producer, TransactionalProducer) and any(task.sinks_blocked for task in tasks):
        # The tasks share one transaction: committing it would commit a blocked task's changelog writes without
        # its offsets. It stays open until every external sink has written (or it times out and is recovered).
        return False
    collector.flush()
    offsets = [TopicPartition(topic, partition, offset, metadata=task.offset_metadata((topic, partition)))
               for task in tasks for (topic, partition), offset in per_task[task.id].items()]
    if not producer.commit(offsets):
        return False
    for task in tasks:
        task.post_commit(per_task[task.id])
    producer.begin()
    return True


def write_checkpoints(tasks: Sequence[StreamTask], changelog_ends: dict[tuple[str, int], int]) -> None:
    """Step 4, for tasks whose stores are closed: record the changelog offsets their local state covers."""
    for task in tasks:
        task.state.write_checkpoint(changelog_ends)
