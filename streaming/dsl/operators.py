"""The stateless DSL operations, each compiled into one plain function per task.

Every ``compile`` returns ``emit(key, value, timestamp, headers)`` calling its children directly:
a chain ``filter -> map_values -> to`` costs three Python calls per record, no Record objects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from streaming.errors import StreamsError
from streaming.runtime.context import fan_out
from streaming.topology.nodes import Emit


def _downstream(children: dict[str, Emit]) -> Emit:
    return fan_out(list(children.values()))


class Filter:
    def __init__(self, predicate: Callable[[Any, Any], bool], negate: bool = False) -> None:
        self.predicate = predicate
        self.negate = negate

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        downstream, predicate = _downstream(children), self.predicate
        if self.negate:
            def filter_not(key: Any, value: Any, timestamp: int, headers: Any) -> None:
                if not predicate(key, value):
                    downstream(key, value, timestamp, headers)
            return filter_not

        def filter_(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            if predicate(key, value):
                downstream(key, value, timestamp, headers)
        return filter_


class Map:
    """``mapper(key, value) -> (new_key, new_value)``."""

    def __init__(self, mapper: Callable[[Any, Any], tuple[Any, Any]]) -> None:
        self.mapper = mapper

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        downstream, mapper = _downstream(children), self.mapper

        def map_(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            new_key, new_value = mapper(key, value)
            downstream(new_key, new_value, timestamp, headers)
        return map_


class MapValues:
    """``mapper(value)``, or ``mapper(key, value)`` when ``with_key``."""

    def __init__(self, mapper: Callable[..., Any], with_key: bool) -> None:
        self.mapper = mapper
        self.with_key = with_key

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        downstream, mapper = _downstream(children), self.mapper
        if self.with_key:
            def map_values_with_key(key: Any, value: Any, timestamp: int, headers: Any) -> None:
                downstream(key, mapper(key, value), timestamp, headers)
            return map_values_with_key

        def map_values(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            downstream(key, mapper(value), timestamp, headers)
        return map_values


class FlatMap:
    """``mapper(key, value) -> iterable of (key, value)``."""

    def __init__(self, mapper: Callable[[Any, Any], Iterable[tuple[Any, Any]]]) -> None:
        self.mapper = mapper

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        downstream, mapper = _downstream(children), self.mapper

        def flat_map(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            for new_key, new_value in mapper(key, value):
                downstream(new_key, new_value, timestamp, headers)
        return flat_map


class FlatMapValues:
    """``mapper(value) -> iterable of values`` (or ``mapper(key, value)`` when ``with_key``)."""

    def __init__(self, mapper: Callable[..., Iterable[Any]], with_key: bool) -> None:
        self.mapper = mapper
        self.with_key = with_key

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        downstream, mapper, with_key = _downstream(children), self.mapper, self.with_key

        def flat_map_values(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            for new_value in (mapper(key, value) if with_key else mapper(value)):
                downstream(key, new_value, timestamp, headers)
        return flat_map_values


class SelectKey:
    """``mapper(key, value) -> new_key``."""

    def __init__(self, mapper: Callable[[Any, Any], Any]) -> None:
        self.mapper = mapper

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        downstream, mapper = _downstream(children), self.mapper

        def select_key(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            downstream(mapper(key, value), value, timestamp, headers)
        return select_key


class Peek:
    """``action(key, value)`` for its side effect; the record goes on unchanged (``foreach`` has no children)."""

    def __init__(self, action: Callable[[Any, Any], Any]) -> None:
        self.action = action

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        downstream, action = _downstream(children), self.action

        def peek(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            action(key, value)
            downstream(key, value, timestamp, headers)
        return peek


class PassThrough:
    """Forwards every record unchanged (the node ``merge`` creates)."""

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        return _downstream(children)


class Branch:
    """Sends each record to the first branch whose predicate matches, else to the default branch.

    ``branches`` are ``(predicate, child node name)``; ``default`` is a child node name or None (drop).
    """

    def __init__(self) -> None:
        self.branches: list[tuple[Callable[[Any, Any], bool], str]] = []
        self.default: str | None = None

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        routes = tuple((predicate, children[child]) for predicate, child in self.branches)
        default = children[self.default] if self.default is not None else None
        if set(children) != {c for _, c in self.branches} | ({self.default} if self.default else set()):
            raise StreamsError(f"branch node has children {list(children)} that are not its branches")

        def branch(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            for predicate, target in routes:
                if predicate(key, value):
                    target(key, value, timestamp, headers)
                    return
            if default is not None:
                default(key, value, timestamp, headers)
        return branch
