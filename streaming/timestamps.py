"""Timestamp extractors: which time a record carries through the topology.

An extractor is called as ``extract(key, value, record_timestamp, partition_time)`` after the key and
value are deserialized, and returns milliseconds since the epoch. ``partition_time`` is the highest
timestamp seen so far on the record's partition (-1 before the first). A negative result fails the
record as bad input, down the deserialization error path (as Kafka Streams' ``FailOnInvalidTimestamp``
does); so does an extractor that raises (e.g. a missing field). Anywhere an extractor is taken, a plain
function ``fn(key, value, record_timestamp, partition_time)`` works too.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from typing import Any, Protocol


class TimestampExtractor(Protocol):
    def extract(self, key: Any, value: Any, record_timestamp: int, partition_time: int) -> int: ...


class RecordTimestampExtractor:
    """The record's own timestamp (CreateTime or LogAppendTime). The default."""

    def extract(self, key: Any, value: Any, record_timestamp: int, partition_time: int) -> int:
        return record_timestamp

    def __repr__(self) -> str:
        return "RecordTimestampExtractor()"


class WallclockTimestampExtractor:
    """The current wall-clock time (processing time)."""

    def extract(self, key: Any, value: Any, record_timestamp: int, partition_time: int) -> int:
        return int(time.time() * 1000)

    def __repr__(self) -> str:
        return "WallclockTimestampExtractor()"


class FieldTimestampExtractor:
    """A field of a mapping value holding epoch milliseconds (``FieldTimestampExtractor("ts")``)."""

    def __init__(self, field: str) -> None:
        self.field = field

    def extract(self, key: Any, value: Any, record_timestamp: int, partition_time: int) -> int:
        try:
            return int(value[self.field])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"value has no integer timestamp field {self.field!r}") from exc

    def __repr__(self) -> str:
        return f"FieldTimestampExtractor({self.field!r})"


class FunctionTimestampExtractor:
    """A user function ``fn(key, value, record_timestamp, partition_time) -> int`` as an extractor."""

    def __init__(self, function: Callable[[Any, Any, int, int], int]) -> None:
        self.function = function

    def extract(self, key: Any, value: Any, record_timestamp: int, partition_time: int) -> int:
        return self.function(key, value, record_timestamp, partition_time)

    def __repr__(self) -> str:
        return f"FunctionTimestampExtractor({getattr(self.function, '__qualname__', self.function)!r})"


def resolve_extractor(spec: Any) -> TimestampExtractor:
    """An extractor from a config value or an argument: an instance, a class, ``module:attr``, or a function
    ``fn(key, value, record_timestamp, partition_time) -> int``."""
    if isinstance(spec, str) and ":" in spec:
        module, _, attr = spec.partition(":")
        spec = getattr(importlib.import_module(module), attr)
    if isinstance(spec, type):
        spec = spec()
    if callable(getattr(spec, "extract", None)):
        return spec
    if callable(spec):
        return FunctionTimestampExtractor(spec)
    raise ValueError(f"not a timestamp extractor: {spec!r} (needs an extract(key, value, ts, partition_time) method, "
                     f"or is a function of those four arguments)")


def is_record_time(extractor: TimestampExtractor) -> bool:
    """True when the extractor just returns the record's timestamp (lets the hot path skip the call)."""
    return type(extractor) is RecordTimestampExtractor
