"""``KTable`` (a changelog stream: the latest value per key) and ``GlobalKTable``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streaming.dsl.functions import takes_key
from streaming.dsl.materialized import Materialized
from streaming.dsl.table_operators import TableFilter, TableGroupByMap, TableMapValues, TableToStream
from streaming.dsl.value_getters import StoreValueGetter, ValueGetter
from streaming.errors import TopologyError
from streaming.serdes import Serde

if TYPE_CHECKING:
    from streaming.dsl.builder import StreamsBuilder
    from streaming.dsl.kgrouped import KGroupedTable
    from streaming.dsl.kstream import KStream
    from streaming.dsl.suppress import Suppressed
    from streaming.sinks.database import DatabaseSink


class KTable:
    """A table: each record is an update of its key, a ``None`` value deletes the key.

    Tables come from ``builder.table(topic)``, ``KStream.to_table()`` and the aggregations of grouped
    streams and tables. Inside the topology an update travels as ``Change(new, old)``; ``to_stream()``
    gives the updates as a stream of new values (None for a delete).

    Emission: a table whose store caches (the default) forwards one update per key per commit, with
    the key's latest value (Kafka Streams' record cache; ``statestore.cache.max.bytes`` evicts earlier);
    with caching disabled (``Materialized...with_caching_disabled()``) it forwards every update.
    Operations on a table (``filter``, ``map_values``) forward when their parent does.
    """

    def __init__(self, builder: StreamsBuilder, node: str, key_serde: Serde[Any] | None,
                 value_serde: Serde[Any] | None, store_name: str | None, operator: Any,
                 parent: KTable | None = None, parents: tuple[KTable, ...] = (),
                 value_getter: ValueGetter | None = None) -> None:
        self._builder = builder
        self._node = node
        self.key_serde = key_serde
        self.value_serde = value_serde
        self._store_name = store_name
        self._operator = operator
        self._parents = (parent,) if parent is not None else parents  # the tables its old values come from
        self._getter = value_getter  # how joins look it up, when it has no store and is not a one-parent view

    @property
    def node_name(self) -> str:
        """Name of the topology node that produces this table's updates."""
        return self._node

    @property
    def queryable_store_name(self) -> str | None:
        """The store holding this table (None for a table computed from another, e.g. by ``filter``)."""
        return self._store_name

    def _enable_sending_old_values(self) -> None:
        """Make this table's updates carry old values (and so its parents', which compute them)."""
        if self._operator.send_old_values:
            return
        self._operator.send_old_values = True
        for parent in self._parents:
            parent._enable_sending_old_values()

    def _value_getter(self) -> ValueGetter:
        """How a join looks this table up: its store, or (a table computed from another) the same
        computation over its parent's lookups (see :mod:`streaming.dsl.value_getters`)."""
        if self._store_name is not None:
            return StoreValueGetter(self._store_name)
        if self._getter is not None:
            return self._getter
        make = getattr(self._operator, "value_getter", None)
        if make is None or len(self._parents) != 1:
            raise TopologyError(f"table {self._node!r} cannot be looked up by a join: it has no store and is not "
                                f"computed from one table; materialize it first (e.g. .to_stream().to_table())")
        return make(self._parents[0]._value_getter())  # type: ignore[no-any-return]

    def _then(self, kind: str, operator: Any, name: str | None, value_serde: Serde[Any] | None) -> KTable:
        node = self._builder._add_operator(kind, operator, name, self._node, prefix="KTABLE")
        return KTable(self._builder, node, self.key_serde, value_serde, None, operator, parent=self)

    def filter(self, predicate: Callable[[Any, Any], Any], name: str | None = None) -> KTable:
        """The rows for which ``predicate(key, value)`` holds.

        As in Kafka Streams: a passing value is forwarded, and an update that does not pass forwards a
        delete (``to_stream()`` shows ``(key, None)``), whether or not the key passed before — inputs
        1, 7, 2 with ``v > 5`` give ``(a, None), (a, 7), (a, None)``. Only when a later operation needs
        old values (``group_by``) is an update that neither passes nor replaces a passing value dropped.
        """
        return self._then("FILTER", TableFilter(predicate, negate=False), name, self.value_serde)

    def filter_not(self, predicate: Callable[[Any, Any], Any], name: str | None = None) -> KTable:
        """The rows for which ``predicate(key, value)`` does not hold (see :meth:`filter`)."""
        return self._then("FILTER", TableFilter(predicate, negate=True), name, self.value_serde)

    def map_values(self, mapper: Callable[..., Any], name: str | None = None) -> KTable:
        """Each row's value replaced by ``mapper(value)`` (or ``mapper(key, value)``); deletes stay deletes
        (the mapper never sees None). The key serde is kept; values use the default serde downstream."""
        return self._then("MAPVALUES", TableMapValues(mapper, takes_key(mapper)), name, None)

    def to_stream(self, name: str | None = None) -> KStream:
        """The table's updates as a stream: ``(key, new value)``, and ``(key, None)`` for a delete."""
        from streaming.dsl.kstream import KStream
        node = self._builder._add_operator("TOSTREAM", TableToStream(), name, self._node, prefix="KTABLE")
        return KStream(self._builder, node, self.key_serde, self.value_serde)

    def to_database(self, sink: DatabaseSink, name: str | None = None) -> None:
        """Keep ``sink``'s table in sync with this table: each update is upserted (``to_stream().to_database``;
        see :meth:`KStream.to_database`). A delete is not written."""
        self.to_stream().to_database(sink, name)

    # -- joins (logic in streaming.dsl.table_table_join and streaming.dsl.foreign_key_join) -------------------------
    def join(self, other: KTable, *functions: Callable[..., Any], materialized: Materialized | str | None = None,
             name: str | None = None) -> KTable:
        """Join with another table: on the key, ``join(other, joiner)``, or on a foreign key,
        ``join(other, foreign_key_extractor, joiner)``.

        On the key (both tables co-partitioned, checked at start-up): an update on either side emits the
        key's new result ``joiner(left_value, right_value)`` while both sides have the key, and a delete
        when an update leaves it without one (a row of either side deleted). The result's timestamp is
        the later of the two rows'. Old values go along when a later operation asks for them.

        On a foreign key ``foreign_key_extractor(value)`` (or ``(key, value)``), a key of ``other``: see
        :mod:`streaming.dsl.foreign_key_join` — the tables need not be co-partitioned; the result is
        keyed by this table's key, emitted when either side changes, and deleted when this row is deleted,
        its foreign key leaves the other table, or the other row is deleted. A None foreign key: no result
        (counted as dropped).

        ``materialized`` keeps the result in a named, queryable store (a foreign-key join's result always
        has a store, generated when unnamed; a key join's has one only when asked), with its value serde,
        else ``default.value.serde``: the joiner's results must fit it.
        """
        return self._join(other, functions, "inner", materialized, name)

    def left_join(self, other: KTable, *functions: Callable[..., Any], materialized: Materialized | str | None = None,
                  name: str | None = None) -> KTable:
        """As :meth:`join`, but every row of this table has a result: ``joiner(value, None)`` while the other
        table has no row for its key (or foreign key, which may be None); only deleting this row deletes it."""
        return self._join(other, functions, "left", materialized, name)

    def outer_join(self, other: KTable, joiner: Callable[[Any, Any], Any],
                   materialized: Materialized | str | None = None, name: str | None = None) -> KTable:
        """As :meth:`join` on the key, but a key has a result while either table has it: ``joiner(left,
        None)``, ``joiner(None, right)`` or ``joiner(left, right)``; a delete once neither has it."""
        return self._join(other, (joiner,), "outer", materialized, name)

    def _join(self, other: Any, functions: tuple[Callable[..., Any], ...], kind: str,
              materialized: Materialized | str | None, name: str | None) -> KTable:
        from streaming.dsl.foreign_key_join import join_foreign_key
        from streaming.dsl.table_table_join import join_tables
        if not isinstance(other, KTable):
            raise TopologyError(f"a table joins another KTable, got {other!r}")
        if not all(callable(f) for f in functions) or len(functions) not in (1, 2):
            raise TopologyError(f"table join takes (other, joiner) or (other, foreign_key_extractor, joiner), "
                                f"got functions {functions!r}")
        if len(functions) == 2:
            return join_foreign_key(self, other, functions[0], functions[1], kind == "left", materialized, name)
        return join_tables(self, other, functions[0], kind, materialized, name)

    def suppress(self, suppressed: Suppressed, name: str | None = None) -> KTable:
        """Hold updates back: one final result per window (``Suppressed.until_window_closes()``) or a key's
        latest value after a time limit (``Suppressed.until_time_limit(...)``); see :mod:`streaming.dsl.suppress`."""
        from streaming.dsl.suppress import suppress
        return suppress(self, suppressed, name)

    def group_by(self, selector: Callable[[Any, Any], tuple[Any, Any]], key_serde: Serde[Any] | None = None,
                 value_serde: Serde[Any] | None = None, name: str | None = None) -> KGroupedTable:
        """Regroup the rows: ``selector(key, value) -> (group_key, group_value)``, for ``count``, ``reduce``
        or ``aggregate`` per group.

        Always repartitions (topic ``<application.id>-<name or store>-repartition``). When a row changes,
        its old value is subtracted from its old group and its new value added to its new group (in one
        record when the group is the same), so a key moving between groups leaves the old group and joins
        the new one. Serdes: ``key_serde``/``value_serde`` for the group keys and values (default serdes
        when not given: the selected values are new types).
        """
        from streaming.dsl.kgrouped import KGroupedTable
        self._enable_sending_old_values()
        node = self._builder._add_operator("SELECT", TableGroupByMap(selector, value_serde), name, self._node,
                                           prefix="KTABLE")
        return KGroupedTable(self._builder, node, key_serde, value_serde, name)


class GlobalKTable:
    """A table holding every partition of its topic on every instance, in a global store.

    Built by ``builder.global_table(topic)``. The store is filled from the topic before processing
    starts (it has no changelog: the topic is its changelog) and then follows the topic; processors
    read it with ``context.get_state_store(queryable_store_name)`` (read-only).
    """

    def __init__(self, topic: str, store_name: str, key_serde: Serde[Any] | None,
                 value_serde: Serde[Any] | None) -> None:
        self.topic = topic
        self.key_serde = key_serde
        self.value_serde = value_serde
        self._store_name = store_name

    @property
    def queryable_store_name(self) -> str:
        return self._store_name

    def __repr__(self) -> str:
        return f"GlobalKTable(topic={self.topic!r}, store={self._store_name!r})"
