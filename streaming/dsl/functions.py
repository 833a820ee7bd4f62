"""Helpers for user functions passed to the DSL."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


def takes_key(function: Callable[..., Any]) -> bool:
    """True when ``function`` takes two positional arguments (key, value) rather than one (value).

    Lets ``map_values(lambda v: ...)`` and ``map_values(lambda k, v: ...)`` both work, as Kafka Streams'
    ``ValueMapper`` and ``ValueMapperWithKey`` overloads do.
    """
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature take the value only
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return False
    return len([p for p in positional if p.default is p.empty]) >= 2


def joiner_takes_key(joiner: Callable[..., Any]) -> bool:
    """True when a joiner takes ``(key, left_value, right_value)`` (Kafka Streams' ``ValueJoinerWithKey``)
    rather than ``(left_value, right_value)`` (``ValueJoiner``)."""
    try:
        parameters = inspect.signature(joiner).parameters.values()
    except (TypeError, ValueError):
        return False
    if any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return False
    required = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
    return len(required) >= 3


def keyed_joiner(joiner: Callable[..., Any]) -> Callable[[Any, Any, Any], Any]:
    """``joiner`` as a ``(key, left_value, right_value)`` function, whichever of the two forms it takes."""
    if joiner_takes_key(joiner):
        return joiner

    def with_key(key: Any, left: Any, right: Any) -> Any:
        return joiner(left, right)
    return with_key
