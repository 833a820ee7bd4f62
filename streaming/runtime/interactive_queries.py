"""Interactive queries: read-only views of this instance's local state stores, and which instance of the
application owns a key (Kafka Streams' ``KafkaStreams.store`` and ``queryMetadataForKey``).

Local reads
    :class:`ReadOnlyKeyValueStoreView` reads the stores of the *active* tasks of this instance (standby
    copies are never read). ``get`` routes the key to the task of partition
    ``partition_for_key(key_serde.serialize(key), n)`` — the partition Kafka's default partitioner gives
    the key on the store's source topics — and answers ``None`` when that task runs elsewhere. Scans
    merge every local task's entries in serialized-key order. Reads never flush a store's record cache
    (only the stream thread may: a flush writes the changelog and forwards downstream); they overlay
    the cache's unflushed entries on the bytes store instead. Stores are queryable while the instance
    is RUNNING; while it rebalances or restores, and when a store closes under a read because its task
    moved, reads raise :class:`InvalidStateStoreError` (retry later).

Who owns a key
    Every instance announces itself and its assignment on the compacted topic ``<application.id>-metadata``
    (see :mod:`streaming.runtime.query_metadata`); with ``application.server`` set, ``metadata_for_key``
    reads it (at most every 250 ms) and names the ``application.server`` of the instance whose latest
    announcement claims the key's partition (None while nobody does). Instances without an
    ``application.server`` are left out: nobody can ask them.

Partitioning assumption (as in Kafka Streams): the store's keys, serialized with the store's key
serde, hash to the partition whose task holds them — true for stores fed by the task's own input
keys (aggregations, tables, counting processors). A store keyed otherwise, or input written with a
custom partitioner, gets wrong routing: pass ``partitioner=`` to ``metadata_for_key``.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from streaming.config import StreamsConfig
from streaming.errors import InvalidStateStoreError, StreamsError, UnknownStateStoreError
from streaming.runtime.membership import LiveWorker, announced_alive
from streaming.runtime.partitioning import partition_for_key
from streaming.runtime.query_metadata import (
    Assignment,
    AssignmentPublisher,
    AssignmentReader,
    HostAnnouncement,
    WorkerIdentity,
    create_metadata_topic,
)
from streaming.runtime.window_queries import ReadOnlySessionStoreView, ReadOnlyWindowStoreView
from streaming.serdes import Serde
from streaming.state.stores import KeyValueStoreBuilder
from streaming.state.windowed_builders import SessionStoreBuilder, WindowStoreBuilder
from streaming.topology.topology import Subtopology, Topology

log = logging.getLogger(__name__)

# partitioner(topic, key, value, num_partitions) -> partition (the sink ``partitioner=`` signature)
Partitioner = Callable[[str, Any, Any, int], int]


@dataclass(frozen=True)
class KeyQueryMetadata:
    """Where a key of a store lives: ``active_host`` (``application.server`` of the instance running its
    task, None while no instance owns it, e.g. during a rebalance), hosts with a standby copy, and the
    partition (= task partition) the key maps to. A global store is whole on every instance: the answer
    names this instance, with partition -1."""

    active_host: str | None
    standby_hosts: list[str]
    partition: int


@dataclass(frozen=True)
class StoreInfo:
    """A queryable key-value store of the topology and how its keys map to tasks (``subtopology`` None:
    a global store, which every instance holds whole)."""

    name: str
    subtopology: Subtopology | None
    num_partitions: int
    key_serde: Serde[Any]
    value_serde: Serde[Any]
    kind: str = "key_value"  # or "window", "session"
    timestamped: bool = False  # stored values carry an 8-byte timestamp prefix (tables, aggregations, joins)

    @property
    def is_global(self) -> bool:
        return self.subtopology is None

    @property
    def source_topics(self) -> tuple[str, ...]:
        return () if self.subtopology is None else self.subtopology.source_topics

    def task_id(self, partition: int) -> str:
        return f"{self.subtopology.id}_{partition}"


QUERYABLE = (KeyValueStoreBuilder, WindowStoreBuilder, SessionStoreBuilder)


def store_kind(builder: Any) -> str:
    return "window" if isinstance(builder, WindowStoreBuilder) else \
        "session" if isinstance(builder, SessionStoreBuilder) else "key_value"


def key_value_stores(topology: Topology) -> dict[str, Subtopology | None]:
    """Every queryable store of the topology (key-value, window, session) -> the sub-topology whose tasks
    hold it (None for a global store)."""
    builders = topology.store_builders
    stores: dict[str, Subtopology | None] = {
        name: sub for sub in topology.subtopologies() for name in sub.stores
        if isinstance(builders.get(name), QUERYABLE)}
    stores.update({name: None for name, definition in topology.global_stores.items()
                   if isinstance(definition.store_builder, KeyValueStoreBuilder)})
    return stores


def unknown_store_message(name: str, known: Iterable[str]) -> str:
    names = sorted(known)
    return (f"no queryable state store {name!r} in this topology; known key-value stores: "
            f"{', '.join(repr(n) for n in names) if names else 'none'}")


# -- the local view ---------------------------------------------------------------------------------------
class ReadOnlyKeyValueStoreView:
    """A read-only key-value store over this instance's active tasks' stores of one name.

    ``get`` reads the one task the key maps to (None if that task is not local); ``range``,
    ``prefix_scan`` and ``all`` merge every local task's entries in serialized-key order; ranges
    include both ends. Raises :class:`InvalidStateStoreError` while the instance is not RUNNING.
    Iterators yield ``(key, value)`` tuples and read lazily, in chunks.
    """

    def __init__(self, queries: InteractiveQueries, info: StoreInfo) -> None:
        self._queries = queries
        self._info = info
        self.name = info.name

    def get(self, key: Any) -> Any:
        info = self._info
        partition = self._queries.partition_of(info, key)
        stores = self._queries.local_stores(info.name, partition)
        store = stores.get(partition)
        if store is None:
            return None
        return _guarded(info.name, partition, store, lambda: store.get(key))

    def range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        serialize = self._info.key_serde.serialize
        lo = None if from_key is None else serialize(from_key)
        hi = None if to_key is None else serialize(to_key)
        if lo is not None and hi is not None and lo > hi:
            return iter(())
        return self._scan(lo, hi, None)

    def prefix_scan(self, prefix: Any, prefix_key_serde: Serde[Any] | None = None) -> Iterator[tuple[Any, Any]]:
        raw = (prefix_key_serde or self._info.key_serde).serialize(prefix)
        if raw is None:
            raise ValueError(f"store {self.name!r}: the prefix may not be None")
        return self._scan(None, None, raw)

    def all(self) -> Iterator[tuple[Any, Any]]:
        return self._scan(None, None, None)

    def approximate_num_entries(self) -> int:
        stores = self._queries.local_stores(self.name)
        return sum(_guarded(self.name, p, s, s.approximate_num_entries) for p, s in stores.items())

    def _scan(self, lo: bytes | None, hi: bytes | None, prefix: bytes | None) -> Iterator[tuple[Any, Any]]:
        stores = self._queries.local_stores(self.name)  # checked now, not at the first next()
        scans = [_raw_scan(self.name, partition, store, lo, hi, prefix) for partition, store in sorted(stores.items())]
        merged = scans[0] if len(scans) == 1 else heapq.merge(*scans, key=itemgetter(0))
        value_de = self._info.value_serde.deserialize
        if self._info.timestamped:
            def plain_value_de(data: bytes) -> Any:
                return value_de(data[8:])
            return _typed(merged, self._info.key_serde.deserialize, plain_value_de)
        return _typed(merged, self._info.key_serde.deserialize, value_de)

    def __repr__(self) -> str:
        return f"<ReadOnlyKeyValueStoreView {self.name!r}>"


class GlobalStoreView:
    """A read-only view of a global store: every instance holds all of it, so every key is local (Kafka
    Streams serves GlobalKTable stores from every instance). Queryable while the instance is RUNNING or
    REBALANCING; iterators yield ``(key, value)`` tuples in serialized-key order."""

    def __init__(self, queries: InteractiveQueries, name: str, store: Any) -> None:
        self._queries = queries
        self._store = store
        self.name = name

    def _read(self, read: Callable[[Any], Any]) -> Any:
        self._queries.check_queryable(self.name)
        return _guarded(self.name, -1, self._store, lambda: read(self._store))

    def get(self, key: Any) -> Any:
        if key is None:
            raise ValueError(f"store {self.name!r}: keys may not be None")
        return self._read(lambda store: store.get(key))

    def range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        return self._read(lambda store: iter(list(store.range(from_key, to_key))))

    def prefix_scan(self, prefix: Any, prefix_key_serde: Serde[Any] | None = None) -> Iterator[tuple[Any, Any]]:
        return self._read(lambda store: iter(list(store.prefix_scan(prefix, prefix_key_serde))))

    def all(self) -> Iterator[tuple[Any, Any]]:
        return self._read(lambda store: iter(list(store.all())))

    def approximate_num_entries(self) -> int:
        return self._read(lambda store: store.approximate_num_entries())

    def __repr__(self) -> str:
        return f"<GlobalStoreView {self.name!r}>"


def _guarded(name: str, partition: int, store: Any, read: Callable[[], Any]) -> Any:
    try:
        return read()
    except Exception as exc:
        if store.is_open:
            raise
        if partition < 0:
            raise InvalidStateStoreError(f"global store {name!r} was closed during the query: the instance is "
                                         f"stopping") from exc
        raise InvalidStateStoreError(f"state store {name!r} (partition {partition}) was closed during the query: "
                                     f"its task is migrating; retry") from exc


def _raw_scan(name: str, partition: int, store: Any, lo: bytes | None, hi: bytes | None,
              prefix: bytes | None) -> Iterator[tuple[bytes, bytes]]:
    """Serialized entries of one task's store, its layers' pending writes included (it never flushes)."""
    try:
        yield from store.read_raw(lo, hi, prefix)
    except Exception as exc:
        if store.is_open:
            raise
        raise InvalidStateStoreError(f"state store {name!r} (partition {partition}) was closed during the scan: "
                                     f"its task is migrating; retry") from exc


def _typed(entries: Iterator[tuple[bytes, bytes]], key_de: Callable[[bytes], Any],
           value_de: Callable[[bytes], Any]) -> Iterator[tuple[Any, Any]]:
    for key, value in entries:
        yield key_de(key), value_de(value)


# -- the facade KafkaStreams uses ------------------------------------------------------------------------------
@dataclass(frozen=True)
class KeyLookup:
    """The answer to "what is ``key`` in ``store``" from this instance's point of view.

    ``status``: ``found`` / ``not_found`` (the key's task is local), ``not_local`` (``owner`` runs it),
    ``unavailable`` (rebalancing, restoring, or no owner right now; ``reason`` says which).
    """

    status: str
    partition: int
    value: Any = None
    owner: str | None = None
    reason: str = ""


class InteractiveQueries:
    """Local store views, key -> partition routing, this instance's announcements on the metadata topic, and
    the other instances' announcements (routing by them needs ``application.server``; a stopping stream thread asks
    :meth:`other_live_instances`). One per started :class:`KafkaStreams`.

    ``tasks()`` returns this instance's active tasks, ``standby_task_ids()`` its standby task ids and
    ``state()`` the client state name; all are called from query threads. ``identity``: who this instance is
    (its announcements' key and details; by default this process, with the config's ``application.server``).
    """

    def __init__(self, topology: Topology, config: StreamsConfig, partition_counts: dict[str, int],
                 tasks: Callable[[], list[Any]], standby_task_ids: Callable[[], list[str]],
                 state: Callable[[], str], global_stores: Mapping[str, Any] | None = None,
                 identity: WorkerIdentity | None = None) -> None:
        self._config = config
        self._tasks = tasks
        self._standby_task_ids = standby_task_ids
        self._state = state
        self._global_stores = dict(global_stores or {})  # open global stores (read-only views)
        self.host: str | None = config["application.server"] or None
        self.identity = identity or WorkerIdentity.of_this_process(self.host, config["instance.name"],
                                                                   uuid.uuid4().hex)
        builders = {**topology.store_builders,
                    **{name: d.store_builder for name, d in topology.global_stores.items()}}
        self._stores: dict[str, StoreInfo] = {}
        for name, sub in key_value_stores(topology).items():
            sizes = [partition_counts[t] for t in sub.source_topics if t in partition_counts] if sub else []
            builder = builders[name]
            assert isinstance(builder, QUERYABLE)
            self._stores[name] = StoreInfo(name, sub, max(sizes) if sizes else 0,
                                           builder.key_serde or config.default_key_serde,
                                           builder.value_serde or config.default_value_serde, store_kind(builder),
                                           isinstance(builder, KeyValueStoreBuilder) and builder.timestamped)
        self._publisher: AssignmentPublisher | None = None
        self._reader: AssignmentReader | None = None
        self._reader_lock = threading.Lock()
        self._closed = False

    # -- life cycle -------------------------------------------------------------------------------------
    def start(self) -> None:
        """Create the metadata topic, start announcing this instance and follow the other instances'
        announcements (so the first ``metadata_for_key``, and a stopping stream thread asking
        :meth:`other_live_instances`, find them fetched)."""
        topic = create_metadata_topic(self._config.application_id, self._config.admin_config())
        self._publisher = AssignmentPublisher(self._config.producer_config(), topic, self.identity, self.assignment)
        self._publisher.start()
        try:
            with self._reader_lock:
                self._reader = AssignmentReader(self._config.consumer_config(), topic)
        except BaseException:
            self.close()  # the publisher announced this host: take it back (tombstone) and stop its thread
            raise

    def announce(self) -> None:
        """Announce this instance now and wait for the broker to take it (:meth:`AssignmentPublisher.announce`)."""
        if self._publisher is not None:
            self._publisher.announce()

    def on_thread_state(self) -> None:
        """A stream thread changed state (assignment, restore, shutdown): announce soon."""
        if self._publisher is not None:
            self._publisher.notify()

    def close(self, timeout: float = 10.0) -> None:
        """Stop announcing (tombstone) and reading; views raise from now on. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._publisher is not None:
            self._publisher.close(timeout)
        with self._reader_lock:
            if self._reader is not None:
                self._reader.close()

    # -- stores -------------------------------------------------------------------------------------------
    @property
    def store_names(self) -> list[str]:
        return sorted(self._stores)

    def store_info(self, name: str) -> StoreInfo:
        info = self._stores.get(name)
        if info is None:
            raise UnknownStateStoreError(unknown_store_message(name, self._stores))
        return info

    def store(self, name: str) -> Any:
        """The view of store ``name``: key-value, global, window or session (by the store's kind)."""
        info = self.store_info(name)
        if info.kind == "window":
            return ReadOnlyWindowStoreView(self, info)
        if info.kind == "session":
            return ReadOnlySessionStoreView(self, info)
        if info.is_global:
            return GlobalStoreView(self, name, self._global_stores[name])
        return ReadOnlyKeyValueStoreView(self, info)

    def check_queryable(self, name: str) -> None:
        """Raise :class:`InvalidStateStoreError` unless stores can be read now: while RUNNING, and (as Kafka
        Streams since KIP-535) while REBALANCING, for tasks that are restored."""
        state = self._state()
        if self._closed or state not in ("RUNNING", "REBALANCING"):
            raise InvalidStateStoreError(self._unavailable_message(name, state))

    def partition_of(self, info: StoreInfo, key: Any, key_serde: Serde[Any] | None = None,
                     partitioner: Partitioner | None = None) -> int:
        """The task partition ``key`` maps to (default partitioner over the serialized key)."""
        if key is None:
            raise ValueError(f"store {info.name!r}: keys may not be None")
        if info.num_partitions < 1:
            raise StreamsError(f"store {info.name!r}: the partition count of {list(info.source_topics)} is unknown")
        if partitioner is not None:
            partition = partitioner(info.source_topics[0], key, None, info.num_partitions)
            if not isinstance(partition, int) or not 0 <= partition < info.num_partitions:
                raise StreamsError(f"partitioner {partitioner!r} returned {partition!r} for key {key!r}; expected "
                                   f"a partition in [0, {info.num_partitions})")
            return partition
        raw = (key_serde or info.key_serde).serialize(key)
        return partition_for_key(raw, info.num_partitions)

    def local_stores(self, name: str, partition: int | None = None) -> dict[int, Any]:
        """Queryable local stores named ``name`` by task partition (only ``partition``'s, if given).

        Raises :class:`InvalidStateStoreError` unless the instance is RUNNING or REBALANCING and the
        tasks asked for are restored (Kafka Streams' KIP-535: restored active tasks answer during a
        rebalance).
        """
        self.check_queryable(name)
        found: dict[int, Any] = {}
        not_ready: list[str] = []
        for task in self._tasks():
            store = task.stores.get(name)
            if store is None or (partition is not None and task.partition != partition):
                continue
            if not task.initialized or not store.is_open:
                not_ready.append(task.id)
            else:
                found[task.partition] = store
        if not_ready:
            raise InvalidStateStoreError(f"state store {name!r} is not available: tasks {sorted(not_ready)} are "
                                         f"restoring or migrating; retry shortly")
        return found

    def _unavailable_message(self, name: str, state: str) -> str:
        if state == "CREATED":
            return f"state store {name!r} is not available: KafkaStreams is not started yet (call start())"
        return f"state store {name!r} is not available: this instance is {state}, not RUNNING"

    def _is_local(self, name: str, partition: int) -> bool:
        return any(task.partition == partition and name in task.stores for task in self._tasks())

    # -- metadata --------------------------------------------------------------------------------------------
    def assignment(self) -> tuple[Assignment, str]:
        """This instance's assignment now, and its state (what the publisher announces)."""
        active: dict[str, set[int]] = {}
        task_ids = []
        for task in self._tasks():
            task_ids.append(task.id)
            for topic, partition in list(task.partitions):
                active.setdefault(topic, set()).add(partition)
        return (Assignment({topic: tuple(sorted(parts)) for topic, parts in sorted(active.items())},
                           tuple(sorted(task_ids)), tuple(sorted(self._standby_task_ids()))), self._state())

    def _announcements(self) -> dict[str, HostAnnouncement]:
        with self._reader_lock:
            if self._closed:
                raise StreamsError("interactive queries: KafkaStreams is closed")
            if self._reader is None:
                raise StreamsError("interactive queries: metadata needs a started instance")
            reader = self._reader
        return reader.announcements()

    def other_live_instances(self) -> list[LiveWorker]:
        """The other instances of this application that count as alive by their announcements
        (:func:`~streaming.runtime.membership.announced_alive`: no tombstone, announced within the last minute).
        Raises :class:`StreamsError` when the metadata topic cannot be read."""
        others = {host: announcement for host, announcement in self._announcements().items()
                  if host != self.identity.key}
        return announced_alive(others, int(time.time() * 1000))

    def seconds_since_another_left(self) -> float | None:
        """Seconds since the last other instance of this application announced its departure (its tombstone), or
        None if none did. Read after :meth:`other_live_instances` (which catches up on the metadata topic)."""
        with self._reader_lock:
            reader = self._reader
        if reader is None:
            return None
        left = [at for host, at in reader.departures().items() if host != self.identity.key]
        return None if not left else max(0.0, time.time() - max(left) / 1000)

    def metadata_for_key(self, name: str, key: Any, key_serde: Serde[Any] | None = None,
                         partitioner: Partitioner | None = None) -> KeyQueryMetadata:
        if self.host is None:
            raise StreamsError("metadata_for_key needs the config key 'application.server' (this instance's "
                               "'host:port' for interactive queries); instances announce their assignment "
                               "only when it is set")
        info = self.store_info(name)
        if info.is_global:  # every instance holds a global store whole: this one answers
            return KeyQueryMetadata(self.host, [], -1)
        partition = self.partition_of(info, key, key_serde, partitioner)
        return self._metadata_for_partition(info, partition)

    def _metadata_for_partition(self, info: StoreInfo, partition: int) -> KeyQueryMetadata:
        announcements = {key: a for key, a in self._announcements().items() if a.application_server is not None}
        owners = [a for a in announcements.values() if a.owns(info.source_topics, partition)]
        active = max(owners, key=lambda a: a.offset).application_server if owners else None
        task_id = info.task_id(partition)
        standbys = sorted(a.application_server for a in announcements.values()
                          if task_id in a.assignment.standby_tasks and a.application_server != active
                          and a.application_server is not None)
        return KeyQueryMetadata(active, standbys, partition)

    # -- one key, as the HTTP endpoint asks ------------------------------------------------------------------
    def lookup(self, name: str, key: Any) -> KeyLookup:
        """Answer for ``key`` locally, or say who owns it. Raises :class:`UnknownStateStoreError`."""
        info = self.store_info(name)
        if info.kind != "key_value":
            return KeyLookup("unavailable", -1, reason=f"store {name!r} is a {info.kind} store: query it with "
                                                       f"KafkaStreams.store({name!r}).fetch(...) in the worker")
        if info.is_global:
            try:
                value = GlobalStoreView(self, name, self._global_stores[name]).get(key)
            except InvalidStateStoreError as exc:
                return KeyLookup("unavailable", -1, reason=str(exc))
            return KeyLookup("found" if value is not None else "not_found", -1, value)
        partition = self.partition_of(info, key)
        if self._is_local(name, partition):
            try:
                store = self.local_stores(name, partition).get(partition)
                if store is None:  # the task closed between the two looks
                    raise InvalidStateStoreError(f"state store {name!r} (partition {partition}) is migrating; retry")
                value = _guarded(name, partition, store, lambda: store.get(key))
            except InvalidStateStoreError as exc:
                return KeyLookup("unavailable", partition, reason=str(exc))
            return KeyLookup("found" if value is not None else "not_found", partition, value)
        try:
            owner = self._metadata_for_partition(info, partition).active_host
        except StreamsError as exc:
            return KeyLookup("unavailable", partition, reason=str(exc))
        if owner is not None and owner != self.host:
            return KeyLookup("not_local", partition, owner=owner)
        if owner is None:
            reason = f"no instance owns partition {partition} of store {name!r} right now (rebalancing); retry"
        else:
            reason = f"partition {partition} of store {name!r} is being reassigned to or from this instance; retry"
        return KeyLookup("unavailable", partition, reason=reason)

    def health(self) -> dict[str, Any]:
        assignment, state = self.assignment()
        return {"state": state, "host": self.host, "active_tasks": list(assignment.active_tasks),
                "standby_tasks": list(assignment.standby_tasks)}
