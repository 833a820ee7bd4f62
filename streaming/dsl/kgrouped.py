"""Grouped streams and tables: ``count``, ``reduce`` and ``aggregate`` into a KTable."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streaming.dsl.ktable import KTable
from streaming.dsl.materialized import Materialized, as_materialized, make_store_builder
from streaming.dsl.repartition import add_repartition
from streaming.dsl.stateful_operators import StreamAggregate, TableAggregate
from streaming.errors import TopologyError
from streaming.serdes import Serde, Serdes

if TYPE_CHECKING:
    from streaming.dsl.builder import StreamsBuilder
    from streaming.dsl.windowed import SessionWindowedKStream, TimeWindowedKStream
    from streaming.windows.specs import SessionWindows, SlidingWindows, TimeWindows

MaterializedSpec = Materialized | str | None


class _Grouped:
    """What grouped streams and tables share: the grouping's serdes and its one repartition topic."""

    _prefix = "KSTREAM"

    def __init__(self, builder: StreamsBuilder, node: str, key_serde: Serde[Any] | None,
                 value_serde: Serde[Any] | None, repartition_required: bool, name: str | None) -> None:
        self._builder = builder
        self._node = node
        self.key_serde = key_serde
        self.value_serde = value_serde
        self._repartition_required = repartition_required
        self._name = name
        self._source: str | None = None  # the repartition topic's source, once made

    def _build(self, kind: str, operator: Any, materialized: MaterializedSpec, value_serde: Serde[Any] | None,
               name: str | None) -> KTable:
        """Add the store and the aggregation node (after the repartition topic, made by the first
        aggregation of this grouping and shared by the next ones)."""
        builder = self._builder
        spec = as_materialized(materialized)
        store_name = spec.store_name or builder._new_store_name(f"{self._prefix}-{kind}-")
        node = name or builder._new_name(kind, prefix=self._prefix)
        store = make_store_builder(spec, store_name, self.key_serde, value_serde)
        builder.topology.add_state_store(store)  # a store name used twice fails here, before any node is added
        operator.store_name = store_name
        parent = self._node
        if self._repartition_required:
            if self._source is None:
                self._source = self._repartition(self._name or store_name)
            parent = self._source
        builder.topology.add_operator(node, operator, parent)
        builder.topology.connect_processor_and_state_stores(node, store_names=[store_name])
        return KTable(builder, node, store.key_serde, store.value_serde, store_name, operator)

    def _repartition(self, name: str) -> str:
        raise NotImplementedError


class KGroupedStream(_Grouped):
    """A stream grouped by key (``group_by_key``) or by a selected key (``group_by``), to aggregate.

    Every aggregation returns a KTable backed by a key-value store (RocksDB, logged to the changelog
    ``<application.id>-<store>-changelog``, cached: see :class:`~streaming.Materialized`). Records with
    a None key or value are skipped (counted in the task's ``dropped_records``, logged at debug), as
    in Kafka Streams. When the grouping changed the key, the records first go through the repartition
    topic ``<application.id>-<name>-repartition`` (``name``: the ``name=`` of ``group_by``, else the
    first aggregation's store name), written with the grouping's key and value serdes.

    Emission: with caching, the table forwards one update per key per commit (the latest aggregate);
    without, one per input record.
    """

    def _repartition(self, name: str) -> str:
        return add_repartition(self._builder, self._node, name, self.key_serde, self.value_serde)

    def count(self, materialized: MaterializedSpec = None, name: str | None = None) -> KTable:
        """The number of records per key. Values are stored and forwarded with ``Serdes.Long()`` unless
        ``materialized`` gives another value serde."""
        return self._build("AGGREGATE", StreamAggregate("", "count"), materialized, Serdes.Long(), name)

    def reduce(self, reducer: Callable[[Any, Any], Any], materialized: MaterializedSpec = None,
               name: str | None = None) -> KTable:
        """Combine the values per key: the first value of a key is its aggregate, then each new value
        makes ``reducer(aggregate, value)``. Stored with the grouping's value serde."""
        return self._build("REDUCE", StreamAggregate("", "reduce", function=reducer), materialized,
                           self.value_serde, name)

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any],
                  materialized: MaterializedSpec = None, name: str | None = None) -> KTable:
        """Fold the values per key: ``aggregator(key, value, aggregate)``, from ``initializer()`` for a new
        key. Stored with ``materialized``'s value serde, else ``default.value.serde``. An aggregator
        returning None deletes the key (and forwards a delete)."""
        return self._build("AGGREGATE", StreamAggregate("", "aggregate", initializer, aggregator), materialized,
                           None, name)


    def windowed_by(self, windows: TimeWindows | SlidingWindows | SessionWindows,
                    late_records_topic: str | None = None) -> TimeWindowedKStream | SessionWindowedKStream:
        """Aggregate per key and window (see :mod:`streaming.dsl.windowed`). Records arriving for windows
        that already closed are dropped and counted; with ``late_records_topic`` they are also written
        there (as they came in, with the grouping's serdes)."""
        from streaming.dsl import windowed
        from streaming.windows.specs import SessionWindows, SlidingWindows, TimeWindows
        if isinstance(windows, TimeWindows):
            return windowed.TimeWindowedKStream(self, windows, late_records_topic)
        if isinstance(windows, SlidingWindows):
            return windowed.SlidingWindowedKStream(self, windows, late_records_topic)
        if isinstance(windows, SessionWindows):
            return windowed.SessionWindowedKStream(self, windows, late_records_topic)
        raise TopologyError(f"windowed_by needs TimeWindows, SlidingWindows or SessionWindows, got {windows!r}")


class KGroupedTable(_Grouped):
    """A table regrouped by ``KTable.group_by``, to aggregate per group.

    Updates always go through a repartition topic (``<application.id>-<name or store>-repartition``)
    carrying each row's old and new value. On an update the old value is subtracted from its group
    (if that group has an aggregate) and the new value added to its group; a row moving between groups
    changes both. A group whose rows all left keeps its aggregate (``count`` shows 0), as in Kafka
    Streams. Emission as for :class:`KGroupedStream`: per commit with caching, per change without (a
    moving row then updates two groups, a row changing within its group updates its group once).
    """

    _prefix = "KTABLE"

    def __init__(self, builder: StreamsBuilder, node: str, key_serde: Serde[Any] | None,
                 value_serde: Serde[Any] | None, name: str | None) -> None:
        super().__init__(builder, node, key_serde, value_serde, True, name)

    def _repartition(self, name: str) -> str:
        # Values are already serialized and framed (old and new) by the group_by node.
        return add_repartition(self._builder, self._node, name, self.key_serde, Serdes.Bytes(),
                               drop_null_keys=False)

    def count(self, materialized: MaterializedSpec = None, name: str | None = None) -> KTable:
        """The number of rows per group (``Serdes.Long()`` values unless ``materialized`` says otherwise)."""
        operator = TableAggregate("", "aggregate", self.value_serde, _zero, _plus_one, _minus_one)
        return self._build("AGGREGATE", operator, materialized, Serdes.Long(), name)

    def reduce(self, adder: Callable[[Any, Any], Any], subtractor: Callable[[Any, Any], Any],
               materialized: MaterializedSpec = None, name: str | None = None) -> KTable:
        """``adder(aggregate, value)`` when a row joins or changes in a group, ``subtractor(aggregate, old)``
        when it leaves or changes; a group's first value is its aggregate."""
        operator = TableAggregate("", "reduce", self.value_serde, None, adder, subtractor)
        return self._build("REDUCE", operator, materialized, self.value_serde, name)

    def aggregate(self, initializer: Callable[[], Any], adder: Callable[[Any, Any, Any], Any],
                  subtractor: Callable[[Any, Any, Any], Any], materialized: MaterializedSpec = None,
                  name: str | None = None) -> KTable:
        """``adder(key, value, aggregate)`` when a row joins or changes in group ``key`` (from
        ``initializer()`` for a new group), ``subtractor(key, old_value, aggregate)`` when it leaves or
        changes. Stored with ``materialized``'s value serde, else ``default.value.serde``."""
        operator = TableAggregate("", "aggregate", self.value_serde, initializer, adder, subtractor)
        return self._build("AGGREGATE", operator, materialized, None, name)


def _zero() -> int:
    return 0


def _plus_one(key: Any, value: Any, aggregate: int) -> int:
    return aggregate + 1


def _minus_one(key: Any, value: Any, aggregate: int) -> int:
    return aggregate - 1
