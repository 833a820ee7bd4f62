"""KafkaStreams: runs a topology against a Kafka cluster in this process."""

from __future__ import annotations

import base64
import enum
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaException
from prometheus_client import CollectorRegistry

from streaming.bootstrap import with_bootstrap
from streaming.config import StreamsConfig
from streaming.errors import (
    ConfigError,
    CoPartitioningError,
    InvalidStateStoreError,
    MissingSourceTopicError,
    StreamsError,
    UnknownStateStoreError,
)
from streaming.metrics.collector import InstanceSample, StreamsCollector
from streaming.metrics.endpoint import MetricsEndpoint
from streaming.naming import epoch_topic
from streaming.runtime.changelog_reader import StateRestoreListener
from streaming.runtime.cluster import TANSU_CLUSTER_ID, cluster_metadata
from streaming.runtime.directory_lock import DirectoryLock
from streaming.runtime.error_handlers import merge_metrics, uses_dead_letters
from streaming.runtime.gc_tuning import raise_threshold0
from streaming.runtime.global_stream_thread import GlobalStreamThread
from streaming.runtime.http_server import InteractiveQueryServer, key_to_text
from streaming.runtime.interactive_queries import (
    InteractiveQueries,
    KeyQueryMetadata,
    Partitioner,
    key_value_stores,
    unknown_store_message,
)
from streaming.runtime.internal_topics import create_internal_topics, logical_topics
from streaming.runtime.query_metadata import WorkerIdentity
from streaming.runtime.remote_queries import RemoteQueries, RemoteQueryError
from streaming.runtime.reset_epoch import ResetEpoch, read_reset_epoch, wipe_state_of_other_epoch
from streaming.runtime.snapshots import snapshot_source
from streaming.runtime.state_directory import (
    StateDirectory,
    clear_application_dir,
    has_persistent_stores,
    lock_application_dir,
)
from streaming.runtime.stream_thread import StreamThread
from streaming.serdes import Serde
from streaming.topic_generations import TopicGenerations
from streaming.topology.topology import Topology

log = logging.getLogger(__name__)

#: A stream thread that would be alone in its group still reads the group's state before it leaves when another
#: instance left this recently: that leave started a rebalance, and a member leaving in its middle can leave the
#: embedded broker's group with a departed leader (docs/broker-limits.md). It takes ~3 s on the embedded broker;
#: 30 s also covers a loaded machine.
REBALANCE_AFTER_LEAVE_S = 30.0


class State(enum.Enum):
    """Kafka Streams' client states."""

    CREATED = "CREATED"
    REBALANCING = "REBALANCING"
    RUNNING = "RUNNING"
    PENDING_SHUTDOWN = "PENDING_SHUTDOWN"
    NOT_RUNNING = "NOT_RUNNING"
    ERROR = "ERROR"


StateListener = Callable[[State, State], None]


class KafkaStreams:
    """A Streams client: ``start()`` joins the consumer group ``application.id`` and processes until
    ``close()``.

    The configuration is validated here (an unknown key or bad value raises :class:`ConfigError`); without
    ``bootstrap.servers`` it connects to ``$BROOK_BOOTSTRAP_SERVERS``, else the running embedded broker of
    ``.brook/broker``, else ``127.0.0.1:9092`` (:mod:`streaming.bootstrap`);
    topics are checked in ``start()``: every source and sink topic must exist (a dynamic sink's, chosen per record,
    are checked before it sends to them: ``KStream.to``), and the topics one
    sub-topology reads must have equal partition counts (co-partitioning). Partitions are assigned with
    the ``range`` assignor so each instance gets the same partition numbers of co-partitioned topics.
    """

    def __init__(self, topology: Topology, config: Mapping[str, Any]) -> None:
        self.config = config if isinstance(config, StreamsConfig) else StreamsConfig(with_bootstrap(config))
        generations = TopicGenerations(self.config["topic.generations"])
        self.topology = topology.bind(self.config.application_id, generations)
        try:
            generations.check_application(self.config.application_id,
                                          logical_topics(self.topology, self.config.application_id))
        except ValueError as exc:
            raise ConfigError(f"config key 'topic.generations': {exc}") from None
        for line in generations.describe():
            log.info("topic generation: %s", line)
        self._snapshots = snapshot_source(self.config["state.snapshot.location"], self.config.application_id,
                                          self.config.admin_config())
        topology.subtopologies()
        self._check_assignment_strategy()
        self._state = State.CREATED
        self._lock = threading.Lock()
        self._listener: StateListener | None = None
        self._restore_listener: StateRestoreListener | None = None
        self._threads: list[StreamThread] = []
        self._settle_on_leave = True  # until check_topics saw the cluster id (see there)
        self.process_id = uuid.uuid4().hex
        """This instance's random id: its stream threads' transactional ids hold it when ``instance.name`` is not
        set (Kafka Streams' process id)."""
        self._thread_states: dict[str, str] = {}
        self.metrics_registry = CollectorRegistry(auto_describe=False)
        """This instance's Prometheus metrics (``brook_*``, read at scrape time); served on ``metrics.port``."""
        self.metrics_registry.register(StreamsCollector(self._metrics_sample))
        self._metrics_endpoint: MetricsEndpoint | None = None

    # -- state ------------------------------------------------------------------------------------------
    @property
    def state(self) -> State:
        return self._state

    def set_state_listener(self, listener: StateListener) -> None:
        """Call ``listener(new_state, old_state)`` on every state change (from the stream thread)."""
        if self._state is not State.CREATED:
            raise StreamsError("set the state listener before start()")
        self._listener = listener

    def set_global_state_restore_listener(self, listener: StateRestoreListener) -> None:
        """Receive ``on_restore_start/on_batch_restored/on_restore_end`` for every store restore."""
        if self._state is not State.CREATED:
            raise StreamsError("set the restore listener before start()")
        self._restore_listener = listener

    def _set_state(self, new: State) -> None:
        with self._lock:
            old = self._state
            if old is new or old is State.NOT_RUNNING or (old is State.ERROR and new is not State.NOT_RUNNING):
                return
            if old is State.PENDING_SHUTDOWN and new is not State.NOT_RUNNING:
                return  # rebalance callbacks while leaving the group do not change a closing client
            self._state = new
        log.info("state %s -> %s", old.value, new.value)
        if self._listener is not None:
            self._listener(new, old)

    def _on_thread_state(self, thread: StreamThread, state: str) -> None:
        self._thread_states[thread.name] = state
        if state == "FAILED":
            self._set_state(State.ERROR)
        elif state == "REBALANCING":
            self._set_state(State.REBALANCING)
        elif state == "RUNNING" and all(s == "RUNNING" for s in self._thread_states.values()):
            self._set_state(State.RUNNING)
        if self._iq is not None:  # interactive queries: announce the new assignment
            self._iq.on_thread_state()

    @property
    def exception(self) -> BaseException | None:
        """The error that stopped a stream thread (or the global stream thread), if one did."""
        threads: list[Any] = [*self._threads, *([self._global_thread] if self._global_thread else [])]
        return next((t.exception for t in threads if t.exception is not None), None)

    # -- life cycle -----------------------------------------------------------------------------------------
    # The lock of state.dir/<application.id> while this instance may open its stores (start() to close()).
    _state_dir_lock: DirectoryLock | None = None
    # Gives back the garbage collector's threshold start() raised (python.gc.threshold0), once the threads stopped.
    _release_gc: Callable[[], None] = staticmethod(lambda: None)

    def start(self) -> None:
        """Lock the state directory, check topics, then start the stream threads (non-blocking).

        A topology with persistent stores locks ``state.dir/<application.id>`` first: while another process, or
        another instance in this process, holds it, ``start()`` raises :class:`StateDirectoryLockedError` (one
        line naming the directory, the holder's pid and the fix) before anything is opened. Kafka Streams
        refuses a second instance on one state directory in the same way, in one JVM too.

        Then it reads the application's reset epoch (``<application.id>-epoch``): local state written under
        another epoch (the application was reset while this instance was stopped) is wiped before any task
        opens, and snapshots of another epoch are not loaded (:mod:`streaming.runtime.reset_epoch`)."""
        if self._state is not State.CREATED:
            raise StreamsError(f"start() called in state {self._state.value}; a KafkaStreams starts once")
        try:
            if has_persistent_stores(self.topology):
                self._state_dir_lock = lock_application_dir(self.config["state.dir"], self.config.application_id)
            counts = self.check_topics()
            self._use_reset_epoch(counts)
            counts.update(create_internal_topics(self.topology, self.config.application_id,
                                                 self.config.admin_config(), counts,
                                                 dead_letters=uses_dead_letters(self.config),
                                                 shed=self.config["processing.overflow.shed.divert"],
                                                 alerts=self.config["processing.idle.timeout.ms"] > 0))
            topology = self._start_global_stream_thread(counts)  # global tables are complete before processing
            self._start_interactive_queries(counts, topology.global_state_stores)
            self._start_metrics_endpoint()
            directory = StateDirectory()  # which thread holds which task directory; standbys on thread 1
            for i in range(self.config["num.stream.threads"]):
                self._threads.append(StreamThread(f"{self.config.application_id}-StreamThread-{i + 1}", topology,
                                                  self.config, self._on_thread_state, self._restore_listener,
                                                  counts, directory=directory, hosts_standbys=i == 0,
                                                  snapshots=self._snapshots, index=i + 1,
                                                  process_id=self.process_id, alone_in_group=self._alone_in_group,
                                                  settle_on_leave=self._settle_on_leave))
        except BaseException:
            self._abort_start()
            raise
        self._thread_states = {t.name: "STARTING" for t in self._threads}
        self._set_state(State.REBALANCING)
        self._release_gc = raise_threshold0(self.config["python.gc.threshold0"])
        for thread in self._threads:
            thread.start()
        if self._iq is not None:  # alive for a reset or a scaling once start() returned; the threads already join
            self._iq.announce()

    def _use_reset_epoch(self, counts: dict[str, int]) -> None:
        """Read the reset epoch; wipe local state of another epoch; offer only snapshots of this one."""
        epoch = read_reset_epoch(self.config.admin_config(), self.config.application_id) \
            if epoch_topic(self.config.application_id) in counts else ResetEpoch()
        if self._state_dir_lock is not None:
            wipe_state_of_other_epoch(self._state_dir_lock, epoch)
        self._snapshots = self._snapshots.at_reset_epoch(epoch.epoch)
        self.config.reset_epoch = epoch.epoch

    def _abort_start(self) -> None:
        """``start()`` failed: stop what it started (HTTP server, announcements, global thread, the stream
        threads' clients) and end NOT_RUNNING, so nothing outlives the failure and close() has nothing left."""
        self._stop_interactive_queries()
        self._stop_metrics_endpoint()
        self._stop_global_stream_thread(time.monotonic() + 30)
        for thread in self._threads:
            thread.discard()
        self._threads = []
        self._release_state_dir()
        self._set_state(State.NOT_RUNNING)

    def _release_state_dir(self) -> None:
        """Give the state directory up: nothing of this instance touches it any more."""
        if self._state_dir_lock is not None:
            self._state_dir_lock.release()
            self._state_dir_lock = None

    def close(self, timeout: float | None = None) -> bool:
        """Stop processing: commit, close tasks and leave the group, then release the state directory. True if
        done within ``timeout`` s (if not, the directory stays locked: a stream thread may still write in it)."""
        if self._state is State.CREATED:
            self._set_state(State.NOT_RUNNING)
            return True
        if self._state is not State.ERROR:
            self._set_state(State.PENDING_SHUTDOWN)
        for thread in self._threads:
            thread.shutdown()
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        global_done = self._stop_global_stream_thread(deadline)
        done = not any(t.is_alive() for t in self._threads) and global_done
        self._stop_interactive_queries()
        self._stop_metrics_endpoint()
        if done:
            self._release_gc()
            self._release_state_dir()
            if self._state is State.ERROR:
                with self._lock:
                    self._state = State.NOT_RUNNING
            else:
                self._set_state(State.NOT_RUNNING)
        return done

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every stream thread has stopped (after close() or a failure)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def cleanup(self) -> None:
        """Delete this application's local state: everything in ``state.dir/<application.id>`` but its lock file
        (only when not running). Raises :class:`StateDirectoryLockedError` while another process, or another
        instance in this process, holds the directory: its stores are in use."""
        if self._state not in (State.CREATED, State.NOT_RUNNING, State.ERROR):
            raise StreamsError(f"cleanup() needs a stopped client, state is {self._state.value}")
        if any(thread.is_alive() for thread in self._threads):
            raise StreamsError("cleanup() needs stopped stream threads: call close() first")
        own = self._state_dir_lock  # a failed instance holds it until close()
        lock = own or lock_application_dir(self.config["state.dir"], self.config.application_id)
        try:
            clear_application_dir(lock)
        finally:
            if lock is not own:
                lock.release()

    def processing_span(self) -> tuple[int, int, float | None, float | None]:
        """``(records processed, records of the first processing round, end of that round, end of the last
        round)`` over the stream threads, times from ``time.perf_counter()`` (None before any record). The
        processing rate from the first to the last record, the group join excluded, is
        ``(records - first_records) / (last - first)``. Recorded per processing round, never per record."""
        threads = [t for t in self._threads if t.first_processed_at is not None]
        if not threads:
            return sum(t.processed for t in self._threads), 0, None, None
        first = min(threads, key=lambda t: t.first_processed_at)
        return (sum(t.processed for t in self._threads), first.first_processed, first.first_processed_at,
                max(t.last_processed_at for t in threads))

    def metrics(self) -> dict[str, Any]:
        """Counters of the stream threads: records processed, commits, rebalances, tasks, records the DSL
        skipped on purpose (null keys or values) in the tasks currently running, and what the error
        handlers did: ``skipped_records`` (log_and_continue, or a handler's "continue"),
        ``dead_letter_records`` (written to ``<application.id>-dlq``), ``record_errors`` (both, per stage), and
        what backpressure did: ``backpressure_pauses`` / ``backpressure_resumes`` (partitions paused because
        their buffer was full, and resumed), ``producer_queue_full`` (sends that waited for the producer's queue),
        ``sink_pauses`` / ``sink_paused_partitions`` (times an external sink that could not write paused its task's
        input, and partitions paused so now: streaming.runtime.external_sinks)."""
        backpressure = [t.backpressure_sample() for t in self._threads]
        return {
            **merge_metrics([t.errors.metrics() for t in self._threads]),
            "records_processed": sum(t.processed for t in self._threads),
            "dropped_records": sum(task.dropped_records for t in self._threads
                                   for task in list(t.tasks.tasks.values())),
            "commits": sum(t.commits for t in self._threads),
            "rebalances": sum(t.rebalances for t in self._threads),
            "last_commit_latency_ms": max((t.last_commit_ms for t in self._threads), default=0.0),
            "tasks": sorted(task for t in self._threads for task in t.tasks.tasks),
            "backpressure_pauses": sum(b.pauses for b in backpressure),
            "backpressure_resumes": sum(b.resumes for b in backpressure),
            "producer_queue_full": sum(b.queue_full for b in backpressure),
            "sink_pauses": sum(b.sink_pauses for b in backpressure),
            "sink_paused_partitions": sum(b.sink_paused for b in backpressure),
        }

    # -- Prometheus metrics (logic in streaming.metrics) --------------------------------------------------------------
    def _metrics_sample(self) -> InstanceSample:
        return InstanceSample(self.config.application_id, self._state.value, tuple(s.value for s in State),
                              [thread.metrics_sample() for thread in list(self._threads)])

    def _start_metrics_endpoint(self) -> None:
        if self.config["metrics.port"]:
            endpoint = MetricsEndpoint(self.metrics_registry, self.config["metrics.port"])
            endpoint.start()
            self._metrics_endpoint = endpoint

    def _stop_metrics_endpoint(self) -> None:
        if self._metrics_endpoint is not None:
            self._metrics_endpoint.stop()
            self._metrics_endpoint = None

    # -- interactive queries (logic in streaming.runtime.interactive_queries / http_server) ------------------
    _iq: InteractiveQueries | None = None
    _iq_server: InteractiveQueryServer | None = None

    def store(self, name: str) -> Any:
        """A read-only view of store ``name`` over this instance's local active tasks (window and session
        stores: :mod:`streaming.runtime.window_queries`, fetch by key and time range).

        ``get(key)`` reads the task the key hashes to (None when that task runs elsewhere: ask
        :meth:`metadata_for_key` who has it); ``range``, ``prefix_scan`` and ``all`` merge every local
        task in serialized-key order; ``approximate_num_entries`` sums them. A global table's store is
        whole on every instance, so every key is local. The view is live: each call raises
        :class:`InvalidStateStoreError` while a task it needs is restoring or migrating (retry; restored
        tasks answer during a rebalance, as in Kafka Streams) or after the instance stopped. An unknown
        name raises :class:`UnknownStateStoreError` listing the stores.
        """
        if self._iq is None:
            known = key_value_stores(self.topology)
            if name not in known:
                raise UnknownStateStoreError(unknown_store_message(name, known))
            raise InvalidStateStoreError(f"state store {name!r} is not available: KafkaStreams is not started "
                                         f"(state {self._state.value}); call start() and query while it is RUNNING")
        return self._iq.store(name)

    def metadata_for_key(self, store: str, key: Any, key_serde: Serde[Any] | None = None,
                         partitioner: Partitioner | None = None) -> KeyQueryMetadata:
        """Which instance (``application.server``) runs the task holding ``key`` of ``store``.

        The key is serialized with ``key_serde`` (default: the store's key serde) and hashed as Kafka's
        default partitioner does, unless ``partitioner(topic, key, None, num_partitions)`` is given.
        Hosts come from the assignments instances announce on ``<application.id>-metadata`` (read at
        most every 250 ms); ``active_host`` is None while no instance owns the partition. Needs
        ``application.server``.
        """
        if self._iq is None:
            raise StreamsError(f"metadata_for_key needs a started KafkaStreams (state is {self._state.value})")
        return self._iq.metadata_for_key(store, key, key_serde, partitioner)

    def query(self, store: str, key: Any) -> Any:
        """The value of ``key`` in key-value store ``store`` wherever it lives, or None when absent.

        Read locally when this instance runs the key's task; otherwise asked from the instance that does
        (:meth:`metadata_for_key`), over its interactive-query endpoint: HTTPS trusting
        ``application.server.tls.ca`` when TLS is configured, with ``application.server.token`` as the
        bearer token. Raises :class:`InvalidStateStoreError` while no instance can answer (rebalancing,
        restoring; retry), :class:`~streaming.runtime.remote_queries.RemoteQueryError` when the owner
        cannot be asked.
        """
        metadata = self.metadata_for_key(store, key)
        assert self._iq is not None  # metadata_for_key raised otherwise
        if metadata.active_host is None:
            raise InvalidStateStoreError(f"no instance runs the task of key {key!r} of store {store!r} right now "
                                         f"(rebalancing); retry")
        if metadata.active_host == self._iq.host:
            return self.store(store).get(key)
        remote = self._remote or RemoteQueries(self.config)
        self._remote = remote
        text = key_to_text(key, self._iq.store_info(store).key_serde)
        status, body = remote.get(metadata.active_host, store, text)
        if status == 200:
            value = body.get("value")
            return base64.b64decode(value) if body.get("value_encoding") == "base64" else value
        if status == 404 and body.get("error") == "not found":
            return None
        if status in (421, 503):
            raise InvalidStateStoreError(f"{metadata.active_host} cannot answer for key {key!r} of store {store!r} "
                                         f"right now ({body.get('error')}: {body.get('reason', body.get('owner'))}); "
                                         f"retry")
        raise RemoteQueryError(f"interactive queries: {metadata.active_host} answered {status} for store "
                               f"{store!r}: {body.get('error')}"
                               f"{' (check application.server.token)' if status == 401 else ''}")

    _remote: RemoteQueries | None = None

    def _start_interactive_queries(self, partition_counts: dict[str, int], global_stores: dict[str, Any]) -> None:
        """Local store views, and this instance's announcements on ``<application.id>-metadata`` (who runs, for
        ``brook status`` and the reset's refusal: :mod:`streaming.runtime.membership`); with
        ``application.server`` also the other instances' announcements and the HTTP endpoint (bound before any
        stream thread starts, so a busy port fails start())."""
        iq = InteractiveQueries(
            self.topology, self.config, partition_counts,
            tasks=lambda: [task for thread in self._threads for task in list(thread.tasks.tasks.values())],
            standby_task_ids=lambda: [str(task_id) for thread in self._threads
                                      for task_id in list(getattr(thread.tasks, "standby", {}))],
            state=lambda: self._state.value, global_stores=global_stores,
            identity=WorkerIdentity.of_this_process(self.config["application.server"], self.config["instance.name"],
                                                    self.process_id))
        server = None
        if iq.host is not None:
            server = InteractiveQueryServer(iq, iq.host, tls_cert=self.config["application.server.tls.cert"],
                                            tls_key=self.config["application.server.tls.key"],
                                            token=self.config["application.server.token"])
            server.start()
        try:
            iq.start()
        except BaseException:
            if server is not None:
                server.stop()
            raise
        self._iq_server = server
        self._iq = iq

    def _alone_in_group(self) -> bool:
        """Whether this instance's one stream thread is the only member of the group, with no rebalance under way:
        no other thread, no other instance alive by the announcements, and none that left in the last
        :data:`REBALANCE_AFTER_LEAVE_S` (its leave starts a rebalance this thread must not leave in the middle of).
        False when the announcements cannot be read: the stream thread then reads the group's state before it leaves
        (:meth:`StreamThread._finish_join`)."""
        if self.config["num.stream.threads"] != 1 or self._iq is None:
            return False
        try:
            others = self._iq.other_live_instances()
        except (StreamsError, KafkaException) as exc:  # the metadata topic unreadable: assume company
            log.debug("cannot tell whether other instances run: %s", exc)
            return False
        since_left = self._iq.seconds_since_another_left()
        return not others and (since_left is None or since_left > REBALANCE_AFTER_LEAVE_S)

    def _stop_interactive_queries(self) -> None:
        """Stop answering HTTP, then announce this host's departure (tombstone)."""
        if self._iq_server is not None:
            self._iq_server.stop()
            self._iq_server = None
        if self._iq is not None:
            self._iq.close()

    # -- global stores (logic in streaming.runtime.global_stream_thread) ---------------------------------------
    _global_thread: GlobalStreamThread | None = None

    def _start_global_stream_thread(self, partition_counts: dict[str, int]) -> Topology:
        """Fill the global stores from their topics (blocks until every partition is read to its end) and
        keep them following; return the topology as this instance's stream threads run it, with this
        instance's global stores (the topology itself when it has none)."""
        definitions = self.topology.global_stores
        if not definitions:
            return self.topology
        if not self.topology.subtopologies():
            raise StreamsError("the topology has only global tables, so nothing to process: Kafka Streams would run "
                               "it with zero stream threads, Brook needs at least one stream (builder.stream(...))")
        missing = sorted({d.topic for d in definitions.values() if d.topic not in partition_counts})
        if missing:
            raise MissingSourceTopicError(f"global table topics {missing} do not exist on "
                                          f"{self.config['bootstrap.servers']}; create them first")
        thread = GlobalStreamThread(self.topology, self.config, partition_counts,
                                    self._on_global_stream_thread_failure)
        thread.start_and_bootstrap()
        self._global_thread = thread
        return self.topology.with_global_state_stores(thread.state.views)

    def _on_global_stream_thread_failure(self, exc: BaseException) -> None:
        """As in Kafka Streams, a failed global thread stops the client: its global tables would go stale."""
        self._set_state(State.ERROR)
        for thread in self._threads:
            thread.shutdown()

    def _stop_global_stream_thread(self, deadline: float | None) -> bool:
        """Stop the global thread after the stream threads (it writes the global checkpoint)."""
        thread = self._global_thread
        if thread is None:
            return True
        thread.shutdown()
        thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not thread.is_alive()

    def __enter__(self) -> KafkaStreams:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- start-up checks ------------------------------------------------------------------------------------
    def _check_assignment_strategy(self) -> None:
        strategy = self.config.consumer_config()["partition.assignment.strategy"]
        multi = [s for s in self.topology.subtopologies() if len(s.source_topics) > 1]
        if "range" not in strategy.split(",") and multi:
            raise ConfigError(
                f"config key 'consumer.partition.assignment.strategy'={strategy!r} cannot keep co-partitioned "
                f"topics together: sub-topology {multi[0].id} reads {list(multi[0].source_topics)}. Use 'range' "
                f"(the default), which gives each instance the same partition numbers of every topic.")

    def check_topics(self, timeout: float = 10.0) -> dict[str, int]:
        """Partition counts of every topic the topology uses; raises if one is missing or mismatched, and
        :class:`~streaming.runtime.cluster.ClusterUnreachableError` (naming bootstrap.servers, the cause
        and the setting to check) when the cluster cannot be reached within ``timeout`` s."""
        metadata = cluster_metadata(self.config.admin_config(), timeout)
        # Only the embedded broker leaves a group leaderless when a member leaves mid-rebalance: elsewhere a stream
        # thread leaves at once (docs/broker-limits.md, "group leaves during a join").
        self._settle_on_leave = metadata.cluster_id == TANSU_CLUSTER_ID
        counts = {name: len(t.partitions) for name, t in metadata.topics.items() if t.error is None}
        internal = self.topology.internal_topics
        label = self.topology.generations.label
        missing = [label(t) for t in self.topology.source_topics if t not in counts and t not in internal]
        if missing:
            raise MissingSourceTopicError(
                f"source topics {missing} do not exist on {self.config['bootstrap.servers']}; create them first")
        missing_sinks = [label(t) for t in self.topology.sink_topics if t not in counts and t not in internal]
        if missing_sinks:
            raise MissingSourceTopicError(
                f"output topics {missing_sinks} do not exist on {self.config['bootstrap.servers']}; create them first")
        self._check_copartitioning(counts)
        for sub in self.topology.subtopologies():
            sub_counts = {topic: counts[topic] for topic in sub.source_topics if topic in counts}
            if len(set(sub_counts.values())) > 1:
                raise CoPartitioningError(
                    f"sub-topology {sub.id} reads topics with different partition counts {sub_counts}; "
                    f"co-partitioned topics need the same number of partitions (repartition one of them)")
        return counts

    def _check_copartitioning(self, counts: dict[str, int]) -> None:
        """Every join's input topics must have equal partition counts (internal topics are created to
        match, so only the user's topics can differ): the error names the join, both topics and counts."""
        internal = self.topology.internal_topics
        for group in self.topology.copartition_groups:
            external = [(topic, counts[topic]) for topic in group.topics if topic not in internal and topic in counts]
            for topic, count in external[1:]:
                first, first_count = external[0]
                if count != first_count:
                    raise CoPartitioningError(
                        f"{group.operation} needs co-partitioned inputs, but topic {first!r} has {first_count} "
                        f"partitions and topic {topic!r} has {count}: a key must be in the same partition of "
                        f"both. Give the topics the same partition count, or repartition one side to the "
                        f"other's count (stream.repartition(...), table.to_stream().repartition(...).to_table())")
