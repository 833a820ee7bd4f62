"""``KTable.suppress``: hold a table's updates back and forward them later (Kafka Streams' KIP-328).

- ``Suppressed.until_window_closes(buffer_config)``: for a windowed table, forward exactly one result
  per window, its final one, once stream time reaches ``window end + grace`` (sessions: ``end + gap +
  grace``) — when the window closes and the aggregation takes no more records for it.
- ``Suppressed.until_time_limit(time_to_wait, buffer_config)``: forward a key's latest value once stream
  time is ``time_to_wait`` past the timestamp of the key's first held update (rate limiting).

Time here is the suppression's own stream time, as in Kafka Streams (``KTableSuppressProcessor``'s
``observedStreamTime``): the highest timestamp of the updates that reached it (an aggregate's timestamp is
its window's highest record timestamp). Not the task's: with a record cache upstream, a window's last update
may still sit in the cache while the task's stream time has already passed the window's close, and only the
updates' own timestamps say what has arrived. The buffer is checked when an update reaches it, so a final
result leaves when a later update comes through. Every commit records this time and a restarted task goes on
from it (:meth:`~streaming.processor.ProcessorContext.observed_stream_time`, keyed by the buffer store).

The buffer is a store with a changelog (``<application.id>-<store>-changelog``, the store named
``<name>-store`` when ``Suppressed.with_name(name)`` is given): an update is held in the store and a
forwarded one deleted from it, in the same commit as the input offsets, so a restart neither loses
nor repeats a final result. The store takes the buffer's changes at the commit, the latest per key (Kafka
Streams' ``InMemoryTimeOrderedKeyValueBuffer`` logs its dirty keys at flush): an update held and forwarded
between two commits leaves no trace in it. Held updates keep their key, value and timestamp; their headers are not
kept (forwarded results carry none). An update held since it arrived is forwarded with the key and value objects
it came with (no serde round trip); one restored from the changelog is deserialized from its stored bytes. Deletes are held like any update (``Change(None, old)``, the old value
only when a node downstream asked for it). When one leaves the buffer: final-results suppression drops it
(a window whose aggregate was removed — a session merged into another — has no final result), time-limit
suppression forwards it as a delete, as Kafka Streams (``KTableSuppressProcessor.shouldForward``: tombstones
are dropped only where ``safeToDropTombstones``, which ``untilWindowCloses`` sets and ``untilTimeLimit`` does
not).
"""

from __future__ import annotations

import dataclasses
import heapq
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from streaming.dsl.change import Change, decode_change, encode_change
from streaming.errors import StreamsError, TopologyError
from streaming.runtime.context import fan_out
from streaming.serdes import Serde, Serdes
from streaming.state.bytes_store import BytesStore, StoreContext, Write
from streaming.state.keyvalue import TypedKeyValueStore
from streaming.state.stores import KeyValueStoreBuilder, Stores
from streaming.topology.nodes import Emit
from streaming.windows.serdes import WindowedSerde
from streaming.windows.specs import duration_ms

if TYPE_CHECKING:
    from streaming.dsl.ktable import KTable

_TIMES = struct.Struct(">qq")  # buffer time, record timestamp


@dataclass(frozen=True)
class BufferConfig:
    """How much a suppression buffer may hold, and what happens when it is full.

    ``unbounded()``: no limit. ``max_records(n)`` / ``max_bytes(n)``: a limit, and by default the oldest
    held updates are forwarded early when it is exceeded (``emit_early_when_full()``);
    ``shut_down_when_full()`` makes a full buffer stop the application with an error instead.
    """

    max_records_count: int | None = None
    max_bytes_count: int | None = None
    shut_down: bool = True

    @staticmethod
    def unbounded() -> BufferConfig:
        return BufferConfig(None, None, True)

    @staticmethod
    def max_records(records: int) -> BufferConfig:
        return BufferConfig(_positive(records, "BufferConfig.max_records: records"), None, False)

    @staticmethod
    def max_bytes(max_bytes: int) -> BufferConfig:
        return BufferConfig(None, _positive(max_bytes, "BufferConfig.max_bytes: max_bytes"), False)

    def with_max_records(self, records: int) -> BufferConfig:
        return dataclasses.replace(self, max_records_count=_positive(records, "BufferConfig.with_max_records: records"))

    def with_max_bytes(self, max_bytes: int) -> BufferConfig:
        return dataclasses.replace(self, max_bytes_count=_positive(max_bytes, "BufferConfig.with_max_bytes: max_bytes"))

    def emit_early_when_full(self) -> BufferConfig:
        return dataclasses.replace(self, shut_down=False)

    def shut_down_when_full(self) -> BufferConfig:
        return dataclasses.replace(self, shut_down=True)

    @property
    def bounded(self) -> bool:
        return self.max_records_count is not None or self.max_bytes_count is not None


def _positive(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{what} must be a positive int, got {value!r}")
    return value


@dataclass(frozen=True)
class Suppressed:
    """A suppression: ``until_window_closes`` or ``until_time_limit`` (see the module doc)."""

    final_results: bool
    time_to_wait_ms: int
    buffer_config: BufferConfig
    name: str | None = None

    BufferConfig = BufferConfig

    @staticmethod
    def until_window_closes(buffer_config: BufferConfig | None = None) -> Suppressed:
        """One final result per window (``buffer_config``: unbounded by default; a bounded one must
        ``shut_down_when_full()``, since emitting early would not be final)."""
        config = buffer_config or BufferConfig.unbounded()
        if config.bounded and not config.shut_down:
            raise ValueError("Suppressed.until_window_closes: a bounded buffer must shut_down_when_full() (emitting "
                             "early would forward results that are not final)")
        return Suppressed(True, 0, config)

    @staticmethod
    def until_time_limit(time_to_wait: int | timedelta, buffer_config: BufferConfig) -> Suppressed:
        """A key's latest value, ``time_to_wait`` (stream time) after its first held update."""
        if not isinstance(buffer_config, BufferConfig):
            raise ValueError(f"Suppressed.until_time_limit: buffer_config must be a BufferConfig, got {buffer_config!r}")
        return Suppressed(False, duration_ms(time_to_wait, "Suppressed.until_time_limit: time_to_wait",
                                             positive=False), buffer_config)

    def with_name(self, name: str) -> Suppressed:
        """Name the node; its buffer store is ``<name>-store``."""
        return dataclasses.replace(self, name=name)


class _StagedWrites:
    """The top layer of a suppression buffer's store: the buffer's writes wait here, the latest per key, until
    the store is flushed (every commit), then reach the layers below and so the changelog. A delete of a key the
    layers below do not hold cancels the staged write instead: they never see the key."""

    def __init__(self, wrapped: BytesStore) -> None:
        self.wrapped = wrapped
        self.name = wrapped.name
        self._staged: dict[bytes, tuple[bytes | None, int]] = {}

    @property
    def persistent(self) -> bool:
        return self.wrapped.persistent

    @property
    def is_open(self) -> bool:
        return self.wrapped.is_open

    def open(self, directory: str | None) -> None:
        self.wrapped.open(directory)

    def get(self, key: bytes) -> bytes | None:
        staged = self._staged.get(key)
        return self.wrapped.get(key) if staged is None else staged[0]

    def put(self, key: bytes, value: bytes | None, timestamp: int = 0, headers: Any = None) -> None:
        if value is None and self.wrapped.get(key) is None:  # writers' delete does the same
            self._staged.pop(key, None)
        else:
            self._staged[key] = (value, timestamp)

    def put_all(self, writes: list[Write]) -> None:
        for key, value, timestamp, _ in writes:
            self.put(key, value, timestamp)

    def write_batch(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        self.wrapped.write_batch(entries)

    def writers(self, now: Callable[[], int]) -> tuple[Callable[[bytes, bytes], None], Callable[[bytes], None]]:
        """:meth:`put` of a value and of a delete, as two functions of one call each, stamped with ``now()``."""
        staged, below = self._staged, self.wrapped.get

        def stage(key: bytes, value: bytes) -> None:
            staged[key] = (value, now())

        def delete(key: bytes) -> None:
            if below(key) is None:
                staged.pop(key, None)
            else:
                staged[key] = (None, now())
        return stage, delete

    def range(self, lo: bytes | None, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        return self.wrapped.range(lo, hi)

    def prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        return self.wrapped.prefix(prefix)

    def pending(self) -> dict[bytes, bytes | None]:
        """The layers' pending writes, the staged ones over them (copied: safe from other threads)."""
        pending = self.wrapped.pending()
        pending.update({key: value for key, (value, _) in self._staged.copy().items()})
        return pending

    def approximate_num_entries(self) -> int:
        return self.wrapped.approximate_num_entries() + len(self._staged)

    def flush(self) -> None:
        staged = self._staged.copy()  # the same dict stays: SuppressionBufferStore.writers' functions hold it
        self._staged.clear()
        if staged:
            self.wrapped.put_all([(key, value, timestamp, None) for key, (value, timestamp) in staged.items()])
        self.wrapped.flush()

    def close(self) -> None:
        """Close without writing what is staged: a clean close flushed first (as a record cache's close)."""
        self._staged.clear()
        self.wrapped.close()


class SuppressionBufferStore(TypedKeyValueStore):
    """A suppression buffer's store (see the module doc): serialized keys and entries, written at the commit."""

    def __init__(self, name: str, inner: BytesStore, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None,
                 logging_enabled: bool = True, caching_enabled: bool = False) -> None:
        super().__init__(name, inner, key_serde, value_serde, logging_enabled, caching_enabled)
        self._on_close: list[Callable[[], None]] = []

    def init(self, context: StoreContext) -> None:
        super().init(context)
        self._store = self._staged = _StagedWrites(self._store)

    def on_close(self, drop: Callable[[], None]) -> None:
        """Have :meth:`close` call ``drop``: the suppression node's own copy of what the buffer holds goes with the
        store. (The node and its task reference each other, so without it the copy would wait for the interpreter's
        cycle collector, whose pass over a large buffer would fall on whatever runs next: ~40-80 ms for ~7,500 held
        windows, measured on the tumbling benchmark's close.)"""
        self._on_close.append(drop)

    def close(self) -> None:
        for drop in self._on_close:
            drop()
        self._on_close.clear()
        super().close()

    def writers(self) -> tuple[Callable[[bytes, bytes], None], Callable[[bytes], None]]:
        """``hold(raw, data)``: keep entry ``data`` of key ``raw`` (from the next commit on); ``release(raw)``: forget
        key ``raw`` (at the next commit, if the store held it). Both stage their write with the current record's
        timestamp, as ``put`` would, one call each (the suppression's path, per held update)."""
        return self._staged.writers(self._timestamp)


class SuppressionBufferBuilder(KeyValueStoreBuilder):
    """Builds :class:`SuppressionBufferStore`s."""

    def build(self) -> SuppressionBufferStore:
        return SuppressionBufferStore(self.name, self.supplier.get(), self.key_serde, self.value_serde,
                                      logging_enabled=self.logging_enabled, caching_enabled=self.caching_enabled)


class SuppressOperator:
    """The suppression node (see the module doc). ``delay_ms``: how far stream time must pass an entry's
    buffer time (window end for final results, first update's timestamp otherwise) to forward it."""

    def __init__(self, suppressed: Suppressed, store_name: str, delay_ms: int, key_serde: Any,
                 value_serde: Any) -> None:
        self.suppressed = suppressed
        self.store_name = store_name
        self.delay_ms = delay_ms
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.send_old_values = False

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        downstream = fan_out(list(children.values()))
        store = context.get_state_store(self.store_name)
        key_serde = self.key_serde or context.default_key_serde
        if isinstance(key_serde, WindowedSerde):
            key_serde = key_serde.with_default_inner(context.default_key_serde)
        value_serde = self.value_serde or context.default_value_serde
        kser, kde, vde = key_serde.serialize, key_serde.deserialize, value_serde.deserialize
        key_of, value_of = key_serde.not_none_serializer(), value_serde.not_none_serializer()  # for what is not None
        final, delay, send_old = self.suppressed.final_results, self.delay_ms, self.send_old_values
        config = self.suppressed.buffer_config
        max_records, max_bytes, shut_down = config.max_records_count, config.max_bytes_count, config.shut_down
        bounded = config.bounded
        name = self.store_name
        store_hold, store_release = store.writers()

        # The held updates: key bytes -> (buffer time, record timestamp, stored bytes, key, Change to forward); a
        # heap orders them by buffer time (entries whose buffer time changed are skipped when popped). An update
        # held by this node keeps the key and Change it came with, which it forwards as they came (no decoding);
        # one restored from the changelog has None there and is decoded from its stored bytes.
        held: dict[bytes, tuple[int, int, bytes, Any, Change | None]] = {}
        queue: list[tuple[int, bytes]] = []
        size = [0]
        observed = context.observed_stream_time(name)  # the highest update timestamp seen: this node's stream time
        for raw, data in store.all():  # what the changelog restored
            buffer_time, timestamp = _TIMES.unpack_from(data)
            held[raw] = (buffer_time, timestamp, data, None, None)
            queue.append((buffer_time, raw))
            size[0] += len(raw) + len(data)
        heapq.heapify(queue)
        store.on_close(lambda: (held.clear(), queue.clear()))

        def restored_change(data: bytes) -> Change:
            new_raw, old_raw = decode_change(data[16:])
            return Change(None if new_raw is None else vde(new_raw), None if old_raw is None else vde(old_raw))

        def evict_one() -> None:
            buffer_time, raw = heapq.heappop(queue)
            entry = held.get(raw)
            if entry is None or entry[0] != buffer_time:
                return
            del held[raw]
            size[0] -= len(raw) + len(entry[2])
            store_release(raw)
            key, change = entry[3], entry[4]
            if change is None:
                key, change = kde(raw), restored_change(entry[2])
            if change[0] is not None or not final:
                downstream(key, change, entry[1], None)

        def full() -> bool:
            return (max_records is not None and len(held) > max_records) or \
                (max_bytes is not None and size[0] > max_bytes)

        def hold(raw: bytes, key: Any, change: Change, buffer_time: int, timestamp: int, new_raw: bytes | None,
                 old_raw: bytes | None, previous: tuple[int, int, bytes, Any, Change | None] | None) -> None:
            data = _TIMES.pack(buffer_time, timestamp) + encode_change(new_raw, old_raw)
            if previous is not None:
                size[0] -= len(raw) + len(previous[2])
            held[raw] = (buffer_time, timestamp, data, key, change)
            size[0] += len(raw) + len(data)
            store_hold(raw, data)
            if previous is None:
                heapq.heappush(queue, (buffer_time, raw))

        def suppress(key: Any, change: Change, timestamp: int, headers: Any) -> None:
            raw = key_of(key) if key is not None else kser(key)
            previous = held.get(raw)
            if previous is None:
                buffer_time = key[1][1] if final else timestamp
                old = change[1] if send_old else None
                old_raw = None if old is None else value_of(old)
            else:  # the old value stays the one the first held update came with
                buffer_time = previous[0]
                old_raw = decode_change(previous[2][16:])[1]
                old = (previous[4] or restored_change(previous[2]))[1]
            new_raw = None if change[0] is None else value_of(change[0])
            held_change = change if old is change[1] else Change(change[0], old)
            if timestamp > observed.time:
                observed.time = timestamp
            expiry = observed.time - delay
            if previous is None and buffer_time <= expiry:
                # Due as it arrives: forwarded in its turn among the due entries (by buffer time, then key bytes,
                # as the heap orders them) without a round trip through the buffer. If an entry due before it
                # fails downstream, it stays held, as it would have been.
                try:
                    while queue and queue[0] < (buffer_time, raw):
                        evict_one()
                except BaseException:
                    hold(raw, key, held_change, buffer_time, timestamp, new_raw, old_raw, None)
                    raise
                if held_change[0] is not None or not final:
                    downstream(key, held_change, timestamp, None)
            else:
                hold(raw, key, held_change, buffer_time, timestamp, new_raw, old_raw, previous)
            while queue and queue[0][0] <= expiry:
                evict_one()
            if bounded and full():
                if shut_down:
                    raise StreamsError(f"suppression buffer {name!r} is full ({len(held)} records, {size[0]} bytes; "
                                       f"limits: records={max_records}, bytes={max_bytes}) and is set to "
                                       f"shut_down_when_full(); give it a larger BufferConfig")
                while queue and full():
                    evict_one()
        return suppress


def close_delay(table: KTable) -> int:
    """How long after its end a window of ``table`` closes: the grace (plus the gap for sessions) of the
    windowed aggregation that made it. TopologyError if the table is not windowed."""
    current: KTable | None = table
    while current is not None:
        delay = getattr(current._operator, "close_delay_ms", None)
        if delay is not None:
            return delay
        current = current._parents[0] if len(current._parents) == 1 else None  # a filter or map_values, not a join
    raise TopologyError("suppress(Suppressed.until_window_closes()) needs a windowed table (the result of "
                        "windowed_by(...).count/reduce/aggregate, possibly filtered or mapped)")


def suppress(table: KTable, suppressed: Suppressed, name: str | None) -> KTable:
    """Add the suppression node and its buffer store after ``table`` (``KTable.suppress``)."""
    from streaming.dsl.ktable import KTable
    if not isinstance(suppressed, Suppressed):
        raise TopologyError(f"suppress needs a Suppressed (Suppressed.until_window_closes() or "
                            f"Suppressed.until_time_limit(...)), got {suppressed!r}")
    builder = table._builder
    node = name or suppressed.name or builder._new_name("SUPPRESS", prefix="KTABLE")
    store_name = f"{suppressed.name}-store" if suppressed.name else builder._new_store_name("KTABLE-SUPPRESS-")
    delay = close_delay(table) if suppressed.final_results else suppressed.time_to_wait_ms
    store = SuppressionBufferBuilder(Stores.in_memory_key_value_store(store_name), Serdes.Bytes(), Serdes.Bytes())
    builder.topology.add_state_store(store)
    operator = SuppressOperator(suppressed, store_name, delay, table.key_serde, table.value_serde)
    builder.topology.add_operator(node, operator, table._node)
    builder.topology.connect_processor_and_state_stores(node, store_names=[store_name])
    return KTable(builder, node, table.key_serde, table.value_serde, None, operator, parent=table)
