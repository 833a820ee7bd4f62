"""StreamThread: the poll / process / punctuate / commit loop of one consumer."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    ConsumerGroupState,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from streaming.config import SHED, StreamsConfig
from streaming.errors import ProducerFatalError, StreamsError, TaskCorruptedError, TaskMigratedError
from streaming.metrics.collector import BackpressureSample, TaskSample, ThreadSample
from streaming.metrics.histogram import Histogram
from streaming.naming import alerts_topic, dead_letter_topic, is_stream_time_topic, shed_topic, store_of_changelog
from streaming.runtime.changelog_reader import StateRestoreListener, StoreChangelogReader
from streaming.runtime.dead_letters import DeadLetterWriter
from streaming.runtime.error_handlers import configured_handlers
from streaming.runtime.idle_watchdog import IdleWatchdog, watched_topics
from streaming.runtime.load_shedding import LoadShedder
from streaming.runtime.rate_limit import thread_rate_limiter
from streaming.runtime.record_collector import KafkaRecordCollector
from streaming.runtime.snapshots import SnapshotSource
from streaming.runtime.state_directory import StateDirectory
from streaming.runtime.stream_time import StreamTimeRecovery, stream_time_topics
from streaming.runtime.streams_producer import streams_producer
from streaming.runtime.task import StreamTask
from streaming.runtime.task_manager import TaskManager, as_pairs
from streaming.runtime.task_timeouts import TaskTimeouts
from streaming.runtime.transactions import TransactionalProducer
from streaming.topology.topology import Topology

log = logging.getLogger(__name__)


WAITING_LOG_S = 5.0
#: A stopping thread that waits for its assignment, or cannot read its group's state, polls this long before it
#: leaves, and while it waits for an assignment (or for a forming group to form) at most :data:`CLOSE_JOIN_WAIT_S`
#: more (see :meth:`StreamThread._finish_join`).
CLOSE_SETTLE_S = 1.0
CLOSE_JOIN_WAIT_S = 10.0
#: How long a stopping thread waits for the group coordinator's answer to DescribeGroups (~1 ms on the embedded
#: broker) before it settles instead (see :meth:`StreamThread._finish_join`).
GROUP_STATE_TIMEOUT_S = 1.0
#: Before it reads the group's state, a stopping thread with company waits a random time up to this long: of members
#: stopped in the same instant, one then most likely reads the state after the other's leave (see
#: :meth:`StreamThread._finish_join`).
LEAVE_JITTER_S = 0.1
#: The group states in which a stopping thread leaves at once: formed, or no member left (nothing waits on it).
LEAVE_AT_ONCE_STATES = frozenset({ConsumerGroupState.STABLE, ConsumerGroupState.EMPTY})
#: An idle thread waits for records ``poll.ms`` at most, in slices this long (a close is seen within one slice).
IDLE_WAIT_SLICE_S = 0.01
LAG_INTERVAL_MS = 1000  # how often the loop refreshes the lag per input partition (for /metrics)
#: Processing goes round the tasks a chunk of records each; after each round the chunk is sized from the
#: measured time per record so that a round takes about this share of ``max.poll.processing.ms`` (at most
#: ``consumer.max.poll.records``), so the loop checks its time budget often without checking per record.
ROUND_SHARE = 0.25
#: The chunk of the first round, before any time per record is known.
FIRST_CHUNK = 100
#: The time per record is a running average over rounds, each round's weight decaying by this factor per round
#: (records cost unevenly: one slow record among a hundred fast ones must not make the next chunk huge).
RECORD_TIME_DECAY = 0.9


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class StreamThread(threading.Thread):
    """Polls its consumer, hands each partition's records to the owning task, punctuates, commits.

    Commits every ``commit.interval.ms`` (or sooner when a processor asks), on revocation, and on a
    clean shutdown. A fatal error stops the thread without committing: uncommitted input is
    re-read by whoever owns the partitions next (at-least-once). Under ``exactly_once_v2`` a failed
    transaction is recovered from (:meth:`_recover_transaction`) rather than fatal, and so is, under
    ``at_least_once``, a fatal error of the idempotent producer (:class:`~streaming.errors.ProducerFatalError`).
    """

    def __init__(self, name: str, topology: Topology, config: StreamsConfig,
                 on_state: Callable[[StreamThread, str], None],
                 restore_listener: StateRestoreListener | None = None,
                 partition_counts: dict[str, int] | None = None, directory: StateDirectory | None = None,
                 hosts_standbys: bool = True, snapshots: SnapshotSource | None = None, index: int = 1,
                 *, process_id: str, alone_in_group: Callable[[], bool] = lambda: False,
                 settle_on_leave: bool = True) -> None:
        super().__init__(name=name, daemon=True)
        self.config = config
        self._on_state = on_state
        self._alone_in_group = alone_in_group  # asked when stopping: may it leave without settling?
        self._settle_on_leave = settle_on_leave  # False: the broker has no group-leave defect to work around
        self.settled_before_leaving: bool | None = None  # how the thread left its group (None: not yet)
        self._stopping = threading.Event()
        self._clean_shutdown = True
        self.exception: BaseException | None = None
        self.admin = AdminClient(config.admin_config())
        group_instance_id = config.group_instance_id(index)
        static = {"group.instance.id": group_instance_id} if group_instance_id else {}  # static membership
        self.consumer = Consumer({**config.consumer_config(), **static})
        dlq = dead_letter_topic(config.application_id)
        shed, alerts = shed_topic(config.application_id), alerts_topic(config.application_id)
        self.collector = KafkaRecordCollector(
            lambda on_delivery_error: streams_producer(config, self.consumer, on_delivery_error, index,
                                                        process_id), self.admin,
            always_fail=lambda topic: topic in (dlq, shed, alerts)
            or store_of_changelog(config.application_id, topology.generations.logical(topic)) is not None
            or is_stream_time_topic(config.application_id, topology.generations.logical(topic)))
        self.errors = self.collector.errors = configured_handlers(
            config, DeadLetterWriter(config.application_id, dlq, self.collector.send))
        task_timeouts = TaskTimeouts(config["task.timeout.ms"])  # a new task the broker holds up is retried
        self.changelog_reader = StoreChangelogReader(
            config.consumer_config(), restore_listener, snapshots, task_timeouts)
        self.tasks = TaskManager(topology, config, self.collector, wall_clock_ms, self.changelog_reader,
                                 partition_counts, directory=directory, hosts_standbys=hosts_standbys,
                                 errors=self.errors, stream_times=StreamTimeRecovery(
                                     self.consumer.committed, config.consumer_config(),
                                     stream_time_topics(topology, config.application_id), timeouts=task_timeouts))
        self.collector.name_inputs(self._uncommitted_inputs)
        self._offset_resets = self.tasks.offset_resets()
        self._cooperative = "cooperative" in config.consumer_config().get("partition.assignment.strategy", "")
        self._paused: set[tuple[str, int]] = set()  # paused by backpressure (see _pause_full)
        self._sink_paused: set[tuple[str, int]] = set()  # paused while their task's external sink is down
        self.sink_pauses = 0  # times a task's input was paused because an external sink could not write
        self._processing_budget = config["max.poll.processing.ms"] / 1000 or float("inf")
        self._chunk = min(FIRST_CHUNK, config.max_poll_records)  # records per task per processing round (ROUND_SHARE)
        self._round_seconds = self._round_records = 0.0  # decayed sums behind the time per record (_size_chunk)
        self._rate_limiter = thread_rate_limiter(config["processing.rate.limit.records"],
                                                 config["processing.rate.limit.bytes"], config["num.stream.threads"])
        self._shedder = self._load_shedder(partition_counts or {}) \
            if config["processing.overflow.policy"] == SHED else None
        self._watchdog = IdleWatchdog(
            config.application_id, name, config["processing.idle.timeout.ms"], watched_topics(config, topology),
            self.collector.send, alerts) if config["processing.idle.timeout.ms"] else None
        self.backpressure_pauses = 0  # partitions paused because their buffer was full
        self.backpressure_resumes = 0
        self.time_cap_hits = 0  # loop iterations that stopped processing at max.poll.processing.ms
        self.throttled_seconds = 0.0  # time the rate limit held the thread back
        self._start_offsets: dict[tuple[str, int], int] = {}  # see _start_offset
        self._waiting_since: float | None = None  # since when the thread waits for an assignment
        self._last_waiting_log = 0.0
        self.processed = 0
        # The processing span (time.perf_counter(), set per processing round, never per record): when the first
        # round that processed records ended and how many it processed, and when the last such round ended.
        self.first_processed_at: float | None = None
        self.first_processed = 0
        self.last_processed_at: float | None = None
        self.rebalances = 0
        self.process_latency = Histogram()  # per loop iteration that processed records
        self.e2e_latency = Histogram()  # per such iteration, its last record: its timestamp to the end of processing
        self.lag: dict[tuple[str, int], int] = {}  # per input partition, refreshed every LAG_INTERVAL_MS

    def _load_shedder(self, partition_counts: dict[str, int]) -> LoadShedder:
        """``processing.overflow.policy=shed``: the shedder over this thread's rate limit (the config check made
        sure there is one), diverting to ``<application.id>-shed`` if ``processing.overflow.shed.divert``."""
        assert self._rate_limiter is not None
        topic = shed_topic(self.config.application_id)
        divert = (self.collector.send, topic, partition_counts.get(topic, 1)) \
            if self.config["processing.overflow.shed.divert"] else None
        return LoadShedder(self._rate_limiter, divert)

    def _uncommitted_inputs(self, topic: str) -> str:
        """What the error of a failed delivery to ``topic`` adds: the input records it may be the output of, those
        the tasks writing to ``topic`` processed since their last commit (see streaming.runtime.record_collector); a
        task with a dynamic sink may write any output topic."""
        spans = [span for task in self.tasks.tasks.values() if (topic in task.sink_topics or task.has_dynamic_sinks)
                 and (span := task.uncommitted_inputs())]
        return f" (output of a record processed since the last commit, none of them committed: {'; '.join(spans)})" \
            if spans else ""

    # -- life cycle ------------------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Ask the loop to stop after the current batch; it then commits and closes cleanly."""
        self._stopping.set()

    def discard(self) -> None:
        """Close the clients of a thread that was never started (its instance failed to start)."""
        self.consumer.close()
        self.changelog_reader.close()
        self.collector.close()

    def run(self) -> None:
        try:
            self._subscribe()
            self.collector.producer.begin()
            while True:
                try:
                    self._loop()
                    break
                except (TaskMigratedError, TaskCorruptedError) as failure:  # a transactional producer, or a fatal one
                    self._recover_transaction(failure)
            self.tasks.shutdown()
            self._finish_join()  # last: the group's state is read right before the consumer leaves
        except BaseException as exc:  # report every failure, including a KeyboardInterrupt in the thread
            self.exception = exc
            self._clean_shutdown = False
            log.error("stream thread %s failed: %s", self.name, exc, exc_info=exc)
        finally:
            self._close()

    def _close(self) -> None:
        self.tasks.close_all(clean=self._clean_shutdown)
        for client in (self.consumer, self.changelog_reader):
            try:
                client.close()  # the consumer leaves the group; on_revoke finds no tasks left
            except Exception:
                log.warning("closing %s failed", type(client).__name__, exc_info=True)
        self.collector.close()
        self._on_state(self, "DEAD" if self.exception is None else "FAILED")

    # -- the loop ----------------------------------------------------------------------------------------------
    def _loop(self) -> None:
        """Each iteration: poll (at most ``consumer.max.poll.records``; fewer after an iteration that ran out of
        time, or under a rate limit), process what the tasks buffer for at most ``max.poll.processing.ms``, pause
        partitions whose buffer is full and resume drained ones, then serve delivery reports, punctuate and
        commit when due."""
        consume = self.consumer.consume
        max_records = self.config.max_poll_records
        poll_seconds = self.config["poll.ms"] / 1000
        commit_interval = self.config["commit.interval.ms"]
        next_commit = wall_clock_ms() + commit_interval
        next_lag = 0
        task_of = self.tasks.task_of
        limiter = self._rate_limiter
        shedder = self._shedder  # under shed, the limit drops what is over it rather than waiting for it
        watchdog = self._watchdog
        intake = max_records  # records the next poll may take (see _process_buffered)
        backlog = False  # records left buffered by the last iteration: poll without waiting
        while not self._stopping.is_set():
            if self._waiting_since is not None:
                self._log_waiting()
            self.tasks.maintain_standbys()
            if self.tasks.restoring:
                for task in self.tasks.restore(max_records * 5, min(poll_seconds, 0.01)):
                    self._start_processing(task)
                if not self.tasks.restoring:
                    self._on_state(self, "RUNNING")
            else:
                self.tasks.catch_up_standbys(max_records * 5)
            busy = backlog or self.tasks.restoring
            take = intake if limiter is None or shedder is not None else self._throttle(intake, poll_seconds, busy)
            # What is fetched already, at once; only when there is nothing (and nothing waits), wait up to poll.ms
            # for the first record. (consume(n, timeout) waits until it has n records or the timeout passed: at a
            # low rate every batch would wait the whole poll.ms.)
            messages = consume(take, 0)
            if not messages and not busy:
                messages = self._wait_for_records(consume, poll_seconds)
            if messages:
                if shedder is not None:
                    messages = shedder.admit(messages, task_of)
                elif limiter is not None:
                    limiter.charge(messages)
                self._dispatch(messages, task_of)
            started = time.perf_counter()
            processed, backlog = self._process_buffered()
            if backlog:  # the time cap cut processing short: take no more than it processes
                intake = min(max(processed, 1), max_records)
            elif processed and time.perf_counter() - started < self._processing_budget / 2:
                intake = min(intake * 2, max_records)
            if messages or backlog:
                self._pause_full()
            if self._paused:
                self._resume_drained()
            if shedder is not None:
                shedder.settle(task_of)
            self.collector.poll()
            now = wall_clock_ms()
            if now >= next_lag:
                self._update_lag()
                if watchdog is not None:
                    watchdog.check(now, task_of, self._end_offset)
                next_lag = now + LAG_INTERVAL_MS
            self.tasks.punctuate_wall_clock(now)
            if now >= next_commit or self.tasks.commit_requested() or self._sink_retry_due():
                self.tasks.commit(list(self.tasks.tasks.values()))
                next_commit = wall_clock_ms() + commit_interval
                if self._sink_paused or self._blocked_sinks:
                    self._pause_blocked_sinks()

    def _subscribe(self) -> None:
        self._waiting_since = time.monotonic()
        self.consumer.subscribe(self.tasks.source_topics(), on_assign=self._on_assign,
                                on_revoke=self._on_revoke, on_lost=self._on_lost)

    # -- exactly-once: a failed transaction (streaming.runtime.transactions) -----------------------------------
    def _recover_transaction(self, failure: StreamsError) -> None:
        """Nothing of the failed transaction is committed. Abort it (if this producer still can), close every
        task dirty and wipe its state (:meth:`_abandon_transaction`); then:

        * aborted (:class:`TaskCorruptedError`): re-create the tasks of the partitions still assigned (not those
          a revocation that failed just gave up) from the last committed offsets; they restore their stores
          from the changelogs (Kafka Streams' TaskCorruptedException);
        * fenced, with ``instance.name``: a newer incarnation of this instance (same name, so the same
          transactional id) took over while this one was paused or cut off — this is the zombie. Stop (the
          error ends the thread) rather than fence the newer one back, which would fence this one again;
        * fenced, without ``instance.name``: no other process shares the transactional id (the broker expired
          the producer): take a new producer and rejoin the group (Kafka Streams' TaskMigratedException).

        Under ``at_least_once`` only :class:`ProducerFatalError` is recovered from, as an aborted transaction is
        (there is no transaction to abort): the tasks are re-created with a new producer.
        """
        producer = self.collector.producer
        if not isinstance(producer, TransactionalProducer):
            if not isinstance(failure, ProducerFatalError):  # raised by user code under at_least_once: fatal
                raise failure
            partitions, task_ids = self._abandon_transaction()
            self.collector.renew_producer()
            log.warning("%s: %s. Its tasks %s were closed dirty and their local state wiped; with a new producer "
                        "they are re-created from the last committed offsets and restored from their changelogs "
                        "(at-least-once: output after the last commit may be produced twice)", self.name, failure,
                        task_ids)
            self._recreate_tasks(partitions)
            return
        partitions, task_ids = self._abandon_transaction()
        if producer.fenced and not isinstance(failure, TaskMigratedError):
            cause = producer.abort_failure  # the abort names a fencing that a flush could not (a bare SystemError)
            failure = TaskMigratedError(f"{cause} (first seen as: {failure})" if isinstance(cause, TaskMigratedError)
                                        else f"{failure}; the transaction could not be aborted either, so the "
                                        f"producer is treated as fenced")
        if isinstance(failure, TaskMigratedError) and self.config["instance.name"]:
            log.error("%s: %s. Another instance with instance.name=%r took over this instance's transactional id "
                      "(this one was paused or cut off: a zombie); nothing of its open transaction is committed. "
                      "Its tasks %s were closed dirty and their local state wiped; the thread stops. Two live "
                      "instances must never share an instance.name.", self.name, failure,
                      self.config["instance.name"], task_ids)
            raise failure
        if isinstance(failure, TaskMigratedError):
            log.warning("%s: %s. Its tasks %s were closed dirty and their local state wiped; it takes a new "
                        "producer and rejoins group %r", self.name, failure, task_ids,
                        self.config.application_id)
            producer.renew()
            producer.begin()
            self.consumer.unsubscribe()
            self._subscribe()
            self._on_state(self, "REBALANCING")
            return
        log.warning("%s: %s. Its tasks %s were closed dirty and their local state wiped; they are re-created "
                    "from the last committed offsets and restored from their changelogs", self.name, failure,
                    task_ids)
        producer.begin()
        self._recreate_tasks(partitions)

    def _recreate_tasks(self, partitions: list[tuple[str, int]]) -> None:
        """Re-create the tasks of ``partitions`` (closed dirty and wiped) from the last committed offsets."""
        # A failure inside a revocation (its commit) leaves the revoked partitions unassigned: they are someone
        # else's now (and a seek on them fails), so only the partitions still assigned get their tasks back.
        assigned = set(as_pairs(self.consumer.assignment()))
        partitions = [tp for tp in partitions if tp in assigned]
        not_ready = set(self.tasks.assign(partitions))
        self._seek_to_committed(partitions)
        if not_ready:
            self.consumer.pause([TopicPartition(*tp) for tp in not_ready])
        ready = [TopicPartition(*tp) for tp in partitions if tp not in not_ready]
        if ready:
            self.consumer.resume(ready)
        self._on_state(self, "REBALANCING" if not_ready or self._waiting_since is not None else "RUNNING")

    def _abandon_transaction(self) -> tuple[list[tuple[str, int]], list[str]]:
        """Abort the open transaction (best effort), drop its failed deliveries, close every task dirty and wipe
        its local state; return the input partitions the tasks owned, and the tasks' ids."""
        producer = self.collector.producer
        uncommitted = {tp: span for task in self.tasks.tasks.values() for tp, span in task.uncommitted_spans().items()}
        if isinstance(producer, TransactionalProducer):
            producer.abort()
        if uncommitted:
            log.warning("%s: the abandoned transaction held the outputs and state changes of input offsets %s "
                        "(each [first, end)); they are processed again from the last commit", self.name,
                        ", ".join(f"{topic}[{partition}]: [{start or 0}, {end})"  # never committed: from 0
                                  for (topic, partition), (start, end) in sorted(uncommitted.items())))
        self.collector.discard_failures()
        task_ids = sorted(self.tasks.tasks)
        partitions = self.tasks.close_dirty_and_wipe()
        self._paused.difference_update(partitions)
        for tp in partitions:
            self._start_offsets.pop(tp, None)
        return partitions, task_ids

    def _seek_to_committed(self, partitions: list[tuple[str, int]]) -> None:
        """Move the consumer back to the last committed offsets (where the reset policy says without one)."""
        if not partitions:
            return
        for tp in self.consumer.committed([TopicPartition(*tp) for tp in partitions], timeout=10):
            if tp.offset < 0:
                reset = self._offset_resets.get(tp.topic, self.config.consumer_config().get("auto.offset.reset"))
                tp.offset = OFFSET_END if reset == "latest" else OFFSET_BEGINNING
            self.consumer.seek(tp)

    def _finish_join(self) -> None:
        """Before the consumer leaves its group, make sure it leaves a formed group: on the embedded broker, a member
        that leaves while its group forms stays the group's leader, and every later member waits for that departed
        leader's assignment for minutes (Tansu 0.6.0, docs/broker-limits.md).

        - A thread that holds its assignment and is alone in its group (``alone_in_group()``: one stream thread, and
          no other instance of the application alive by its announcements on ``<application.id>-metadata``, none
          departed in the last 30 s) leaves at once: no rebalance can be under way.
        - Otherwise, after a random wait of up to :data:`LEAVE_JITTER_S`, it asks the group coordinator for the
          group's state (DescribeGroups, ~1 ms). STABLE (formed) or EMPTY: it leaves at once. Forming (another
          member left or joined; the embedded broker answers UNKNOWN): it polls, taking part in the rebalance, until
          the group is formed again and this thread holds its assignment (at most :data:`CLOSE_JOIN_WAIT_S`), then
          leaves.
        - A thread waiting for its assignment (stopped during a join), or one whose coordinator did not answer, does
          what it did before the state could be read: it polls :data:`CLOSE_SETTLE_S` (two heartbeats) so that a
          rebalance another member started shows up, and while it waits for an assignment polls until it arrives
          (at most :data:`CLOSE_JOIN_WAIT_S`).

        It runs after the tasks closed (committed, checkpointed), right before the consumer leaves, so the state it
        reads is a few milliseconds old when the leave arrives. Records polled here are dropped; a rebalance finds no
        task to suspend, and :meth:`_on_assign` starts none while stopping. Members stopped in the same instant: the
        second leave lands in the group the first started forming, and if it is the leader's, the group keeps the
        departed leader (measured in docs/broker-limits.md). The random wait makes one of them read the state after
        the other's leave, and so wait for the group to form, unless both waits end within a few milliseconds.

        All of this is skipped (the consumer leaves at once, as Kafka Streams' does) when ``settle_on_leave`` is
        False: a cluster that is not the embedded broker (KafkaStreams tells by its cluster id)."""
        if not self._settle_on_leave or (self._waiting_since is None and self._alone_in_group()):
            self.settled_before_leaving = False
            return
        state = None
        if self._waiting_since is None:
            time.sleep(random.uniform(0, LEAVE_JITTER_S))  # spreads members stopped in the same instant
            state = self._group_state()
        self.settled_before_leaving = state not in LEAVE_AT_ONCE_STATES
        if not self.settled_before_leaving:
            return
        if state is not None:
            self._wait_until_formed(state)
            return
        settle = time.monotonic() + CLOSE_SETTLE_S
        while self._waiting_since is None and time.monotonic() < settle:
            self.consumer.poll(0.1)
        if self._waiting_since is None:
            return
        log.info("%s is stopping during a group join: it waits up to %.0f s for its assignment before it leaves "
                 "group %r", self.name, CLOSE_JOIN_WAIT_S, self.config.application_id)
        deadline = time.monotonic() + CLOSE_JOIN_WAIT_S
        while self._waiting_since is not None and time.monotonic() < deadline:
            self.consumer.poll(0.1)
        if self._waiting_since is not None:
            log.warning("%s got no assignment in group %r within %.0f s of stopping; it leaves the group anyway",
                        self.name, self.config.application_id, CLOSE_JOIN_WAIT_S)

    def _group_state(self) -> ConsumerGroupState | None:
        """The group's state by its coordinator (DescribeGroups); None if it did not answer in
        :data:`GROUP_STATE_TIMEOUT_S`."""
        group = self.config.application_id
        try:
            described = self.admin.describe_consumer_groups([group], request_timeout=GROUP_STATE_TIMEOUT_S)[group]
            return described.result(timeout=GROUP_STATE_TIMEOUT_S + 1).state
        except (KafkaException, TimeoutError) as exc:
            log.debug("%s: the state of group %r is unknown (%s); it settles before it leaves", self.name, group, exc)
            return None

    def _wait_until_formed(self, state: ConsumerGroupState) -> None:
        """Poll until the group is formed again and this thread holds its assignment, at most
        :data:`CLOSE_JOIN_WAIT_S`."""
        log.info("%s is stopping while group %r forms (%s): it waits up to %.0f s for the group to form before it "
                 "leaves", self.name, self.config.application_id, state.name, CLOSE_JOIN_WAIT_S)
        deadline = time.monotonic() + CLOSE_JOIN_WAIT_S
        while time.monotonic() < deadline:
            self.consumer.poll(0.1)
            if self._waiting_since is None and (state := self._group_state()) in LEAVE_AT_ONCE_STATES:
                return
        log.warning("%s: group %r had not formed within %.0f s of stopping (%s); it leaves the group anyway",
                    self.name, self.config.application_id, CLOSE_JOIN_WAIT_S, state.name if state else "no answer")

    def _dispatch(self, messages: list[Any], task_of: dict[tuple[str, int], StreamTask]) -> None:
        """Hand each run of same-partition messages to its task (librdkafka returns them in runs)."""
        start = 0
        run_topic = run_partition = None
        for index, message in enumerate(messages):
            if message.error() is not None:
                self._hand_over(messages, start, index, task_of)
                start = index + 1
                self._consumer_error(message)
                continue
            partition = message.partition()
            if partition != run_partition or message.topic() != run_topic:
                self._hand_over(messages, start, index, task_of)
                start = index
                run_topic, run_partition = message.topic(), partition
        self._hand_over(messages, start, len(messages), task_of)

    def _hand_over(self, messages: list[Any], start: int, stop: int,
                   task_of: dict[tuple[str, int], StreamTask]) -> None:
        if start >= stop:
            return
        run = messages if start == 0 and stop == len(messages) else messages[start:stop]
        first = run[0]
        tp = (first.topic(), first.partition())
        task = task_of.get(tp)
        if task is None:  # a record fetched just before its partition was revoked
            return
        if not task.initialized:  # fetched before the pause took effect: keep it for after the restore
            task.pending.append(run)
            return
        task.buffer(run)

    def _process_buffered(self) -> tuple[int, bool]:
        """Process what the tasks buffer, a chunk per task in turn, until every buffer is empty (or waits for
        another partition: max.task.idle.ms) or ``max.poll.processing.ms`` is spent. Returns how many records
        were processed, and whether the time ran out with records left.

        When it did, the loop's next poll takes no more than this iteration processed (and twice as many after
        each iteration that processed everything in half the time, up to ``consumer.max.poll.records``), so
        buffers stop growing
        and the rest of the input waits in librdkafka's fetch queue (bounded by
        ``consumer.queued.max.messages.kbytes``); a partition whose buffer still reaches
        ``buffered.records.per.partition`` is paused (:meth:`_pause_full`). Pausing is the backstop, not the
        steady state: librdkafka drops a paused partition's prefetched records, and on the embedded broker a
        resumed partition gets its next records only 0.5-1 s later."""
        pending = [task for task in self.tasks.tasks.values() if task.buffered_records]
        if not pending:
            return 0, False
        started = time.perf_counter()
        deadline = started + self._processing_budget
        done = 0
        last: StreamTask | None = None
        while pending:
            round_started = time.perf_counter()
            chunk = self._chunk
            left = []
            in_round = 0
            for task in pending:
                count = task.process_next(chunk, self._caught_up)
                if count:
                    in_round += count
                    last = task
                    if task.buffered_records:
                        left.append(task)
            now = time.perf_counter()
            done += in_round
            if in_round:
                self._size_chunk(now - round_started, in_round)
            pending = left
            if pending and now >= deadline:
                self.time_cap_hits += 1
                break
        self.processed += done
        if done:
            self.last_processed_at = now
            if self.first_processed_at is None:
                self.first_processed_at, self.first_processed = now, done
        if last is not None:
            self._observe_processing(started, last.last_processed)
        return done, bool(pending)

    def _size_chunk(self, round_seconds: float, records: int) -> None:
        """Size the next round's chunk (records per task) to take about ROUND_SHARE of the time budget, from
        the average time per record of the recent rounds."""
        if self._processing_budget == float("inf"):
            self._chunk = self.config.max_poll_records
            return
        self._round_seconds = self._round_seconds * RECORD_TIME_DECAY + round_seconds
        self._round_records = self._round_records * RECORD_TIME_DECAY + records
        fits = self._processing_budget * ROUND_SHARE * self._round_records / max(self._round_seconds, 1e-9)
        self._chunk = max(1, min(int(fits), self.config.max_poll_records))

    def _wait_for_records(self, consume: Callable[[int, float], list[Message]], seconds: float) -> list[Message]:
        """Idle: wait up to ``seconds`` (``poll.ms``) for a record, in slices of at most ``IDLE_WAIT_SLICE_S``, so
        that a :meth:`shutdown` is seen within one slice rather than a whole ``poll.ms`` (librdkafka's wait cannot
        be woken from Python)."""
        deadline = time.monotonic() + seconds
        while True:
            messages = consume(1, min(IDLE_WAIT_SLICE_S, max(0.0, deadline - time.monotonic())))
            if messages or self._stopping.is_set() or time.monotonic() >= deadline:
                return messages

    def _throttle(self, max_records: int, poll_seconds: float, busy: bool) -> int:
        """Under a rate limit: how many records the next poll may take. When the limit allows none, sleep until
        it does, at most ``poll.ms`` (not while records wait to be processed or stores restore), then take one:
        a poll returns records queued before any rebalance it serves; what it takes is charged."""
        limiter = self._rate_limiter
        assert limiter is not None
        allowed = limiter.allowance(max_records)
        if allowed:
            return allowed
        if not busy:
            pause = min(limiter.wait_seconds(), poll_seconds)
            time.sleep(pause)
            self.throttled_seconds += pause
        return max(limiter.allowance(max_records), 1)

    def _start_processing(self, task: StreamTask) -> None:
        """A task finished restoring: resume its partitions and process what arrived meanwhile."""
        self.consumer.resume([TopicPartition(*tp) for tp in task.partitions])
        pending, task.pending = task.pending, []
        for run in pending:
            self._hand_over(run, 0, len(run), self.tasks.task_of)

    def _caught_up(self, tp: tuple[str, int]) -> bool:
        """Whether this consumer has taken every record of ``tp`` up to the high watermark of its last fetch
        (the high watermark in Fetch responses, which the embedded broker reports right; unknown: False)."""
        partition = TopicPartition(*tp)
        watermarks = self.consumer.get_watermark_offsets(partition, cached=True)
        if watermarks is None or watermarks[1] < 0:
            return False
        position = self.consumer.position([partition])[0].offset
        if position < 0:  # nothing taken since the assignment: where consumption started
            position = self._start_offset(tp, watermarks)
        return position >= watermarks[1]

    def _start_offset(self, tp: tuple[str, int], watermarks: tuple[int, int]) -> int:
        """Where consumption of ``tp`` started in this assignment: its committed offset, else where the
        reset policy puts it; asked of the group coordinator once per assignment. If that fails, the high
        watermark (taken as caught up: the task processes rather than waits)."""
        start = self._start_offsets.get(tp)
        if start is None:
            try:
                [committed] = self.consumer.committed([TopicPartition(*tp)], timeout=5)
                start = committed.offset
            except KafkaException:
                start = watermarks[1]
            if start < 0:
                reset = self._offset_resets.get(tp[0], self.config.consumer_config().get("auto.offset.reset"))
                start = watermarks[1] if reset == "latest" else max(watermarks[0], 0)
            self._start_offsets[tp] = start
        return start

    def _pause_full(self) -> None:
        """Pause the partitions that still buffer ``buffered.records.per.partition`` records after a round of
        processing (they arrive faster than their task takes them, or their task waits for another partition).

        Checked after processing, not when records arrive: one poll returns thousands of records of one
        partition, and librdkafka drops a paused partition's prefetched records and fetches them again on
        resume, so pausing on arrival refetched every partition of a multi-partition task (a join) all the
        time."""
        limit = self.config["buffered.records.per.partition"]
        full = [tp for task in self.tasks.tasks.values() if task.buffered_records
                for tp in task.partitions if tp not in self._paused and task.buffered_count(tp) >= limit]
        if full:
            if not self.backpressure_pauses:
                log.info("%s pauses input partitions whose buffer holds buffered.records.per.partition=%d records "
                         "(processing is slower than input); they resume when half drained. Metrics: "
                         "brook_paused_partitions, brook_backpressure_pauses_total", self.name, limit)
            log.debug("%s pauses %s: buffers full", self.name, full)
            self.consumer.pause([TopicPartition(*tp) for tp in full])
            self._paused.update(full)
            self.backpressure_pauses += len(full)

    @property
    def _blocked_sinks(self) -> bool:
        return any(task.sinks_blocked for task in self.tasks.tasks.values())

    def _sink_retry_due(self) -> bool:
        """Whether a task whose external sink failed may flush again (then the loop commits early)."""
        if not self._sink_paused:
            return False
        now = time.monotonic()
        return any(0 < task.sink_retry_at() <= now for task in self.tasks.tasks.values() if task.sinks_blocked)

    def _pause_blocked_sinks(self) -> None:
        """Backpressure from outside Kafka (streaming.runtime.external_sinks): pause the input of each task whose
        external sink could not write at this commit, so its offsets wait and nothing more is fetched for it; the
        loop keeps polling (the thread stays in its group) and retries the flush when the sink says; resume the
        input of tasks whose sink wrote again. Records already buffered are still processed into the sink."""
        blocked = {tp for task in self.tasks.tasks.values() if task.sinks_blocked for tp in task.partitions}
        newly = blocked - self._sink_paused
        if newly:
            log.warning("%s pauses input partitions %s: an external sink (database) cannot write; their offsets are "
                        "committed once it has written everything", self.name, sorted(newly))
            self.consumer.pause([TopicPartition(*tp) for tp in newly])
            self.sink_pauses += 1
        recovered = [tp for tp in self._sink_paused - blocked if tp in self.tasks.task_of and tp not in self._paused]
        if recovered:
            log.info("%s resumes input partitions %s: the external sink wrote again", self.name, sorted(recovered))
            self.consumer.resume([TopicPartition(*tp) for tp in recovered])
        self._sink_paused = blocked

    def _resume_drained(self) -> None:
        """Resume the paused partitions whose buffer is down to half of ``buffered.records.per.partition``
        (forget those no task of this thread owns any more: a rebalance took them)."""
        limit = self.config["buffered.records.per.partition"]
        task_of = self.tasks.task_of
        ready = [tp for tp in self._paused if tp not in task_of or task_of[tp].buffered_count(tp) <= limit // 2]
        ready = [tp for tp in ready if tp not in self._sink_paused]  # those wait for their sink
        if ready:
            owned = [tp for tp in ready if tp in task_of]
            if owned:
                log.debug("%s resumes %s: buffers drained", self.name, owned)
                self.consumer.resume([TopicPartition(*tp) for tp in owned])
                self.backpressure_resumes += len(owned)
            self._paused.difference_update(ready)

    def _consumer_error(self, message: Any) -> None:
        error = message.error()
        if error.code() == KafkaError._PARTITION_EOF:
            return
        if error.fatal():
            raise KafkaException(error)
        log.warning("consumer error on %s[%s]: %s", message.topic(), message.partition(), error)

    # -- counters ------------------------------------------------------------------------------------------------
    def _observe_processing(self, started: float, last: Any) -> None:
        """Per loop iteration that processed records, never per record: how long it processed, and the
        end-to-end latency of the last record it processed."""
        self.process_latency.observe(time.perf_counter() - started)
        if last is not None:
            timestamp = last.timestamp()[1]
            if timestamp > 0:
                self.e2e_latency.observe(max(time.time() * 1000 - timestamp, 0.0) / 1000)

    def _update_lag(self) -> None:
        """Lag per input partition: the high watermark of the last fetch (``cached=True``: the Fetch response's,
        never ListOffsets "latest", which the embedded broker answers wrongly) minus the next offset to
        process. Partitions whose watermark is not known yet (not fetched since the assignment) are left out."""
        lag = {}
        for tp, task in list(self.tasks.task_of.items()):
            partition = TopicPartition(*tp)
            watermarks = self.consumer.get_watermark_offsets(partition, cached=True)
            if watermarks is None or watermarks[1] < 0:
                continue
            next_offset = task.consumed.get(tp)
            if next_offset is None:
                position = self.consumer.position([partition])[0].offset
                next_offset = position if position >= 0 else self._start_offset(tp, watermarks)
            lag[tp] = max(watermarks[1] - next_offset, 0)
        self.lag = lag

    def _end_offset(self, tp: tuple[str, int]) -> int | None:
        """The high watermark of ``tp``'s last fetch (None: not fetched since the assignment)."""
        watermarks = self.consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)
        return None if watermarks is None or watermarks[1] < 0 else watermarks[1]

    def metrics_sample(self) -> ThreadSample:
        """This thread's counters for the metrics collector (called from the scraping thread: copies only)."""
        tasks = list(self.tasks.tasks.values())
        active = sum(1 for task in tasks if task.initialized)
        return ThreadSample(
            name=self.name, processed=self.processed, rebalances=self.rebalances, commits=self.tasks.commits,
            commit_latency=self.tasks.commit_latency.snapshot(), process_latency=self.process_latency.snapshot(),
            e2e_latency=self.e2e_latency.snapshot(),
            tasks={"active": active, "restoring": len(tasks) - active, "standby": len(self.tasks.standby)},
            lag=dict(self.lag), task_samples=[TaskSample(t.id, t.dropped_records, t.late_records) for t in tasks],
            record_errors=dict(self.errors.by_action), restored=dict(self.changelog_reader.restored),
            restores=self.changelog_reader.progress(), backpressure=self.backpressure_sample(tasks),
            shed=dict(self._shedder.shed) if self._shedder is not None else {},
            idle=self._watchdog.samples() if self._watchdog is not None else [])

    def backpressure_sample(self, tasks: list[StreamTask] | None = None) -> BackpressureSample:
        """What throttling and backpressure did on this thread (called from other threads: reads only)."""
        tasks = list(self.tasks.tasks.values()) if tasks is None else tasks
        return BackpressureSample(
            buffered=sum(task.buffered_records for task in tasks),
            paused=len(self._paused), pauses=self.backpressure_pauses, resumes=self.backpressure_resumes,
            time_cap_hits=self.time_cap_hits, throttled_seconds=self.throttled_seconds,
            queue_full=self.collector.queue_full_stalls, queue_full_seconds=self.collector.queue_full_seconds,
            sink_paused=len(self._sink_paused), sink_pauses=self.sink_pauses)

    @property
    def commits(self) -> int:
        return self.tasks.commits

    @property
    def last_commit_ms(self) -> float:
        return self.tasks.last_commit_ms

    # -- rebalance callbacks (called from inside consume) ------------------------------------------------------
    def _log_waiting(self) -> None:
        """Say every :data:`WAITING_LOG_S` that the thread still waits for its assignment, and how long."""
        now = time.monotonic()
        waited = now - self._waiting_since  # type: ignore[operator]
        if waited >= WAITING_LOG_S and now - self._last_waiting_log >= WAITING_LOG_S:
            self._last_waiting_log = now
            log.info("%s waits for its partition assignment in group %r: %.0f s so far (a group join takes ~3 s "
                     "on the embedded broker; see docs/broker-limits.md if it takes minutes)", self.name,
                     self.config.application_id, waited)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.rebalances += 1
        self._waiting_since = None
        stopping = self._stopping.is_set()  # the join finished after shutdown(): take the partitions only to leave
        final = self._apply_offset_resets(consumer, partitions) if self._offset_resets and not stopping else partitions
        if self._cooperative:
            consumer.incremental_assign(final)
        else:
            consumer.assign(final)
        if stopping:
            return
        for tp in as_pairs(partitions):
            self._start_offsets.pop(tp, None)
        restoring = set(self.tasks.assign(as_pairs(partitions)))
        if restoring:  # no input for a task until its stores are restored
            consumer.pause([TopicPartition(*tp) for tp in restoring])
        ready = [tp for tp in partitions if (tp.topic, tp.partition) not in restoring]
        if ready:  # a partition paused before a rebalance must not stay paused after it
            consumer.resume([TopicPartition(tp.topic, tp.partition) for tp in ready])
        self._on_state(self, "REBALANCING" if restoring else "RUNNING")

    def _apply_offset_resets(self, consumer: Consumer, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Per-source ``offset_reset``: where the group has no committed offset, start at that end."""
        chosen = [tp for tp in partitions if tp.topic in self._offset_resets]
        if not chosen:
            return partitions
        committed = consumer.committed(chosen, timeout=10)
        for tp in committed:
            if tp.offset < 0:
                tp.offset = OFFSET_BEGINNING if self._offset_resets[tp.topic] == "earliest" else OFFSET_END
        by_tp = {(tp.topic, tp.partition): tp for tp in committed}
        return [by_tp.get((tp.topic, tp.partition), tp) for tp in partitions]

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.rebalances += 1
        self._waiting_since = time.monotonic()
        self._on_state(self, "REBALANCING")
        pairs = as_pairs(partitions)
        self._paused.difference_update(pairs)
        self._sink_paused.difference_update(pairs)
        if not self._clean_shutdown:
            self.tasks.lose(pairs)
            return
        rebuilding = self.tasks.revoke(pairs)  # suspended; resumed or closed by the assignment that follows
        if rebuilding:  # a task kept part of its partitions: no input for it until it is ready again
            consumer.pause([TopicPartition(*tp) for tp in rebuilding])

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.rebalances += 1
        self._on_state(self, "REBALANCING")
        pairs = as_pairs(partitions)
        self._paused.difference_update(pairs)
        self._sink_paused.difference_update(pairs)
        if isinstance(self.collector.producer, TransactionalProducer):
            # The open transaction holds the lost tasks' writes, which another member now redoes: none of it may
            # commit. (The embedded broker does not check the group generation of a transaction's offsets.)
            _, task_ids = self._abandon_transaction()
            log.warning("%s lost its partitions %s: their open transaction was aborted, tasks %s closed dirty and "
                        "wiped", self.name, sorted(pairs), task_ids)
            self.collector.producer.begin()
        else:
            self.tasks.lose(pairs)
