"""Windowed grouped streams: ``KGroupedStream.windowed_by(...)`` then ``count``, ``reduce`` or ``aggregate``
into a KTable keyed by ``Windowed(key, window)`` and backed by a window or session store."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streaming.dsl.ktable import KTable
from streaming.dsl.materialized import Materialized, as_materialized
from streaming.dsl.window_aggregate import SessionWindowAggregate, SlidingWindowAggregate, TimeWindowAggregate
from streaming.errors import TopologyError
from streaming.serdes import Serde, Serdes
from streaming.state.stores import StoreBuilder, Stores
from streaming.windows.serdes import SessionWindowedSerde, WindowedSerde
from streaming.windows.specs import SessionWindows, SlidingWindows, TimeWindows

if TYPE_CHECKING:
    from streaming.dsl.kgrouped import KGroupedStream

MaterializedSpec = Materialized | str | None


def _retention(spec: Materialized, windows: Any, store_name: str) -> int:
    """The store's retention: ``with_retention`` if given (at least size + grace), else size + grace."""
    minimum = windows.retention_ms()
    if spec.retention_ms is None:
        return minimum
    if spec.retention_ms < minimum:
        raise TopologyError(f"store {store_name!r}: retention {spec.retention_ms} ms is shorter than the window size "
                            f"plus grace ({minimum} ms), so windows would be dropped while still open")
    return spec.retention_ms


def window_store_builder(spec: Materialized, store_name: str, windows: TimeWindows | SlidingWindows,
                         key_serde: Serde[Any] | None, value_serde: Serde[Any] | None) -> StoreBuilder:
    """The window store ``spec`` describes (RocksDB unless ``with_store_type("in_memory")``; logged; cached
    unless turned off)."""
    retention = _retention(spec, windows, store_name)
    factory = Stores.in_memory_window_store if spec.store_type == "in_memory" else Stores.persistent_window_store
    builder = Stores.window_store_builder(factory(store_name, retention, windows.size()),
                                          spec.key_serde or key_serde, spec.value_serde or value_serde)
    return _configure(builder, spec)


def session_store_builder(spec: Materialized, store_name: str, windows: SessionWindows,
                          key_serde: Serde[Any] | None, value_serde: Serde[Any] | None) -> StoreBuilder:
    retention = _retention(spec, windows, store_name)
    factory = Stores.in_memory_session_store if spec.store_type == "in_memory" else Stores.persistent_session_store
    builder = Stores.session_store_builder(factory(store_name, retention), spec.key_serde or key_serde,
                                           spec.value_serde or value_serde)
    return _configure(builder, spec)


def _configure(builder: StoreBuilder, spec: Materialized) -> StoreBuilder:
    if spec.supplier is not None:
        raise TopologyError(f"store {builder.name!r}: a windowed aggregation makes its own window or session "
                            f"store; name it with Materialized.as_(name) instead of a key-value supplier")
    if spec.logging_enabled:
        builder.with_logging_enabled(dict(spec.log_config))
    else:
        builder.with_logging_disabled()
    if spec.caching_enabled:
        builder.with_caching_enabled()
    return builder


class _WindowedKStream:
    """What time-windowed and session-windowed streams share: building the store, the aggregation node
    (after the grouping's repartition topic, if any) and the late-records sink."""

    def __init__(self, grouped: KGroupedStream, windows: Any, late_records_topic: str | None) -> None:
        if late_records_topic is not None and (not isinstance(late_records_topic, str) or not late_records_topic):
            raise TopologyError(f"windowed_by: late_records_topic must be a topic name, got {late_records_topic!r}")
        self._grouped = grouped
        self.windows = windows
        self.late_records_topic = late_records_topic

    def _build(self, kind: str, make_operator: Callable[[str, str | None], Any], materialized: MaterializedSpec,
               value_serde: Serde[Any] | None, name: str | None) -> KTable:
        grouped = self._grouped
        builder = grouped._builder
        spec = as_materialized(materialized)
        store_name = spec.store_name or builder._new_store_name(f"KSTREAM-{kind}-")
        node = name or builder._new_name(kind)
        store = self._store_builder(spec, store_name, grouped.key_serde, value_serde)
        builder.topology.add_state_store(store)
        late_sink = f"{node}-LATE-RECORDS" if self.late_records_topic is not None else None
        operator = make_operator(store_name, late_sink)
        parent = grouped._node
        if grouped._repartition_required:
            if grouped._source is None:
                grouped._source = grouped._repartition(grouped._name or store_name)
            parent = grouped._source
        builder.topology.add_operator(node, operator, parent)
        builder.topology.connect_processor_and_state_stores(node, store_names=[store_name])
        if late_sink is not None:
            builder.topology.add_sink(late_sink, self.late_records_topic, node, key_serde=grouped.key_serde,
                                      value_serde=grouped.value_serde)
        return KTable(builder, node, self._key_serde(store.key_serde), store.value_serde, store_name, operator)

    def _store_builder(self, spec: Materialized, store_name: str, key_serde: Serde[Any] | None,
                       value_serde: Serde[Any] | None) -> StoreBuilder:
        raise NotImplementedError

    def _key_serde(self, key_serde: Serde[Any] | None) -> Serde[Any]:
        raise NotImplementedError


class TimeWindowedKStream(_WindowedKStream):
    """A grouped stream windowed by ``TimeWindows`` (tumbling or hopping). Each aggregation returns a
    KTable keyed by ``Windowed(key, Window(start, end))`` over a window store (retention: size + grace, or
    ``Materialized...with_retention``); see :mod:`streaming.dsl.window_aggregate` for closing, late
    records and timestamps. With caching (the default) the table forwards one update per window per
    commit; ``suppress(Suppressed.until_window_closes())`` forwards only each window's final result."""

    def _store_builder(self, spec: Materialized, store_name: str, key_serde: Serde[Any] | None,
                       value_serde: Serde[Any] | None) -> StoreBuilder:
        return window_store_builder(spec, store_name, self.windows, key_serde, value_serde)

    def _key_serde(self, key_serde: Serde[Any] | None) -> Serde[Any]:
        return WindowedSerde(key_serde, self.windows.size())

    def count(self, materialized: MaterializedSpec = None, name: str | None = None) -> KTable:
        """The number of records per key and window (``Serdes.Long()`` values)."""
        return self._build("AGGREGATE", lambda store, late: TimeWindowAggregate(
            store, self.windows, "count", late_sink=late), materialized, Serdes.Long(), name)

    def reduce(self, reducer: Callable[[Any, Any], Any], materialized: MaterializedSpec = None,
               name: str | None = None) -> KTable:
        """``reducer(aggregate, value)`` per key and window; a window's first value is its aggregate."""
        return self._build("REDUCE", lambda store, late: TimeWindowAggregate(
            store, self.windows, "reduce", function=reducer, late_sink=late), materialized,
            self._grouped.value_serde, name)

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any],
                  materialized: MaterializedSpec = None, name: str | None = None) -> KTable:
        """``aggregator(key, value, aggregate)`` per key and window, from ``initializer()``."""
        return self._build("AGGREGATE", lambda store, late: TimeWindowAggregate(
            store, self.windows, "aggregate", initializer, aggregator, late_sink=late), materialized, None, name)


class SlidingWindowedKStream(TimeWindowedKStream):
    """A grouped stream windowed by ``SlidingWindows``: aggregations return a KTable keyed by
    ``Windowed(key, Window(start, end))`` (both ends inclusive, ``end - start == max_difference``) over a
    window store kept for ``2 * max_difference + grace`` (a record reads back that far); see
    :class:`~streaming.dsl.window_aggregate.SlidingWindowAggregate`."""

    def count(self, materialized: MaterializedSpec = None, name: str | None = None) -> KTable:
        return self._build("AGGREGATE", lambda store, late: SlidingWindowAggregate(
            store, self.windows, "count", None, None, late_sink=late), materialized, Serdes.Long(), name)

    def reduce(self, reducer: Callable[[Any, Any], Any], materialized: MaterializedSpec = None,
               name: str | None = None) -> KTable:
        return self._build("REDUCE", lambda store, late: SlidingWindowAggregate(
            store, self.windows, "reduce", None, reducer, late_sink=late), materialized, self._grouped.value_serde,
            name)

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any],
                  materialized: MaterializedSpec = None, name: str | None = None) -> KTable:
        return self._build("AGGREGATE", lambda store, late: SlidingWindowAggregate(
            store, self.windows, "aggregate", initializer, aggregator, late_sink=late), materialized, None, name)


class SessionWindowedKStream(_WindowedKStream):
    """A grouped stream windowed by ``SessionWindows``: aggregations return a KTable keyed by
    ``Windowed(key, Window(first, last record))`` over a session store; merged-away sessions are
    retracted with tombstones (see :class:`~streaming.dsl.window_aggregate.SessionWindowAggregate`)."""

    def _store_builder(self, spec: Materialized, store_name: str, key_serde: Serde[Any] | None,
                       value_serde: Serde[Any] | None) -> StoreBuilder:
        return session_store_builder(spec, store_name, self.windows, key_serde, value_serde)

    def _key_serde(self, key_serde: Serde[Any] | None) -> Serde[Any]:
        return SessionWindowedSerde(key_serde)

    def count(self, materialized: MaterializedSpec = None, name: str | None = None) -> KTable:
        return self._build("AGGREGATE", lambda store, late: SessionWindowAggregate(
            store, self.windows, "count", None, None, None, late_sink=late), materialized, Serdes.Long(), name)

    def reduce(self, reducer: Callable[[Any, Any], Any], materialized: MaterializedSpec = None,
               name: str | None = None) -> KTable:
        """``reducer(aggregate, value)``; merging sessions reduces their aggregates the same way."""
        return self._build("REDUCE", lambda store, late: SessionWindowAggregate(
            store, self.windows, "reduce", None, reducer, None, late_sink=late), materialized,
            self._grouped.value_serde, name)

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any],
                  merger: Callable[[Any, Any, Any], Any], materialized: MaterializedSpec = None,
                  name: str | None = None) -> KTable:
        """``aggregator(key, value, aggregate)`` from ``initializer()``; ``merger(key, agg1, agg2)`` combines
        the aggregates of sessions a record bridges."""
        return self._build("AGGREGATE", lambda store, late: SessionWindowAggregate(
            store, self.windows, "aggregate", initializer, aggregator, merger, late_sink=late), materialized, None,
            name)
