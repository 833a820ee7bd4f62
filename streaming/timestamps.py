"""Timestamp extractors: which time a record carries through the topology.

An extractor is called as ``extract(key, value, record_timestamp, partition_time)`` after the key and
value are deserialized, and returns milliseconds since the epoch. ``partition_time`` is the highest
timestamp seen so far on the record's partition (-1 before the first). A negative result fails the
record (as Kafka Streams' ``FailOnInvalidTimestamp`` does).
"""

from __future__ import annotations

import importlib
import time
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


def resolve_extractor(spec: Any) -> TimestampExtractor:
    """An extractor from a config value: an instance, a class, or ``module:attr``."""
    if isinstance(spec, str) and ":" in spec:
        module, _, attr = spec.partition(":")
        spec = getattr(importlib.import_module(module), attr)
    if isinstance(spec, type):
        spec = spec()
    if callable(getattr(spec, "extract", None)):
        return spec
    raise ValueError(f"not a timestamp extractor: {spec!r} (needs an extract(key, value, ts, partition_time) method)")


def is_record_time(extractor: TimestampExtractor) -> bool:
    """True when the extractor just returns the record's timestamp (lets the hot path skip the call)."""
    return type(extractor) is RecordTimestampExtractor
