"""Table-table joins on the primary key (Kafka Streams' KTableKTableJoin, LeftJoin, OuterJoin and JoinMerger).

Each side's updates go through a join node that looks up the other side's current value; both feed a
merger node that is the result table. An update on either side emits the key's new result (or a delete
when the key has no result any more), with the result's old value when a later operation asks for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streaming.dsl.change import Change
from streaming.dsl.functions import keyed_joiner
from streaming.dsl.materialized import Materialized, as_materialized, make_store_builder
from streaming.dsl.value_getters import Joiner, JoinValueGetter, KeyedJoiner, ValueGetter
from streaming.errors import TopologyError
from streaming.runtime.context import fan_out
from streaming.topology.nodes import Emit

if TYPE_CHECKING:
    from streaming.dsl.ktable import KTable

KINDS = ("inner", "left", "outer")


class TableJoinSide:
    """One side of a table-table join: joins this side's update ``Change(new, old)`` with the other
    side's current value ``other``.

    Which rows have a result: ``inner`` joins need both sides, ``left`` the left one, ``outer`` either;
    the joiner gets None for a missing side. So an update of this side emits
    ``Change(result(new, other), result(old, other))``: nothing when the other side is missing and this
    side's rows need it (an inner join, the right side of a left join); a delete when this side's row is
    deleted and the other side's row does not keep a result. The old result is computed only when asked
    for (``send_old_values``). The timestamp is the later of the update's and the other value's.
    """

    def __init__(self, other: ValueGetter, joiner: KeyedJoiner, kind: str, is_left: bool) -> None:
        self.other = other
        self.joiner = joiner
        self.is_left = is_left
        self.keeps_this = kind == "outer" or (kind == "left" and is_left)  # this side's rows alone have a result
        self.keeps_other = kind == "outer" or (kind == "left" and not is_left)
        self.send_old_values = False

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        downstream, get_other, send_old = fan_out(list(children.values())), self.other.compile(context), \
            self.send_old_values
        keeps_this, keeps_other, user_joiner = self.keeps_this, self.keeps_other, self.joiner
        if self.is_left:
            joiner = user_joiner
        else:
            def joiner(key: Any, this: Any, other: Any) -> Any:
                return user_joiner(key, other, this)

        def join_side(key: Any, change: Change, timestamp: int, headers: Any) -> None:
            found = get_other(key)
            if found is None:
                if not keeps_this:
                    return
                other = None
            else:
                other = found[0]
                timestamp = max(timestamp, found[1])
            new, old = change
            if new is not None and (other is not None or keeps_this):
                new = joiner(key, new, other)
            elif other is not None and keeps_other:
                new = joiner(key, None, other)
            else:
                new = None
            if not send_old:
                old = None
            elif old is not None and (other is not None or keeps_this):
                old = joiner(key, old, other)
            elif other is not None and keeps_other:
                old = joiner(key, None, other)
            else:
                old = None
            downstream(key, Change(new, old), timestamp, headers)
        return join_side


class TableJoinMerger:
    """The result table of a table-table join: forwards both sides' results.

    Materialized (``materialized=``), it keeps each key's result in its store (queryable, with the
    result's timestamp) and forwards updates as a table source does: one per key per commit when the
    store caches, the old value from the store, nothing for a delete of a key it does not have.
    Unmaterialized, it forwards the join nodes' changes as they are (their old values computed from the
    sides' old values), and joins look it up through both sides' lookups.
    """

    def __init__(self, store_name: str | None) -> None:
        self.store_name = store_name
        self.send_old_values = False

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        downstream = fan_out(list(children.values()))
        if self.store_name is None:
            return downstream
        store, send_old = context.get_state_store(self.store_name), self.send_old_values

        cached = store.set_flush_listener(downstream, send_old)
        get, put = store.get, store.put_with_timestamp

        def merge(key: Any, change: Change, timestamp: int, headers: Any) -> None:
            new = change[0]
            old = get(key)
            if new is None and old is None:
                return
            put(key, new, timestamp, headers)
            if not cached:
                downstream(key, Change(new, old if send_old else None), timestamp, headers)
        return merge


def join_tables(left: KTable, right: KTable, joiner: Joiner, kind: str, materialized: Materialized | str | None,
                name: str | None) -> KTable:
    """Add a table-table join of ``kind`` (inner, left, outer); see :class:`TableJoinSide` for what it
    emits. ``materialized`` keeps the result in a store (queryable); otherwise the result is computed
    from the two tables when looked up. Both tables must be co-partitioned (checked at start-up)."""
    from streaming.dsl.ktable import KTable
    if kind not in KINDS:
        raise TopologyError(f"table join kind must be one of {', '.join(KINDS)}, got {kind!r}")
    builder = left._builder
    if right._builder is not builder:
        raise TopologyError("cannot join tables of different StreamsBuilders")
    topology = builder.topology
    prefix = {"inner": "JOIN", "left": "LEFT", "outer": "OUTER"}[kind]
    left_getter, right_getter = left._value_getter(), right._value_getter()
    keyed = keyed_joiner(joiner)
    this_name = f"{name}-join-this" if name else builder._new_name(f"{prefix}THIS", prefix="KTABLE")
    other_name = f"{name}-join-other" if name else builder._new_name(f"{prefix}OTHER", prefix="KTABLE")
    merge_name = name or builder._new_name("MERGE", prefix="KTABLE")

    left_side = TableJoinSide(right_getter, keyed, kind, is_left=True)
    right_side = TableJoinSide(left_getter, keyed, kind, is_left=False)
    topology.add_operator(this_name, left_side, left._node)
    topology.connect_processor_and_state_stores(this_name, store_names=list(right_getter.store_names))
    topology.add_operator(other_name, right_side, right._node)
    topology.connect_processor_and_state_stores(other_name, store_names=list(left_getter.store_names))

    spec = None if materialized is None else as_materialized(materialized)
    store_name = None
    if spec is not None:
        store_name = spec.store_name or builder._new_store_name("KTABLE-MERGE-")
        topology.add_state_store(make_store_builder(spec, store_name, left.key_serde, None))
    merger = TableJoinMerger(store_name)
    topology.add_operator(merge_name, merger, this_name, other_name)
    if store_name is not None:
        topology.connect_processor_and_state_stores(merge_name, store_names=[store_name])
    topology.copartition(f"table-table {'' if kind == 'inner' else kind + ' '}join {merge_name!r}", left._node,
                         right._node)
    key_serde = spec.key_serde if spec is not None and spec.key_serde is not None else left.key_serde
    value_serde = spec.value_serde if spec is not None else None
    # Old values: a materialized result reads them from its store; otherwise both join nodes compute
    # them from their table's old values.
    sides = () if store_name is not None else (
        KTable(builder, this_name, left.key_serde, None, None, left_side, parent=left),
        KTable(builder, other_name, left.key_serde, None, None, right_side, parent=right))
    return KTable(builder, merge_name, key_serde, value_serde, store_name, merger, parents=sides,
                  value_getter=None if store_name is not None else JoinValueGetter(left_getter, right_getter,
                                                                                   keyed, kind))
