"""TopologyTestDriver: run a topology with no broker, deterministically, through the production task code."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from confluent_kafka import TIMESTAMP_CREATE_TIME, Message

from streaming.config import StreamsConfig
from streaming.naming import dead_letter_topic
from streaming.runtime import checkpoint
from streaming.runtime.context import to_millis
from streaming.runtime.dead_letters import DeadLetterWriter
from streaming.runtime.error_handlers import configured_handlers
from streaming.runtime.global_state import GlobalStateManager
from streaming.runtime.memory_collector import MemoryRecordCollector
from streaming.runtime.state_directory import has_persistent_stores, lock_application_dir
from streaming.runtime.task import StreamTask
from streaming.serdes import Serde
from streaming.state.api import KeyValueStore, StateStore, TimestampedKeyValueStore
from streaming.state.caching import cache_budget
from streaming.state.session import TypedSessionStore
from streaming.state.window import TimestampedTypedWindowStore
from streaming.testing.topics import TestInputTopic, TestOutputTopic
from streaming.topology.topology import Topology


class TopologyTestDriver:
    """Pipe records into a topology and read what it writes, with no Kafka.

    Like Kafka Streams' driver: every topic has one partition, so there is one task per sub-topology;
    records written to a topic the topology also reads (a repartition topic, say) are processed right
    away; after every piped record the driver commits, which flushes stores (and their caches), and
    processes what those flushes wrote to such topics, committing again until nothing is left.
    Records piped into a global table's topic update its global store directly.
    Wall-clock time is simulated: it moves only with :meth:`advance_wall_clock_time`.
    Output topics exist as soon as something is written to them, as in Kafka's driver; ``existing_topics`` makes the
    topics a dynamic sink (``KStream.to(extractor)``) may write those only, as a cluster's metadata would: one it
    names that is not among them goes down the production error path, naming it.
    State lives in a temporary directory unless ``state.dir`` is given; with persistent stores the driver
    holds the lock of ``state.dir/<application.id>`` until :meth:`close`, as a worker does, so a driver
    pointed at a running worker's state directory is refused (:class:`StateDirectoryLockedError`).
    """

    def __init__(self, topology: Topology, config: dict[str, Any] | None = None,
                 initial_wall_clock_time_ms: int | None = None, *,
                 existing_topics: Iterable[str] | None = None) -> None:
        settings = {"application.id": "topology-test-driver", **(config or {})}
        self._state_dir = None
        if "state.dir" not in settings:
            self._state_dir = tempfile.mkdtemp(prefix="brook-test-driver-")
            settings["state.dir"] = self._state_dir
        self.config = StreamsConfig(settings, require_bootstrap=False)
        self.wall_clock_ms = int(time.time() * 1000) if initial_wall_clock_time_ms is None \
            else initial_wall_clock_time_ms
        max_bytes = self.config.producer_config().get("message.max.bytes")
        self._collector = MemoryRecordCollector(int(max_bytes) if max_bytes is not None else None,
                                                existing_topics=existing_topics)
        self._errors = configured_handlers(self.config, DeadLetterWriter(
            self.config.application_id, dead_letter_topic(self.config.application_id), self._collector.send))
        self._offsets: dict[str, int] = defaultdict(int)
        self._tasks: list[StreamTask] = []
        self._task_by_topic: dict[str, StreamTask] = {}
        topology.bind(self.config.application_id)
        budget = cache_budget(self.config["statestore.cache.max.bytes"])
        self._global = GlobalStateManager(topology, self.config)
        self._global_topics = set(self._global.topics)
        # As a worker: a state.dir another process (or driver) uses is refused before anything is opened.
        self._state_dir_lock = lock_application_dir(self.config["state.dir"], self.config.application_id) \
            if has_persistent_stores(topology) else None
        try:
            self._global.open(use_checkpoint=False)
            topology = topology.with_global_state_stores(self._global.views)
            for subtopology in topology.subtopologies():
                task = StreamTask(subtopology, 0, topology, self.config, self._collector, lambda: self.wall_clock_ms,
                                  cache_budget=budget, errors=self._errors)
                self._tasks.append(task)
                task.open_stores()
                task.initialize_topology()
                for topic in subtopology.source_topics:
                    self._task_by_topic[topic] = task
        except Exception:
            self.close()
            raise

    # -- topics -------------------------------------------------------------------------------------------
    def create_input_topic(self, topic: str, key_serde: Serde[Any] | None = None,
                           value_serde: Serde[Any] | None = None, start_timestamp: int | None = None,
                           auto_advance: int | timedelta = 0) -> TestInputTopic:
        """An input topic (a global table's topic too); serdes default to the config's default serdes."""
        if topic not in self._task_by_topic and topic not in self._global_topics:
            raise ValueError(f"topic {topic!r} is not read by the topology "
                             f"(it reads {sorted(self._task_by_topic.keys() | self._global_topics)})")
        advance = to_millis(auto_advance, "auto_advance") if auto_advance else 0
        return TestInputTopic(self, topic, key_serde or self.config.default_key_serde,
                              value_serde or self.config.default_value_serde,
                              self.wall_clock_ms if start_timestamp is None else start_timestamp, advance)

    def create_output_topic(self, topic: str, key_serde: Serde[Any] | None = None,
                            value_serde: Serde[Any] | None = None) -> TestOutputTopic:
        """An output topic to read; serdes default to the config's default serdes."""
        return TestOutputTopic(self._collector.outputs[topic], topic, key_serde or self.config.default_key_serde,
                               value_serde or self.config.default_value_serde)

    @property
    def produced_topic_names(self) -> set[str]:
        """Every topic the topology wrote to so far, whether or not its records were read (as Kafka's)."""
        return set(self._collector.produced)

    # -- driving ------------------------------------------------------------------------------------------
    def pipe_raw(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int,
                 headers: list[tuple[str, bytes | None]] | None = None) -> None:
        """Process one serialized record on ``topic`` (what TestInputTopic calls)."""
        self._process(topic, key, value, timestamp, headers)
        self._drain()
        self._commit()

    def _process(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int, headers: Any) -> None:
        if topic in self._global_topics:
            self._global.update(topic, [(key, value, timestamp)])
            return
        offset = self._offsets[topic]
        self._offsets[topic] = offset + 1
        message = Message(topic=topic, partition=0, offset=offset, key=key, value=value,
                          timestamp=(TIMESTAMP_CREATE_TIME, timestamp), headers=headers or None)
        task = self._task_by_topic[topic]
        if task.group is None:
            task.process_messages([message])
        else:
            task.add_messages([message])
            task.process_buffered(1_000_000)

    def _drain(self) -> bool:
        """Process records the topology wrote to topics it reads itself (repartition topics, global
        topics). True if there were any."""
        pending = self._collector.pending
        processed = False
        while pending:
            topic, record = pending.popleft()
            if topic in self._task_by_topic or topic in self._global_topics:
                self._process(topic, record.key, record.value, record.timestamp, record.headers)
                processed = True
        return processed

    def _commit(self) -> None:
        """Commit every task (flushing caches), then process what the flushes wrote to topics the topology
        reads (a cached aggregation feeding a repartition topic), and commit again, until nothing is left."""
        while True:
            checkpoint.commit(self._tasks, self._collector)
            if not self._drain():
                return

    def advance_wall_clock_time(self, advance: int | timedelta) -> None:
        """Move simulated wall-clock time forward and fire the wall-clock punctuators that are due."""
        self.wall_clock_ms += to_millis(advance, "advance")
        for task in self._tasks:
            task.maybe_punctuate_wall_clock(self.wall_clock_ms)
        self._drain()
        self._commit()
        # Records a multi-partition task held back while waiting (max.task.idle.ms) may be due now,
        # as Kafka's driver completes all processable work after advancing the clock.
        for task in self._tasks:
            if task.group is not None and task.process_buffered(1_000_000):
                self._drain()
                self._commit()

    # -- state ------------------------------------------------------------------------------------------------
    def get_state_store(self, name: str) -> StateStore:
        """A store by name: a task's store, or a global store (a read-only view)."""
        for task in self._tasks:
            if name in task.stores:
                return task.stores[name]
        if name in self._global.views:
            return self._global.views[name]
        raise KeyError(f"no state store named {name!r}; stores: {sorted(self.get_all_state_stores())}")

    def get_key_value_store(self, name: str) -> KeyValueStore[Any, Any]:
        store = self.get_state_store(name)
        if not isinstance(store, KeyValueStore):
            raise TypeError(f"state store {name!r} is a {type(store).__name__}, not a key-value store")
        return store

    def get_timestamped_key_value_store(self, name: str) -> TimestampedKeyValueStore[Any, Any]:
        """A store that keeps timestamps (every DSL table and aggregation): ``get_with_timestamp``."""
        store = self.get_state_store(name)
        if not isinstance(store, TimestampedKeyValueStore):
            raise TypeError(f"state store {name!r} is a {type(store).__name__}, not a timestamped key-value store")
        return store

    def get_window_store(self, name: str) -> TimestampedTypedWindowStore:
        """A window store (windowed aggregations, join buffers): ``fetch(key, from, to)``, ``fetch_all``, ..."""
        store = self.get_state_store(name)
        if not isinstance(store, TimestampedTypedWindowStore):
            raise TypeError(f"state store {name!r} is a {type(store).__name__}, not a window store")
        return store

    def get_session_store(self, name: str) -> TypedSessionStore:
        """A session store (session-windowed aggregations): ``fetch(key)``, ``find_sessions``, ..."""
        store = self.get_state_store(name)
        if not isinstance(store, TypedSessionStore):
            raise TypeError(f"state store {name!r} is a {type(store).__name__}, not a session store")
        return store

    def get_all_state_stores(self) -> dict[str, StateStore]:
        stores: dict[str, StateStore] = dict(self._global.views)
        stores.update({name: store for task in self._tasks for name, store in task.stores.items()})
        return stores

    @property
    def committed_offsets(self) -> dict[tuple[str, int], int]:
        """The next offset to read per input ``(topic, partition)``, as last committed (every topic has
        partition 0; a piped record's offset counts from 0 per topic)."""
        return dict(self._collector.producer.committed)

    def metrics(self) -> dict[str, Any]:
        """Counters: ``dropped_records``, the records DSL operations skipped on purpose (a None key or
        value where an aggregation or table needs one, or a record for a closed window), summed over tasks
        and global stores; ``late_records``, those of them for closed windows; and what the error handlers
        did, as ``KafkaStreams.metrics()``: ``skipped_records``, ``dead_letter_records``, ``record_errors``
        (per stage). Dead letters are in the output topic ``<application.id>-dlq``."""
        return {"dropped_records": sum(task.dropped_records for task in self._tasks) + self._global.skipped,
                "late_records": sum(task.late_records for task in self._tasks), **self._errors.metrics()}

    def close(self) -> None:
        """Close cleanly, as a worker does: flush caches, close processors (what they forward on close is
        still written to the output topics), close stores; then remove the temporary state directory."""
        failure: BaseException | None = None
        for task in self._tasks:
            try:
                task.suspend()
            except BaseException as exc:  # close every task anyway; report the first failure
                failure = failure or exc
            task.close()
        self._tasks.clear()
        self._global.close()
        if self._state_dir_lock is not None:
            self._state_dir_lock.release()
            self._state_dir_lock = None
        if self._state_dir is not None:
            shutil.rmtree(self._state_dir, ignore_errors=True)
            self._state_dir = None
        if failure is not None:
            raise failure

    def __enter__(self) -> TopologyTestDriver:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
