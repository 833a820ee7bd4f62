"""StoreChangelogReader: rebuilds stores from their changelog partitions before tasks process.

One restore consumer per stream thread (no consumer group: it assigns partitions itself). A restore
is complete when the consumer reports partition EOF, which librdkafka derives from the high
watermark of the fetch responses — never from ListOffsets "latest", which the embedded broker
answers wrongly. Progress goes to the state restore listener and the log.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

log = logging.getLogger(__name__)

TP = tuple[str, int]


class StateRestoreListener(Protocol):
    """Kafka Streams' ``StateRestoreListener``: called from the stream thread during restores."""

    def on_restore_start(self, topic_partition: TP, store_name: str, start_offset: int, end_offset: int) -> None: ...
    def on_batch_restored(self, topic_partition: TP, store_name: str, batch_end_offset: int,
                          num_restored: int) -> None: ...
    def on_restore_end(self, topic_partition: TP, store_name: str, total_restored: int) -> None: ...


@dataclass
class _Restoring:
    store: Any
    task: Any
    start: int
    position: int
    restored: int = 0
    started: bool = False
    began_at: float = field(default_factory=time.monotonic)


class StoreChangelogReader:
    """Restores registered changelog partitions; ``restore()`` returns tasks whose stores are all done."""

    def __init__(self, consumer_config: dict[str, Any], listener: StateRestoreListener | None) -> None:
        config = {key: value for key, value in consumer_config.items()
                  if key not in ("group.id", "partition.assignment.strategy", "session.timeout.ms",
                                 "heartbeat.interval.ms", "group.instance.id", "enable.auto.offset.store")}
        self._consumer = Consumer({**config, "group.id": f"{consumer_config['group.id']}-restore",
                                   "enable.auto.commit": "false", "enable.partition.eof": "true"})
        self._listener = listener
        self._restoring: dict[TP, _Restoring] = {}
        self._pending_tasks: dict[str, set[TP]] = {}
        self._last_log = 0.0

    @property
    def active(self) -> bool:
        return bool(self._restoring)

    def register(self, task: Any, offsets: dict[TP, int], stores: dict[TP, Any]) -> None:
        """Restore ``stores`` of ``task`` from ``offsets``; the task is returned by ``restore`` when done."""
        self._pending_tasks[task.id] = set(offsets)
        for tp, start in offsets.items():
            self._restoring[tp] = _Restoring(stores[tp], task, start, start)
        self._consumer.incremental_assign([TopicPartition(t, p, o) for (t, p), o in offsets.items()])

    def unregister(self, task_id: str) -> None:
        """Stop restoring a task (it was revoked while restoring)."""
        tps = self._pending_tasks.pop(task_id, set())
        for tp in tps:
            self._restoring.pop(tp, None)
        if tps:
            self._consumer.incremental_unassign([TopicPartition(*tp) for tp in tps])

    def restore(self, max_records: int, timeout: float) -> list[Any]:
        """Apply up to ``max_records`` changelog records; return the tasks that finished restoring."""
        messages = self._consumer.consume(max_records, timeout)
        finished: list[Any] = []
        batch: list[tuple[bytes, bytes | None]] = []
        batch_tp: TP | None = None
        last_offset = -1
        for message in messages:
            error = message.error()
            tp = (message.topic(), message.partition())
            if tp != batch_tp and batch:
                self._apply(batch_tp, batch, last_offset)  # type: ignore[arg-type]
                batch = []
            batch_tp = tp
            if error is None:
                batch.append((message.key(), message.value()))
                last_offset = message.offset()
            elif error.code() == KafkaError._PARTITION_EOF:
                if batch:
                    self._apply(tp, batch, last_offset)
                    batch = []
                task = self._complete(tp, message.offset())
                if task is not None:
                    finished.append(task)
            else:
                raise KafkaException(error)
        if batch and batch_tp is not None:
            self._apply(batch_tp, batch, last_offset)
        self._log_progress()
        return finished

    def _begin(self, tp: TP, state: _Restoring) -> None:
        state.started = True
        _, high = self._consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)
        end = max(high, state.start)
        log.info("restoring store %r of task %s from %s[%d] offsets %d..%d", state.store.name, state.task.id,
                 tp[0], tp[1], state.start, end)
        if self._listener is not None:
            self._listener.on_restore_start(tp, state.store.name, state.start, end)

    def _apply(self, tp: TP, batch: list[tuple[bytes, bytes | None]], last_offset: int) -> None:
        state = self._restoring.get(tp)
        if state is None:
            return
        if not state.started:
            self._begin(tp, state)
        state.store.restore_batch(batch)
        state.restored += len(batch)
        state.position = last_offset + 1
        if self._listener is not None:
            self._listener.on_batch_restored(tp, state.store.name, last_offset + 1, len(batch))

    def _complete(self, tp: TP, end_offset: int) -> Any:
        state = self._restoring.pop(tp, None)
        if state is None:
            return None
        if not state.started:
            self._begin(tp, state)
        seconds = time.monotonic() - state.began_at
        log.info("restored store %r of task %s: %d records in %.2f s", state.store.name, state.task.id,
                 state.restored, seconds)
        if self._listener is not None:
            self._listener.on_restore_end(tp, state.store.name, state.restored)
        self._consumer.incremental_unassign([TopicPartition(*tp)])
        pending = self._pending_tasks.get(state.task.id)
        if pending is not None:
            pending.discard(tp)
            if not pending:
                del self._pending_tasks[state.task.id]
                return state.task
        return None

    def _log_progress(self) -> None:
        now = time.monotonic()
        if now - self._last_log < 5 or not self._restoring:
            return
        self._last_log = now
        done = sum(s.restored for s in self._restoring.values())
        log.info("restoring %d changelog partitions: %d records so far", len(self._restoring), done)

    def end_offsets(self, tps: list[TP], timeout: float = 10.0) -> dict[TP, int]:
        """Changelog end offsets from ListOffsets: exact on Kafka, a lower bound on the embedded broker
        (fine for checkpoints: restoring from a lower bound re-applies a few records, idempotently)."""
        offsets = {}
        for tp in tps:
            _, high = self._consumer.get_watermark_offsets(TopicPartition(*tp), timeout=timeout, cached=False)
            offsets[tp] = max(high, 0)
        return offsets

    def close(self) -> None:
        self._consumer.close()
