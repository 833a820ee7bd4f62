"""A read-only view of a key-value store: what processors get for a global store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from streaming.errors import StreamsError
from streaming.state.api import KeyValueStore, TimestampedKeyValueStore
from streaming.state.keyvalue import TypedKeyValueStore


class ReadOnlyKeyValueStore(KeyValueStore[Any, Any]):
    """Reads go to the wrapped store; ``put``, ``put_if_absent``, ``put_all`` and ``delete`` raise.

    Global stores are written only from their source topic (by the global stream thread, or the test
    driver); to change one, produce to that topic.
    """

    def __init__(self, store: TypedKeyValueStore, topic: str) -> None:
        self._store = store
        self.name = store.name
        self.topic = topic

    @property
    def persistent(self) -> bool:
        return self._store.persistent

    @property
    def is_open(self) -> bool:
        return self._store.is_open

    def get(self, key: Any) -> Any:
        return self._store.get(key)

    def value_lookup(self, absent: Any = None) -> Callable[[Any], Any]:
        """:meth:`get` as one function (see :meth:`TypedKeyValueStore.value_lookup`)."""
        return self._store.value_lookup(absent)

    def get_with_timestamp(self, key: Any) -> Any:
        """The value and its timestamp (a store that keeps timestamps only)."""
        if not isinstance(self._store, TimestampedKeyValueStore):
            raise StreamsError(f"global store {self.name!r} keeps no timestamps")
        return self._store.get_with_timestamp(key)

    def range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        return self._store.range(from_key, to_key)

    def prefix_scan(self, prefix: Any, prefix_key_serde: Any = None) -> Iterator[tuple[Any, Any]]:
        return self._store.prefix_scan(prefix, prefix_key_serde)

    def all(self) -> Iterator[tuple[Any, Any]]:
        return self._store.all()

    def approximate_num_entries(self) -> int:
        return self._store.approximate_num_entries()

    def _read_only(self, operation: str) -> StreamsError:
        return StreamsError(f"global store {self.name!r} is read-only ({operation} is not allowed): it is a copy "
                            f"of topic {self.topic!r}, so produce to that topic to change it")

    def put(self, key: Any, value: Any) -> None:
        raise self._read_only("put")

    def put_if_absent(self, key: Any, value: Any) -> Any:
        raise self._read_only("put_if_absent")

    def put_all(self, entries: list[tuple[Any, Any]]) -> None:
        raise self._read_only("put_all")

    def delete(self, key: Any) -> Any:
        raise self._read_only("delete")

    def flush(self) -> None:
        """The owner of the store flushes it."""

    def close(self) -> None:
        """The owner of the store closes it."""

    def __repr__(self) -> str:
        return f"<read-only {self._store!r}>"
