"""Stream-table joins: a stream record looks up a table's current value (Kafka Streams' KStreamKTableJoin
and KStreamGlobalKTableJoin).

Only stream records trigger the join: each one reads the table as it is when the record is processed.
A task processes its partitions' buffered records in timestamp order, so a table update with a lower
timestamp than a stream record is seen by it, and a task waits for a partition that has no buffered
records but still has records on the broker (by default; ``max.task.idle.ms``: see
:class:`~streaming.runtime.partition_group.PartitionGroup`). A table update alone emits nothing. The output keeps the stream record's key, timestamp
and headers; its value is ``joiner(stream_value, table_value)`` (or ``joiner(key, stream_value,
table_value)``: a joiner taking three arguments gets the key too, as Kafka Streams' ValueJoinerWithKey).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streaming.dsl.functions import joiner_takes_key
from streaming.dsl.repartition import add_repartition
from streaming.dsl.value_getters import ABSENT, Joiner, ValueGetter
from streaming.errors import TopologyError
from streaming.runtime.context import fan_out
from streaming.serdes import Serde
from streaming.topology.nodes import Emit

if TYPE_CHECKING:
    from streaming.dsl.kstream import KStream
    from streaming.dsl.ktable import GlobalKTable, KTable


class StreamTableJoin:
    """Joins each stream record with the table's value for its key.

    Inner: emits ``joiner(value, table_value)`` when the table has the key, else nothing. Left: also
    emits ``joiner(value, None)`` when it has not, and for a record with a None key (Kafka Streams 3.7,
    KIP-962). A record with a None value is skipped (counted in ``dropped_records``), as is one with a
    None key in an inner join.
    """

    def __init__(self, getter: ValueGetter, joiner: Joiner, left: bool) -> None:
        self.getter = getter
        self.joiner = joiner
        self.left = left

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        downstream, joiner, drop = fan_out(list(children.values())), self.joiner, context.record_dropped
        lookup, with_key = self.getter.compile_value(context), joiner_takes_key(self.joiner)
        if self.left:
            def left_join(key: Any, value: Any, timestamp: int, headers: Any) -> None:
                if value is None:
                    drop("null value in a stream-table left join")
                    return
                other = None if key is None else lookup(key)
                if other is ABSENT:
                    other = None
                downstream(key, joiner(key, value, other) if with_key else joiner(value, other), timestamp, headers)
            return left_join

        def join(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            if key is None or value is None:
                drop(f"null {'key' if key is None else 'value'} in a stream-table join")
                return
            other = lookup(key)
            if other is not ABSENT:
                downstream(key, joiner(key, value, other) if with_key else joiner(value, other), timestamp, headers)
        return join


class StreamGlobalTableJoin:
    """Joins each stream record with the global table's value for ``key_mapper(key, value)``.

    Inner: emits ``joiner(value, table_value)`` when the global table has the mapped key. Left: also
    ``joiner(value, None)`` when it has not or the mapper returns None (KIP-962). A record with a None
    value, and in an inner join one whose mapped key is None, is skipped (counted).
    """

    def __init__(self, store_name: str, key_mapper: Callable[[Any, Any], Any], joiner: Joiner, left: bool) -> None:
        self.store_name = store_name
        self.key_mapper = key_mapper
        self.joiner = joiner
        self.left = left

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        downstream, joiner, drop = fan_out(list(children.values())), self.joiner, context.record_dropped
        get, key_mapper, left = context.get_state_store(self.store_name).value_lookup(), self.key_mapper, self.left
        with_key = joiner_takes_key(joiner)

        def global_join(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            if value is None:
                drop("null value in a stream-global table join")
                return
            table_key = key_mapper(key, value)
            if table_key is None:
                if not left:
                    drop("the key mapper of a stream-global table join returned None")
                    return
                table_value = None
            else:
                table_value = get(table_key)
                if table_value is None and not left:
                    return
            downstream(key, joiner(key, value, table_value) if with_key else joiner(value, table_value), timestamp,
                       headers)
        return global_join


def join_table(stream: KStream, table: KTable, joiner: Joiner, left: bool, key_serde: Serde[Any] | None,
               value_serde: Serde[Any] | None, name: str | None) -> KStream:
    """Add a stream-table join (see :class:`StreamTableJoin`); repartition the stream first if its key
    may have changed, into ``<name or generated>-repartition`` with ``key_serde``/``value_serde``
    (default: the stream's). Both inputs must be co-partitioned (checked at start-up)."""
    from streaming.dsl.kstream import KStream
    builder = stream._builder
    if table._builder is not builder:
        raise TopologyError("cannot join a stream and a table of different StreamsBuilders")
    kind = "LEFTJOIN" if left else "JOIN"
    key_serde, value_serde = key_serde or stream.key_serde, value_serde or stream.value_serde
    parent = stream._node
    if stream._repartition_required:
        repartition = f"{name}-left" if name else builder._new_name(f"{kind}-REPARTITION")
        parent = add_repartition(builder, parent, repartition, key_serde, value_serde)
    getter = table._value_getter()
    node = name or builder._new_name(kind)
    topology = builder.topology
    topology.add_operator(node, StreamTableJoin(getter, joiner, left), parent)
    topology.connect_processor_and_state_stores(node, store_names=list(getter.store_names))
    topology.copartition(f"stream-table {'left ' if left else ''}join {node!r}", parent, table._node)
    return KStream(builder, node, key_serde, None)


def join_global_table(stream: KStream, table: GlobalKTable, key_mapper: Callable[[Any, Any], Any], joiner: Joiner,
                      left: bool, name: str | None) -> KStream:
    """Add a stream-global table join (see :class:`StreamGlobalTableJoin`). No repartition and no
    co-partitioning: every instance has the whole global table."""
    from streaming.dsl.kstream import KStream
    builder = stream._builder
    store = table.queryable_store_name
    if store not in builder.topology.global_stores:
        raise TopologyError(f"global table {table!r} is not in this stream's StreamsBuilder")
    node = name or builder._new_name("LEFTJOIN" if left else "JOIN")
    builder.topology.add_operator(node, StreamGlobalTableJoin(store, key_mapper, joiner, left), stream._node)
    return KStream(builder, node, stream.key_serde, None, stream._repartition_required)
