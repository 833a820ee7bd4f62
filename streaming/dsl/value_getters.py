"""Value getters: how a join looks up a table's current value for a key (Kafka Streams' KTableValueGetter).

A table backed by a store (a source table, an aggregation, a materialized join) is read from its store.
A table computed from another (``filter``, ``map_values``, an unmaterialized table-table join) is not
materialized again: its getter applies the same computation to its parents' getters at lookup time, as
Kafka Streams does, so ``users.filter(...)`` joins like a table of the filtered rows without a second
store. A getter names the stores it reads (``store_names``); the node that uses it connects to them,
which puts it in the same sub-topology (and so the same tasks) as the table.

``compile(context)`` returns ``get(key) -> ValueAndTimestamp | None`` for one task; ``compile_value(context)``
returns ``lookup(key)``, the value alone or :data:`ABSENT` (for a stream-table join, which needs no timestamp:
no ValueAndTimestamp is made per record).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from streaming.state.api import ValueAndTimestamp

Get = Callable[[Any], "ValueAndTimestamp | None"]
Lookup = Callable[[Any], Any]  # the value of a key, or ABSENT
Joiner = Callable[..., Any]  # (left, right) or (key, left, right), see streaming.dsl.functions.joiner_takes_key
KeyedJoiner = Callable[[Any, Any, Any], Any]  # (key, left, right)


class _Absent:
    """What a :data:`Lookup` returns for a key the table does not have (a value may itself be None)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()


class ValueGetter(Protocol):
    """Looks up a table's value and timestamp by key, in one task."""

    store_names: tuple[str, ...]

    def compile(self, context: Any) -> Get: ...

    def compile_value(self, context: Any) -> Lookup: ...


class StoreValueGetter:
    """A materialized table: its timestamped store."""

    def __init__(self, store_name: str) -> None:
        self.store_name = store_name
        self.store_names = (store_name,)

    def compile(self, context: Any) -> Get:
        return context.get_state_store(self.store_name).get_with_timestamp  # type: ignore[no-any-return]

    def compile_value(self, context: Any) -> Lookup:
        return context.get_state_store(self.store_name).value_lookup(ABSENT)  # type: ignore[no-any-return]


class FilterValueGetter:
    """``KTable.filter``: the parent's value when ``predicate(key, value)`` holds (fails, ``negate``), else None."""

    def __init__(self, parent: ValueGetter, predicate: Callable[[Any, Any], Any], negate: bool) -> None:
        self.parent = parent
        self.predicate = predicate
        self.negate = negate
        self.store_names = parent.store_names

    def compile(self, context: Any) -> Get:
        get, predicate, negate = self.parent.compile(context), self.predicate, self.negate

        def get_filtered(key: Any) -> ValueAndTimestamp | None:
            found = get(key)
            if found is None or bool(predicate(key, found[0])) is negate:
                return None
            return found
        return get_filtered

    def compile_value(self, context: Any) -> Lookup:
        lookup, predicate, negate = self.parent.compile_value(context), self.predicate, self.negate

        def lookup_filtered(key: Any) -> Any:
            value = lookup(key)
            if value is ABSENT or bool(predicate(key, value)) is negate:
                return ABSENT
            return value
        return lookup_filtered


class MapValuesValueGetter:
    """``KTable.map_values``: the parent's value mapped, with the parent's timestamp."""

    def __init__(self, parent: ValueGetter, mapper: Callable[..., Any], with_key: bool) -> None:
        self.parent = parent
        self.mapper = mapper
        self.with_key = with_key
        self.store_names = parent.store_names

    def compile(self, context: Any) -> Get:
        get, mapper, with_key = self.parent.compile(context), self.mapper, self.with_key

        def get_mapped(key: Any) -> ValueAndTimestamp | None:
            found = get(key)
            if found is None:
                return None
            return ValueAndTimestamp(mapper(key, found[0]) if with_key else mapper(found[0]), found[1])
        return get_mapped

    def compile_value(self, context: Any) -> Lookup:
        lookup, mapper, with_key = self.parent.compile_value(context), self.mapper, self.with_key

        def lookup_mapped(key: Any) -> Any:
            value = lookup(key)
            if value is ABSENT:
                return ABSENT
            return mapper(key, value) if with_key else mapper(value)
        return lookup_mapped


class JoinValueGetter:
    """An unmaterialized table-table join: both sides looked up and joined, the result's timestamp the
    later of the two. ``inner``: both sides needed; ``left``: the left one; ``outer``: either."""

    def __init__(self, left: ValueGetter, right: ValueGetter, joiner: KeyedJoiner, kind: str) -> None:
        self.left = left
        self.right = right
        self.joiner = joiner
        self.kind = kind
        self.store_names = tuple(dict.fromkeys(left.store_names + right.store_names))

    def compile(self, context: Any) -> Get:
        get_left, get_right, joiner = self.left.compile(context), self.right.compile(context), self.joiner
        needs_left, needs_right = self.kind in ("inner", "left"), self.kind == "inner"

        def get_joined(key: Any) -> ValueAndTimestamp | None:
            left = get_left(key)
            if left is None and needs_left:
                return None
            right = get_right(key)
            if right is None and (needs_right or left is None):
                return None
            if left is None:
                return ValueAndTimestamp(joiner(key, None, right[0]), right[1])  # type: ignore[index]
            if right is None:
                return ValueAndTimestamp(joiner(key, left[0], None), left[1])
            return ValueAndTimestamp(joiner(key, left[0], right[0]), max(left[1], right[1]))
        return get_joined

    def compile_value(self, context: Any) -> Lookup:
        get = self.compile(context)

        def lookup_joined(key: Any) -> Any:
            found = get(key)
            return ABSENT if found is None else found[0]
        return lookup_joined
