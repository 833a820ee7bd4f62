"""The KStream-KStream join over ``JoinWindows`` (Kafka Streams 3.x's ``KStreamKStreamJoin``).

Both sides buffer their records in window stores (``<name>-this-join-store`` and
``<name>-other-join-store``: RocksDB, duplicates retained, logged, never cached; retention ``before +
after + grace``). A left record at ``t`` first goes into its own store, then joins every right record
of its key in ``[t - before, t + after]``; a right record at ``t`` joins the left records in
``[t - after, t + before]``. Each match emits ``joiner(left, right)`` (or ``joiner(key, left, right)``)
with the later of the two timestamps. Records with a None key or value are dropped and counted (an
outer side's record with a None key and a value is emitted unjoined at once, as Kafka Streams 3.7).

Left and outer joins emit a record that found no partner only once its join window has closed — when
stream time passes ``t + after + grace`` (right records: ``t + before + grace``) — so a partner that
arrives late but within the window still produces the inner result instead of a spurious
``joiner(left, None)``. Until then such records wait in a third store (``<name>-outer-shared-join-store``,
logged), ordered by timestamp; a later match removes them. A record that arrives after its window
already closed is emitted unjoined at once. Stream time is the join's own, shared by both sides (the
highest timestamp either side saw in the task, Kafka Streams' shared ``TimeTracker``), not the task's; the
waiting records are checked when a record moves it forward. The task owns it (Kafka Streams removes the
tracker when the processor closes): a task created again — after an exactly-once abort, or a rebalance that
gives it back — starts from the time of the last commit, which every commit records
(:meth:`~streaming.processor.ProcessorContext.observed_stream_time`), never from its predecessor's.

A buffered record is seen only while its store keeps it: the window stores hide records older than their
own observed time minus their retention (see :mod:`streaming.state.window`), so a record arriving after its
partners' windows closed does not join them (R@0, R@1000, then L@5 with ``JoinWindows.of(10)``: no result),
as Kafka Streams' ``getActualFrom``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streaming.dsl.functions import joiner_takes_key
from streaming.dsl.operators import PassThrough
from streaming.dsl.repartition import add_repartition
from streaming.errors import TopologyError
from streaming.processor.api import ObservedStreamTime
from streaming.runtime.context import fan_out
from streaming.serdes import Serde, Serdes
from streaming.state.stores import Stores
from streaming.topology.nodes import Emit
from streaming.windows.specs import JoinWindows

if TYPE_CHECKING:
    from streaming.dsl.kstream import KStream

_TS = struct.Struct(">q")
_LEN = struct.Struct(">i")
_LEFT, _RIGHT = b"\x00", b"\x01"
_NO_TIME = 1 << 62


class _JoinTime(ObservedStreamTime):
    """Stream time shared by both sides of one join in one task (``time``), and the lowest timestamp waiting in
    the outer store (``_NO_TIME``: none, or not read yet)."""

    __slots__ = ("min_time",)

    def __init__(self) -> None:
        super().__init__()
        self.min_time = _NO_TIME


class StreamJoinSide:
    """One side's node: buffer the record, join it against the other side's store, and (left/outer
    joins) hold or emit it when unmatched."""

    def __init__(self, left: bool, this_store: str, other_store: str, outer_store: str | None, windows: JoinWindows,
                 joiner: Callable[..., Any], outer: bool, key_serde: Serde[Any] | None,
                 left_value_serde: Serde[Any] | None, right_value_serde: Serde[Any] | None, time_key: str) -> None:
        self.left = left
        self.this_store, self.other_store, self.outer_store = this_store, other_store, outer_store
        self.before = windows.before_ms if left else windows.after_ms
        self.after = windows.after_ms if left else windows.before_ms
        self.windows = windows
        self.joiner = joiner
        self.outer = outer
        self.key_serde = key_serde
        self.left_value_serde, self.right_value_serde = left_value_serde, right_value_serde
        self.time_key = time_key  # the task's observed stream time both sides share

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        downstream = fan_out(list(children.values()))
        this_window = context.get_state_store(self.this_store)
        other_window = context.get_state_store(self.other_store)
        outer_store = None if self.outer_store is None else context.get_state_store(self.outer_store)
        tracker = context.observed_stream_time(self.time_key, _JoinTime)
        drop, is_left, outer = context.record_dropped, self.left, self.outer
        before, after, grace = self.before, self.after, self.windows.grace_ms
        # how long after its timestamp a waiting record's window closes, by side
        wait = {_LEFT: self.windows.after_ms + grace, _RIGHT: self.windows.before_ms + grace}
        shortest_wait = min(wait.values())
        raw_joiner = self.joiner
        if joiner_takes_key(raw_joiner):
            join = raw_joiner
        else:
            def join(key: Any, left_value: Any, right_value: Any) -> Any:
                return raw_joiner(left_value, right_value)
        key_serde = self.key_serde or context.default_key_serde
        kser, kde = key_serde.serialize, key_serde.deserialize
        serdes = {_LEFT: self.left_value_serde or context.default_value_serde,
                  _RIGHT: self.right_value_serde or context.default_value_serde}
        this_side, other_side = (_LEFT, _RIGHT) if is_left else (_RIGHT, _LEFT)
        this_ser = serdes[this_side].serialize

        if outer_store is not None and tracker.min_time == _NO_TIME:
            for raw, _ in outer_store.all():  # restored waiting records: the earliest is first
                tracker.min_time = _TS.unpack_from(raw)[0]
                break

        def forward_unjoined(key: Any, value: Any, timestamp: int, side: bytes) -> None:
            result = join(key, value, None) if side == _LEFT else join(key, None, value)
            downstream(key, result, timestamp, None)

        def emit_closed() -> None:
            """Emit the waiting records whose windows have closed (ordered by timestamp)."""
            stream_time = tracker.time
            if tracker.min_time + shortest_wait >= stream_time:
                return
            tracker.min_time = _NO_TIME
            closed = []
            for raw, data in outer_store.all():
                timestamp = _TS.unpack_from(raw)[0]
                if timestamp + shortest_wait >= stream_time:
                    tracker.min_time = min(tracker.min_time, timestamp)
                    break
                side = raw[8:9]
                if timestamp + wait[side] >= stream_time:
                    tracker.min_time = min(tracker.min_time, timestamp)
                    continue
                closed.append((raw, data, timestamp, side))
            for raw, data, timestamp, side in closed:
                key = kde(raw[9:])
                deserialize = serdes[side].deserialize
                for value in _unpack_values(data):
                    forward_unjoined(key, deserialize(value), timestamp, side)
                outer_store.delete(raw)

        def stream_join(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            tracker.time = max(tracker.time, timestamp)
            if key is None or value is None:
                if outer and key is None and value is not None:
                    result = join(None, value, None) if is_left else join(None, None, value)
                    downstream(None, result, timestamp, headers)
                    return
                drop("null key" if key is None else "null value")
                return
            this_window.put_with_timestamp(key, value, timestamp, timestamp)
            if outer_store is not None and timestamp == tracker.time:
                emit_closed()
            time_from, time_to = max(0, timestamp - before), max(0, timestamp + after)
            matched = False
            raw_key = None
            for other_timestamp, other in list(other_window.fetch_timestamped(key, time_from, time_to, True)):
                matched = True
                if outer_store is not None:
                    raw_key = raw_key or kser(key)
                    waiting = _TS.pack(other_timestamp) + other_side + raw_key
                    if outer_store.get(waiting) is not None:
                        outer_store.delete(waiting)
                result = join(key, value, other.value) if is_left else join(key, other.value, value)
                downstream(key, result, max(timestamp, other_timestamp), headers)
            if matched or not outer:
                return
            if outer_store is None or time_to < tracker.time:
                forward_unjoined(key, value, timestamp, this_side)
                return
            raw_key = raw_key or kser(key)
            waiting = _TS.pack(timestamp) + this_side + raw_key
            outer_store.put(waiting, _append_value(outer_store.get(waiting), this_ser(value)))
            tracker.min_time = min(tracker.min_time, timestamp)
        return stream_join


def _append_value(data: bytes | None, value: bytes) -> bytes:
    """A waiting entry holds every value of one (timestamp, side, key): length-prefixed, in arrival order."""
    return (data or b"") + _LEN.pack(len(value)) + value


def _unpack_values(data: bytes) -> list[bytes]:
    values, position = [], 0
    while position < len(data):
        size = _LEN.unpack_from(data, position)[0]
        values.append(data[position + 4:position + 4 + size])
        position += 4 + size
    return values


def join_streams(this: KStream, other: KStream, joiner: Callable[..., Any], windows: JoinWindows, kind: str,
                 key_serde: Serde[Any] | None, value_serde: Serde[Any] | None,
                 other_value_serde: Serde[Any] | None, store_name: str | None, name: str | None) -> KStream:
    """Wire a KStream-KStream join (``KStream.join/left_join/outer_join`` with another KStream)."""
    from streaming.dsl.kstream import KStream
    if not isinstance(windows, JoinWindows):
        raise TopologyError(f"a KStream-KStream {kind} join needs JoinWindows (e.g. JoinWindows.of(5000)), "
                            f"got {windows!r}")
    if other._builder is not this._builder:
        raise TopologyError("cannot join streams of different StreamsBuilders")
    if not callable(joiner):
        raise TopologyError(f"the joiner of a {kind} join must be callable, got {joiner!r}")
    builder = this._builder
    topology = builder.topology
    key_serde = key_serde or this.key_serde or other.key_serde
    left_serde, right_serde = value_serde or this.value_serde, other_value_serde or other.value_serde
    this_name = name or builder._new_name("JOINTHIS")
    other_name = f"{name}-other" if name else builder._new_name("JOINOTHER")
    prefix_this = f"{store_name}-this" if store_name else this_name
    prefix_other = f"{store_name}-other" if store_name else other_name
    this_store, other_store = f"{prefix_this}-join-store", f"{prefix_other}-join-store"
    retention, size = windows.retention_ms(), max(windows.size(), 1)
    for store, serde in ((this_store, left_serde), (other_store, right_serde)):
        supplier = Stores.persistent_window_store(store, max(retention, size), size, retain_duplicates=True)
        topology.add_state_store(Stores.window_store_builder(supplier, key_serde, serde))
    outer_store = None
    if kind in ("left", "outer"):
        outer_store = f"{store_name}-outer-shared-join-store" if store_name else \
            f"{builder._new_name('OUTERSHARED')}-store"
        topology.add_state_store(Stores.key_value_store_builder(
            Stores.persistent_key_value_store(outer_store), Serdes.Bytes(), Serdes.Bytes()))
    this_parent, other_parent = this._node, other._node
    if this._repartition_required:
        this_parent = add_repartition(builder, this_parent, f"{this_name}-left", key_serde, left_serde)
    if other._repartition_required:
        other_parent = add_repartition(builder, other_parent, f"{this_name}-right", key_serde, right_serde)
    sides = ((this_name, this_parent, True, this_store, other_store, kind in ("left", "outer")),
             (other_name, other_parent, False, other_store, this_store, kind == "outer"))
    for node, parent, left, own, others, is_outer in sides:
        operator = StreamJoinSide(left, own, others, outer_store, windows, joiner, is_outer, key_serde, left_serde,
                                  right_serde, this_store)
        topology.add_operator(node, operator, parent)
        stores = [own, others] + ([outer_store] if outer_store else [])
        topology.connect_processor_and_state_stores(node, store_names=stores)
    merge = builder._new_name("MERGE")
    topology.add_operator(merge, PassThrough(), this_name, other_name)
    # Both sides' topics must be co-partitioned: checked at start-up, naming the join; a repartition topic
    # before the join gets the other side's partition count.
    topology.copartition(f"stream-stream {'' if kind == 'inner' else kind + ' '}join {this_name!r}", this_parent,
                         other_parent)
    return KStream(builder, merge, key_serde, None)

