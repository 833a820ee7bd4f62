"""The DSL operations that own a key-value store: stream aggregations, table sources, table aggregations.

Each compiles to one ``emit(key, value, timestamp, headers)`` per task that reads the old value, writes
the new one and forwards ``Change(new, old)``. With a caching store the forwarding is the store's
flush listener's job (one record per key per commit, at the commit); without one, every update is
forwarded at once. The old value goes along only when a downstream node asked for it
(``send_old_values``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streaming.dsl.change import Change, changed, decode_change
from streaming.runtime.context import fan_out
from streaming.serdes import Serde
from streaming.topology.nodes import Emit


class _Materializing:
    """An operation that owns store ``store_name`` and forwards ``Change`` values."""

    def __init__(self, store_name: str) -> None:
        self.store_name = store_name
        self.send_old_values = False

    def _connect(self, children: dict[str, Emit], context: Any) -> tuple[Any, Emit, bool]:
        """The store, the downstream function, and whether the store caches (then its flushes forward)."""
        store = context.get_state_store(self.store_name)
        downstream = fan_out(list(children.values()))

        cached = store.set_flush_listener(downstream, self.send_old_values)
        return store, downstream, cached


class StreamAggregate(_Materializing):
    """``count``, ``reduce`` and ``aggregate`` of a grouped stream (Kafka Streams' KStreamAggregate/Reduce).

    A record with a None key or value is skipped (counted in the task's ``dropped_records``).
    ``reduce``: the first value of a key is its aggregate, later ones ``reducer(aggregate, value)``.
    ``aggregate``: ``aggregator(key, value, aggregate)``, starting from ``initializer()``. An aggregate
    of None deletes the key (and forwards a delete). The aggregate's timestamp is the highest timestamp
    of the records it aggregates — ``max(record timestamp, previous aggregate's)`` — so an out-of-order
    record never moves a result back in time; it is stored with the aggregate and is the output's.
    """

    def __init__(self, store_name: str, kind: str, initializer: Callable[[], Any] | None = None,
                 function: Callable[..., Any] | None = None) -> None:
        super().__init__(store_name)
        if kind not in ("count", "reduce", "aggregate"):
            raise ValueError(f"unknown aggregation {kind!r}")
        self.kind = kind
        self.initializer = initializer
        self.function = function

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        store, downstream, cached = self._connect(children, context)
        key_bytes, get, put = store.timestamped_access()
        drop = context.record_dropped
        send_old = self.send_old_values
        initializer, function = self.initializer, self.function

        if self.kind == "count":
            def count(key: Any, value: Any, timestamp: int, headers: Any) -> None:
                if key is None or value is None:
                    drop("null key" if key is None else "null value")
                    return
                raw = key_bytes(key)
                old = get(raw)
                if old is None:
                    new = 1
                else:
                    new = old[0] + 1
                    timestamp = max(timestamp, old[1])
                put(raw, new, timestamp, headers)
                if not cached:
                    downstream(key, changed((new, old[0] if send_old and old is not None else None)), timestamp,
                               headers)
            return count

        if self.kind == "reduce":
            def reduce(key: Any, value: Any, timestamp: int, headers: Any) -> None:
                if key is None or value is None:
                    drop("null key" if key is None else "null value")
                    return
                raw = key_bytes(key)
                old = get(raw)
                if old is None:
                    new = value
                else:
                    new = function(old[0], value)  # type: ignore[misc]
                    timestamp = max(timestamp, old[1])
                put(raw, new, timestamp, headers)
                if not cached and (new is not None or old is not None):
                    downstream(key, changed((new, old[0] if send_old and old is not None else None)), timestamp,
                               headers)
            return reduce

        def aggregate(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            if key is None or value is None:
                drop("null key" if key is None else "null value")
                return
            raw = key_bytes(key)
            old = get(raw)
            if old is None:
                new = function(key, value, initializer())  # type: ignore[misc]
            else:
                new = function(key, value, old[0])  # type: ignore[misc]
                timestamp = max(timestamp, old[1])
            put(raw, new, timestamp, headers)
            if not cached and (new is not None or old is not None):
                downstream(key, changed((new, old[0] if send_old and old is not None else None)), timestamp,
                           headers)
        return aggregate


class TableSource(_Materializing):
    """A table's updates from a topic (or a stream): the latest value per key, ``None`` deleting it.

    A record with a None key is skipped (counted); a tombstone for a key the table does not have
    changes nothing and forwards nothing. Each value is stored with its record's timestamp (Kafka
    Streams' KTableSource), which is the update's timestamp downstream.
    """

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        store, downstream, cached = self._connect(children, context)
        get, put, drop = store.get, store.put_with_timestamp, context.record_dropped
        send_old = self.send_old_values

        def table_source(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            if key is None:
                drop("null key")
                return
            old = get(key)
            if value is None and old is None:
                return
            put(key, value, timestamp, headers)
            if not cached:
                downstream(key, Change(value, old if send_old else None), timestamp, headers)
        return table_source


class TableAggregate(_Materializing):
    """``count``, ``reduce`` and ``aggregate`` of a grouped table (Kafka Streams' KTableAggregate/Reduce).

    Reads the repartition records of ``KTable.group_by`` (framed ``(new, old)`` values, see
    :mod:`streaming.dsl.change`): the old value is subtracted from the group's aggregate, if it has
    one, then the new value is added (``aggregate``: from ``initializer()`` when the group has none;
    ``reduce``: the new value itself). A group whose members all left keeps its aggregate (a count of
    0), as in Kafka Streams; an aggregate of None deletes the group. The aggregate's timestamp is
    ``max(record timestamp, previous aggregate's)``, as in Kafka Streams' KTableAggregate.
    """

    def __init__(self, store_name: str, kind: str, value_serde: Serde[Any] | None,
                 initializer: Callable[[], Any] | None, adder: Callable[..., Any],
                 subtractor: Callable[..., Any]) -> None:
        super().__init__(store_name)
        if kind not in ("reduce", "aggregate"):
            raise ValueError(f"unknown table aggregation {kind!r}")
        self.kind = kind
        self.value_serde = value_serde
        self.initializer = initializer
        self.adder = adder
        self.subtractor = subtractor

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        store, downstream, cached = self._connect(children, context)
        get, put, drop = store.get_with_timestamp, store.put_with_timestamp, context.record_dropped
        send_old = self.send_old_values
        value_of = (self.value_serde or context.default_value_serde).deserialize
        initializer, adder, subtractor = self.initializer, self.adder, self.subtractor
        is_reduce = self.kind == "reduce"

        def table_aggregate(key: Any, data: Any, timestamp: int, headers: Any) -> None:
            if key is None or data is None:
                drop("null key" if key is None else "null value")
                return
            new_raw, old_raw = decode_change(data)
            previous = get(key)
            old = None
            if previous is not None:
                old = previous[0]
                timestamp = max(timestamp, previous[1])
            aggregate = old
            if is_reduce:
                if old_raw is not None and aggregate is not None:
                    aggregate = subtractor(aggregate, value_of(old_raw))
                if new_raw is not None:
                    value = value_of(new_raw)
                    aggregate = value if aggregate is None else adder(aggregate, value)
            else:
                if old_raw is not None and aggregate is not None:
                    aggregate = subtractor(key, value_of(old_raw), aggregate)
                if new_raw is not None:
                    aggregate = adder(key, value_of(new_raw),
                                      initializer() if aggregate is None else aggregate)  # type: ignore[misc]
            if aggregate is None and old is None:
                return
            put(key, aggregate, timestamp, headers)
            if not cached:
                downstream(key, Change(aggregate, old if send_old else None), timestamp, headers)
        return table_aggregate
