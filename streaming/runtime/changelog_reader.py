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

from streaming.errors import ChangelogMissingError, StreamsError
from streaming.metrics.collector import RestoreSample
from streaming.runtime.client_configs import (
    STARVED_AFTER_S,
    STARVED_FETCH_WAIT_MS,
    restore_consumer_config,
    starved_reader_config,
)
from streaming.runtime.snapshots import NoSnapshots, SnapshotSource, seed_from_snapshots
from streaming.runtime.task_timeouts import DEFAULT_TASK_TIMEOUT_MS, TaskTimeouts, is_transient

log = logging.getLogger(__name__)

TP = tuple[str, int]
#: How long :meth:`StoreChangelogReader.end_offsets` waits for records or EOF per ``consume`` call.
END_OFFSETS_SLICE_S = 0.002
#: The end-offsets reader's fetch wait (measured on the embedded broker, 8 partitions: 0.03 s a call with the
#: restore consumer's 20 ms, 0.012 s with 5 ms).
END_OFFSETS_FETCH_WAIT_MS = 5
STALL_SECONDS = 2.0  # a restore with neither records nor EOF this long gets its start offset verified


class StateRestoreListener(Protocol):
    """Kafka Streams' ``StateRestoreListener``: called from the stream thread during restores.

    A listener may also define ``on_snapshot_restored(topic_partition, store_name, snapshot_id,
    next_offset, num_restored)``: a store loaded a snapshot (``state.snapshot.location``) and restores
    the changelog from ``next_offset`` on (then reported by the three methods below).
    """

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
    standby: bool = False  # a standby replica keeps tailing; it never completes
    restored: int = 0
    end: int = -1  # the changelog's end as last known (the high watermark of the last fetch)
    started: bool = False
    began_at: float = field(default_factory=time.monotonic)
    start_verified: bool = False  # the start offset was checked against the changelog's true end
    quiet_since: float = field(default_factory=time.monotonic)  # no record or partition EOF since (monotonic s)


class StoreChangelogReader:
    """Restores registered changelog partitions; ``restore()`` returns tasks whose stores are all done."""

    def __init__(self, consumer_config: dict[str, Any], listener: StateRestoreListener | None,
                 snapshots: SnapshotSource | None = None, timeouts: TaskTimeouts | None = None) -> None:
        self._config = restore_consumer_config(consumer_config)  # security included, group settings not
        self._group = self._config["group.id"]
        self._consumer = Consumer(self._config)
        self._listener = listener
        self._snapshots = snapshots or NoSnapshots()
        self._timeouts = timeouts or TaskTimeouts(DEFAULT_TASK_TIMEOUT_MS)  # the thread's task.timeout.ms deadlines
        self._restoring: dict[TP, _Restoring] = {}
        self._pending_tasks: dict[str, set[TP]] = {}
        # Of a task still restoring other stores: where its completed stores ended (for its checkpoint).
        self._completed: dict[str, dict[TP, int]] = {}
        self._last_log = 0.0
        self._end_offsets_starved = False  # end_offsets got no EOF with its short fetch wait once
        self.restored: dict[tuple[str, str, int], int] = {}  # (store, topic, partition) -> records applied

    @property
    def active(self) -> bool:
        """Whether an active task is restoring (its input waits for it)."""
        return any(not state.standby for state in self._restoring.values())

    @property
    def has_standbys(self) -> bool:
        return any(state.standby for state in self._restoring.values())

    def register(self, task: Any, offsets: dict[TP, int], stores: dict[TP, Any], standby: bool = False) -> None:
        """Restore ``stores`` of ``task`` from ``offsets``; an active task is returned by ``restore`` when
        done, a standby task keeps tailing its changelogs until unregistered. A store that would restore
        from offset 0 (no local state) first loads the newest snapshot, if there is one, and restores
        only the changelog after it."""
        offsets = seed_from_snapshots(self._snapshots, offsets, stores, self._listener)
        self._pending_tasks[task.id] = set(offsets)
        for tp, start in offsets.items():
            self._restoring[tp] = _Restoring(stores[tp], task, start, start, standby=standby)
        self._consumer.incremental_assign([TopicPartition(t, p, o) for (t, p), o in offsets.items()])

    def unregister(self, task_id: str) -> dict[TP, int]:
        """Stop restoring or tailing a task; returns the changelog positions its stores reached (those that
        completed their restore already included): what a checkpoint of the task may claim."""
        tps = self._pending_tasks.pop(task_id, set())
        positions = self._completed.pop(task_id, {})
        for tp in tps:
            state = self._restoring.pop(tp, None)
            if state is not None:
                positions[tp] = state.position
        if tps:
            self._consumer.incremental_unassign([TopicPartition(*tp) for tp in tps])
        return positions

    def restore(self, max_records: int, timeout: float) -> list[Any]:
        """Apply up to ``max_records`` changelog records; return the tasks that finished restoring."""
        messages = self._consumer.consume(max_records, timeout)
        finished: list[Any] = []
        batch: list[Any] = []  # consecutive records of one changelog partition
        batch_tp: TP | None = None
        for message in messages:
            error = message.error()
            tp = (message.topic(), message.partition())
            if tp != batch_tp and batch:
                self._apply(batch_tp, batch)  # type: ignore[arg-type]
                batch = []
            batch_tp = tp
            if error is None:
                batch.append(message)
            elif error.code() == KafkaError._PARTITION_EOF:
                if batch:
                    self._apply(tp, batch)
                    batch = []
                task = self._complete(tp, message.offset())
                if task is not None:
                    finished.append(task)
            else:
                raise self._restore_error(tp, error)
        if batch and batch_tp is not None:
            self._apply(batch_tp, batch)
        finished.extend(self._complete_caught_up())
        self._widen_fetch_wait_if_starved()
        self._learn_ends()
        self._verify_silent_starts()
        self._log_progress()
        return finished

    def _restore_error(self, tp: TP, error: KafkaError) -> StreamsError:
        state = self._restoring.get(tp)
        what = f"store {state.store.name!r} of task {state.task.id}" if state is not None else "a store"
        position = f" at offset {state.position}" if state is not None else ""
        if error.code() != KafkaError._AUTO_OFFSET_RESET:
            return StreamsError(f"cannot restore {what} from changelog {tp[0]}[{tp[1]}]{position}: {error.str()}")
        return ChangelogMissingError(
            f"cannot restore {what}: changelog {tp[0]}[{tp[1]}] has no record{position} ({error.str()}). Local "
            f"state (its checkpoint) or the snapshot claims offsets the changelog does not have: the topic was "
            f"recreated (an application reset, a broker that lost its storage) or truncated below what is "
            f"covered. Restoring anyway would silently lose state. If the changelog was recreated, delete this "
            f"application's local state (KafkaStreams.cleanup()); if it was truncated, restore from the newest "
            f"changelog snapshot.",
            summary=f"cannot restore {what}: changelog {tp[0]}[{tp[1]}] has no record{position}, which local state "
                    f"or the snapshot claims (the topic was recreated or truncated)",
            app_dir=state.task.state.app_dir if state is not None else None)

    def _widen_fetch_wait_if_starved(self) -> None:
        """An active restore that got neither a record nor partition EOF for STARVED_AFTER_S is starved by a short
        fetch wait (:func:`starved_reader_config`): go on with a restore consumer that waits longer per fetch. Every
        changelog partition (standbys too) goes on from its position. Standbys alone never count: one that caught
        up gets nothing until its changelog grows."""
        if int(self._config["fetch.wait.max.ms"]) >= STARVED_FETCH_WAIT_MS:
            return
        now = time.monotonic()
        starved = sorted(f"{tp[0]}[{tp[1]}]" for tp, state in self._restoring.items()
                         if not state.standby and now - state.quiet_since >= STARVED_AFTER_S)
        if not starved:
            return
        self._config = starved_reader_config(self._config)
        log.info("the restore consumer got neither records nor partition EOF from %s for %.0f s: it goes on with "
                 "fetch.wait.max.ms=%s (a broker whose storage answers slower than the fetch wait brings nothing "
                 "within it: docs/broker-limits.md, fetch time budget)", ", ".join(starved), STARVED_AFTER_S,
                 self._config["fetch.wait.max.ms"])
        self._consumer.close()
        self._consumer = Consumer(self._config)
        for state in self._restoring.values():
            state.quiet_since = now
        if self._restoring:
            self._consumer.incremental_assign([TopicPartition(*tp, state.position)
                                               for tp, state in self._restoring.items()])

    def _learn_ends(self) -> None:
        """Note the end of each changelog partition whose restore has not started (no record applied yet) once a
        fetch told it (the cached high watermark: no request), so the records left to restore count it from the
        first fetch on, not only from its first record."""
        for tp, state in self._restoring.items():
            if not state.started and state.end < 0:
                _, high = self._consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)
                if high >= 0:
                    state.end = max(high, state.start)

    def _verify_silent_starts(self) -> None:
        """A restore that got neither records nor EOF for a while may start past the changelog's end: Kafka
        answers such a fetch with OFFSET_OUT_OF_RANGE, but the embedded broker answers it with nothing at
        all, which would leave the task restoring forever. Compare the start with the true end, once. If the broker
        does not tell the end, look again STALL_SECONDS later, under task.timeout.ms (Kafka Streams rethrows a
        timeout of the changelog reader's offset lookups "to trigger task.timeout.ms")."""
        now = time.monotonic()
        silent = [tp for tp, state in self._restoring.items()
                  if not state.started and not state.start_verified and now - state.began_at > STALL_SECONDS]
        if not silent:
            return
        try:
            ends = self.end_offsets(silent)
        except KafkaException as exc:
            if not is_transient(exc):
                raise
            for tp in silent:
                state = self._restoring[tp]
                state.began_at = now
                self._timeouts.failed(state.task, state.task.id, f"cannot read the end of changelog {tp[0]}[{tp[1]}] "
                                                                 f"to check where store {state.store.name!r} restores "
                                                                 f"from (offset {state.start}): {exc}")
            return
        for tp in silent:
            state = self._restoring[tp]
            self._timeouts.progressed(state.task)
            state.start_verified = True
            if state.end < 0:
                state.end = max(ends[tp], state.start)
            if state.start > ends[tp]:
                state.position = state.start
                raise ChangelogMissingError(
                    f"cannot restore store {state.store.name!r} of task {state.task.id}: changelog "
                    f"{tp[0]}[{tp[1]}] ends at offset {ends[tp]}, but local state (its checkpoint) or the snapshot "
                    f"covers it up to offset {state.start}: the topic was recreated (an application reset, a broker "
                    f"that lost its storage) under older local state or an older snapshot. Restoring anyway would "
                    f"silently keep state the changelog no longer has. Delete this application's local state "
                    f"({state.task.state.app_dir}, what KafkaStreams.cleanup() removes) and the store's snapshots "
                    f"under state.snapshot.location, and start again.",
                    summary=f"cannot restore store {state.store.name!r} of task {state.task.id}: changelog "
                            f"{tp[0]}[{tp[1]}] ends at offset {ends[tp]}, but local state covers it up to offset "
                            f"{state.start} (the topic was recreated: a reset, or a new broker)",
                    app_dir=state.task.state.app_dir)

    def _complete_caught_up(self) -> list[Any]:
        """Complete active restores whose position reached the high watermark of the last fetch (the
        EOF event may come a fetch later)."""
        finished = []
        for tp, state in list(self._restoring.items()):
            if state.standby or not state.started:
                continue
            _, high = self._consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)
            if high >= 0 and state.position >= high:
                task = self._complete(tp, high)
                if task is not None:
                    finished.append(task)
        return finished

    def _begin(self, tp: TP, state: _Restoring) -> None:
        state.started = True
        _, high = self._consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)
        end = state.end = max(high, state.start)
        log.info("restoring store %r of task %s from %s[%d] offsets %d..%d", state.store.name, state.task.id,
                 tp[0], tp[1], state.start, end)
        if self._listener is not None:
            self._listener.on_restore_start(tp, state.store.name, state.start, end)

    def _apply(self, tp: TP, messages: list[Any]) -> None:
        state = self._restoring.get(tp)
        if state is None:
            return
        if not state.started:
            self._begin(tp, state)
        # Only a key's last record in the batch counts: every store writes a batch as one RocksDB WriteBatch (or
        # applies it in order), so an earlier value of the same key would be overwritten anyway.
        if state.store.timestamped:  # the record's timestamp is the value's
            latest = {m.key(): m for m in messages}
            state.store.restore_batch([(key, m.value(), m.timestamp()[1]) for key, m in latest.items()])
        else:
            state.store.restore_batch(list({m.key(): m.value() for m in messages}.items()))
        end = messages[-1].offset() + 1
        state.restored += len(messages)
        state.position = end
        state.quiet_since = time.monotonic()
        _, high = self._consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)
        state.end = max(state.end, high, end)
        key = (state.store.name, *tp)
        self.restored[key] = self.restored.get(key, 0) + len(messages)
        if self._listener is not None:
            self._listener.on_batch_restored(tp, state.store.name, end, len(messages))

    def _complete(self, tp: TP, end_offset: int) -> Any:
        standby = self._restoring.get(tp)
        if standby is not None and standby.standby:  # caught up; keep tailing
            standby.position = max(standby.position, end_offset)
            return None
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
                self._completed.pop(state.task.id, None)
                return state.task
            self._completed.setdefault(state.task.id, {})[tp] = max(state.position, end_offset)
        return None

    def progress(self) -> list[RestoreSample]:
        """Every changelog partition registered for restore or tailing, started or not, with the records left to its
        known end: from the first fetch's high watermark on (:meth:`_learn_ends`), before the first record is
        applied; 0 only while no fetch has told the end yet. Read by the metrics collector."""
        return [RestoreSample(state.task.id, state.store.name, tp[0], tp[1],
                              max(state.end - state.position, 0) if state.end >= 0 else 0, state.standby)
                for tp, state in list(self._restoring.items())]

    def _log_progress(self) -> None:
        now = time.monotonic()
        if now - self._last_log < 5 or not self._restoring:
            return
        self._last_log = now
        done = sum(s.restored for s in self._restoring.values())
        log.info("restoring %d changelog partitions: %d records so far", len(self._restoring), done)

    def end_offsets(self, tps: list[TP], timeout: float = 10.0) -> dict[TP, int]:
        """True end offsets of changelog partitions, for checkpoints.

        ListOffsets "latest" is only a lower bound on the embedded broker (the last batch's base + 1),
        so read from it to partition EOF, whose offset comes from the fetch high watermark: exact on
        any broker, at the cost of re-reading at most one batch per partition.

        The reader's fetch wait is :data:`END_OFFSETS_FETCH_WAIT_MS` (librdkafka reports EOF after a fetch that
        found nothing more, which the broker holds for the whole wait): a close pays ~10 ms here, not 30-40. A
        reader that gets no EOF within ``STARVED_AFTER_S`` (the embedded broker on S3 storage under load:
        :func:`starved_reader_config`) goes on with the longer wait, and so does every later call.
        """
        if not tps:
            return {}
        # One ListOffsets request for every partition (the timestamp -1 asks for "latest"), not one per partition.
        latest = self._consumer.offsets_for_times([TopicPartition(*tp, -1) for tp in tps], timeout=timeout)
        lower = {}
        for tp in latest:
            if tp.error is not None:
                raise KafkaException(tp.error)
            lower[(tp.topic, tp.partition)] = max(tp.offset, 0)
        base = {**self._config, "group.id": f"{self._group}-end-offsets"}
        starved = self._end_offsets_starved or int(base["fetch.wait.max.ms"]) >= STARVED_FETCH_WAIT_MS
        wait = min(int(base["fetch.wait.max.ms"]), END_OFFSETS_FETCH_WAIT_MS)
        reader = Consumer(starved_reader_config(base) if starved else {**base, "fetch.wait.max.ms": str(wait)})
        ends: dict[TP, int] = {}
        try:
            reader.assign([TopicPartition(t, p, o) for (t, p), o in lower.items()])
            started = time.monotonic()
            deadline = started + timeout
            while len(ends) < len(tps):
                now = time.monotonic()
                if now > deadline:
                    missing = sorted(set(tps) - set(ends))
                    raise KafkaException(KafkaError(KafkaError._TIMED_OUT,
                                                    f"no partition EOF for changelogs {missing} within {timeout} s"))
                if not starved and now - started >= STARVED_AFTER_S:
                    starved = self._end_offsets_starved = True
                    log.info("the changelog end-offsets reader got no partition EOF within %.0f s: it goes on with "
                             "the longer fetch wait of a starved reader, now and at every later call "
                             "(docs/broker-limits.md, fetch time budget)", STARVED_AFTER_S)
                    reader.close()
                    reader = Consumer(starved_reader_config(base))
                    reader.assign([TopicPartition(t, p, o) for (t, p), o in lower.items() if (t, p) not in ends])
                # consume(n, timeout) waits the whole timeout unless n came: short slices, so the ends are known
                # a slice after the last EOF arrived.
                for message in reader.consume(10_000, END_OFFSETS_SLICE_S):
                    error = message.error()
                    tp = (message.topic(), message.partition())
                    if error is None:
                        ends.pop(tp, None)
                    elif error.code() == KafkaError._PARTITION_EOF:
                        ends[tp] = message.offset()
                    else:
                        raise KafkaException(error)
        finally:
            reader.close()
        return ends

    def close(self) -> None:
        self._consumer.close()
