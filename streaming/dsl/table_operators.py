"""Stateless KTable operations: each receives and forwards ``Change(new, old)`` values.

``send_old_values`` is set on an operation when a node downstream needs old values; the operation
then asks its parent for them too (see ``KTable._enable_sending_old_values``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streaming.dsl.change import Change, encode_change
from streaming.dsl.value_getters import FilterValueGetter, MapValuesValueGetter, ValueGetter
from streaming.runtime.context import fan_out
from streaming.serdes import Serde
from streaming.topology.nodes import Emit


class TableFilter:
    """Keeps the values for which ``predicate(key, value)`` holds (or fails, ``negate``); Kafka Streams'
    KTableFilter.

    Without old values (nothing downstream asked for them) every update is forwarded: its value when it
    passes, else a delete — so ``to_stream()`` shows ``(key, None)`` for each dropped update, even for a
    key that never passed. With old values (``send_old_values``, asked by e.g. ``group_by``), the old
    value is filtered too, and an update whose new and old values both fail forwards nothing.
    """

    def __init__(self, predicate: Callable[[Any, Any], Any], negate: bool) -> None:
        self.predicate = predicate
        self.negate = negate
        self.send_old_values = False

    def value_getter(self, parent: ValueGetter) -> ValueGetter:
        """Lookups of the filtered table (for joins): the parent's value if it passes."""
        return FilterValueGetter(parent, self.predicate, self.negate)

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        downstream, predicate, negate = fan_out(list(children.values())), self.predicate, self.negate
        if not self.send_old_values:
            def table_filter(key: Any, change: Change, timestamp: int, headers: Any) -> None:
                new = change[0]
                if new is not None and bool(predicate(key, new)) is negate:
                    new = None
                downstream(key, Change(new, None), timestamp, headers)
            return table_filter

        def table_filter_with_old_values(key: Any, change: Change, timestamp: int, headers: Any) -> None:
            new, old = change
            if new is not None and bool(predicate(key, new)) is negate:
                new = None
            if old is not None and bool(predicate(key, old)) is negate:
                old = None
            if new is None and old is None:
                return
            downstream(key, Change(new, old), timestamp, headers)
        return table_filter_with_old_values


class TableMapValues:
    """``mapper(value)`` (or ``mapper(key, value)``) of the new value, and of the old one when asked; a
    delete stays a delete (the mapper never sees None)."""

    def __init__(self, mapper: Callable[..., Any], with_key: bool) -> None:
        self.mapper = mapper
        self.with_key = with_key
        self.send_old_values = False

    def value_getter(self, parent: ValueGetter) -> ValueGetter:
        """Lookups of the mapped table (for joins): the parent's value, mapped."""
        return MapValuesValueGetter(parent, self.mapper, self.with_key)

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        downstream, mapper, send_old = fan_out(list(children.values())), self.mapper, self.send_old_values
        if self.with_key:
            def table_map_values_with_key(key: Any, change: Change, timestamp: int, headers: Any) -> None:
                new, old = change
                mapped_old = None if old is None or not send_old else mapper(key, old)
                downstream(key, Change(None if new is None else mapper(key, new), mapped_old), timestamp, headers)
            return table_map_values_with_key

        def table_map_values(key: Any, change: Change, timestamp: int, headers: Any) -> None:
            new, old = change
            downstream(key, Change(None if new is None else mapper(new),
                                   None if old is None or not send_old else mapper(old)), timestamp, headers)
        return table_map_values


class TableToStream:
    """A table's updates as a stream: the new value of each update, None for a delete."""

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        downstream = fan_out(list(children.values()))

        def to_stream(key: Any, change: Change, timestamp: int, headers: Any) -> None:
            downstream(key, change[0], timestamp, headers)
        return to_stream


class TableGroupByMap:
    """``KTable.group_by``: maps each update to its group(s) for the repartition topic.

    ``selector(key, value) -> (group_key, group_value)`` is applied to the new and the old value. When
    both land in the same group, one record carries both (the aggregation subtracts the old and adds
    the new in one step, Kafka Streams' KIP-904); otherwise the old group gets a subtraction record
    first, then the new group an addition record. Either way each group sees a key's updates in order.
    A pair with a None key or value is skipped (a None key is counted as dropped). Values are
    serialized here with ``value_serde`` (or the default) and framed by ``encode_change``.
    """

    def __init__(self, selector: Callable[[Any, Any], tuple[Any, Any]], value_serde: Serde[Any] | None) -> None:
        self.selector = selector
        self.value_serde = value_serde

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        downstream, selector = fan_out(list(children.values())), self.selector
        serialize = (self.value_serde or context.default_value_serde).serialize
        drop = context.record_dropped

        def select(key: Any, value: Any) -> tuple[Any, Any] | None:
            if value is None:
                return None
            group_key, group_value = selector(key, value)
            if group_key is None:
                drop("group_by selected a null key")
                return None
            return None if group_value is None else (group_key, group_value)

        def table_group_by(key: Any, change: Change, timestamp: int, headers: Any) -> None:
            new_pair, old_pair = select(key, change[0]), select(key, change[1])
            if new_pair is not None and old_pair is not None and new_pair[0] == old_pair[0]:
                downstream(new_pair[0], encode_change(serialize(new_pair[1]), serialize(old_pair[1])),
                           timestamp, headers)
                return
            if old_pair is not None:
                downstream(old_pair[0], encode_change(None, serialize(old_pair[1])), timestamp, headers)
            if new_pair is not None:
                downstream(new_pair[0], encode_change(serialize(new_pair[1]), None), timestamp, headers)
        return table_group_by
