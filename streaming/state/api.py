"""Public interfaces of state stores."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Generic, NamedTuple, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class StateStore:
    """A named store owned by one task. The runtime opens (``init``), flushes and closes it."""

    name: str

    @property
    def persistent(self) -> bool:
        raise NotImplementedError

    @property
    def is_open(self) -> bool:
        raise NotImplementedError

    def flush(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class KeyValueStore(StateStore, Generic[K, V]):
    """A key-value store. Keys are ordered by their serialized bytes; ranges include both ends.

    ``put(key, None)`` deletes the key, as in Kafka Streams. Iterators yield ``(key, value)`` tuples
    and see a snapshot of the keys taken when the iteration starts.
    """

    def get(self, key: K) -> V | None:
        raise NotImplementedError

    def put(self, key: K, value: V | None) -> None:
        raise NotImplementedError

    def put_if_absent(self, key: K, value: V) -> V | None:
        """Store ``value`` only if ``key`` has none; return the value that was there (or None)."""
        raise NotImplementedError

    def put_all(self, entries: list[tuple[K, V | None]]) -> None:
        raise NotImplementedError

    def delete(self, key: K) -> V | None:
        """Remove ``key``; return its old value (or None)."""
        raise NotImplementedError

    def range(self, from_key: K | None, to_key: K | None) -> Iterator[tuple[K, V]]:
        """Entries with ``from_key <= key <= to_key`` (serialized order); ``None`` leaves an end open."""
        raise NotImplementedError

    def prefix_scan(self, prefix: Any, prefix_key_serde: Any = None) -> Iterator[tuple[K, V]]:
        """Entries whose serialized key starts with the serialized ``prefix``.

        ``prefix`` is serialized with ``prefix_key_serde`` when given, else with the store's key serde.
        """
        raise NotImplementedError

    def all(self) -> Iterator[tuple[K, V]]:
        raise NotImplementedError

    def approximate_num_entries(self) -> int:
        raise NotImplementedError


class ValueAndTimestamp(NamedTuple):
    """A value with its timestamp, as a timestamped store keeps it (Kafka Streams' ``ValueAndTimestamp``)."""

    value: Any
    timestamp: int


class TimestampedKeyValueStore(KeyValueStore[K, V]):
    """A key-value store that keeps a timestamp with every value (Kafka Streams' timestamped store, the
    kind every DSL table and aggregation materializes).

    ``get``/``put``/``range``/``all`` read and write plain values (``put`` stamps the current record's
    timestamp), so it reads like any key-value store; ``get_with_timestamp`` and ``put_with_timestamp``
    see the timestamps. The changelog holds the plain value, with the timestamp as the record's
    timestamp, exactly as Kafka Streams writes it; a restore reads it back from there.
    """

    def get_with_timestamp(self, key: K) -> ValueAndTimestamp | None:
        """The value of ``key`` and its timestamp, or None."""
        raise NotImplementedError

    def put_with_timestamp(self, key: K, value: V | None, timestamp: int, headers: Any = None) -> None:
        """Store ``value`` (None deletes) with ``timestamp``. With caching, ``headers`` stay with the cached
        entry and go downstream with it when it is flushed."""
        raise NotImplementedError
