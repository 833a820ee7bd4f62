"""Interactive queries of window and session stores: read-only views over this instance's active tasks
(Kafka Streams' ``ReadOnlyWindowStore`` and ``ReadOnlySessionStore``).

A key's reads go to the task of the partition its serialized key hashes to (as for key-value stores;
None or nothing when that task runs elsewhere — ask ``metadata_for_key``); scans without a key
concatenate every local task's results, task by task. Results are materialized per call, reading the
stores' unflushed writes without flushing them, and raise :class:`InvalidStateStoreError` while the
instance cannot be queried or a task closes under the read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from streaming.errors import InvalidStateStoreError

if TYPE_CHECKING:
    from streaming.runtime.interactive_queries import InteractiveQueries, StoreInfo


class _WindowedView:
    def __init__(self, queries: InteractiveQueries, info: StoreInfo) -> None:
        self._queries = queries
        self._info = info
        self.name = info.name

    def _read_key(self, key: Any, read: Callable[[Any], Any], missing: Any) -> Any:
        partition = self._queries.partition_of(self._info, key)
        store = self._queries.local_stores(self.name, partition).get(partition)
        if store is None:
            return missing
        return self._guarded(partition, store, lambda: read(store))

    def _read_all(self, read: Callable[[Any], Any]) -> Iterator[Any]:
        results: list[Any] = []
        for partition, store in sorted(self._queries.local_stores(self.name).items()):
            results.extend(self._guarded(partition, store, lambda s=store: list(read(s))))
        return iter(results)

    def _guarded(self, partition: int, store: Any, read: Callable[[], Any]) -> Any:
        try:
            return read()
        except Exception as exc:
            if store.is_open:
                raise
            raise InvalidStateStoreError(f"state store {self.name!r} (partition {partition}) was closed during the "
                                         f"query: its task is migrating; retry") from exc


class ReadOnlyWindowStoreView(_WindowedView):
    """``fetch(key, window_start)``, ``fetch(key, time_from, time_to)`` (``(window_start, value)`` pairs),
    ``fetch_range``, ``fetch_all`` and ``all`` (``(Windowed, value)`` pairs)."""

    def fetch(self, key: Any, time_from: int, time_to: int | None = None) -> Any:
        if time_to is None:
            return self._read_key(key, lambda store: store.fetch(key, time_from), None)
        return iter(self._read_key(key, lambda store: list(store.fetch(key, time_from, time_to)), []))

    def fetch_range(self, key_from: Any, key_to: Any, time_from: int, time_to: int) -> Iterator[Any]:
        return self._read_all(lambda store: store.fetch_range(key_from, key_to, time_from, time_to))

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[Any]:
        return self._read_all(lambda store: store.fetch_all(time_from, time_to))

    def all(self) -> Iterator[Any]:
        return self._read_all(lambda store: store.all())

    def __repr__(self) -> str:
        return f"<ReadOnlyWindowStoreView {self.name!r}>"


class ReadOnlySessionStoreView(_WindowedView):
    """``fetch(key)``, ``find_sessions(key, earliest_end, latest_start)``, ``fetch_session(key, start,
    end)`` and ``all``; sessions are ``(Windowed, aggregate)`` pairs."""

    def fetch(self, key: Any) -> Iterator[Any]:
        return iter(self._read_key(key, lambda store: list(store.fetch(key)), []))

    def find_sessions(self, key: Any, earliest_session_end: int, latest_session_start: int) -> Iterator[Any]:
        return iter(self._read_key(
            key, lambda store: list(store.find_sessions(key, earliest_session_end, latest_session_start)), []))

    def fetch_session(self, key: Any, session_start: int, session_end: int) -> Any:
        return self._read_key(key, lambda store: store.fetch_session(key, session_start, session_end), None)

    def all(self) -> Iterator[Any]:
        return self._read_all(lambda store: store.all())

    def __repr__(self) -> str:
        return f"<ReadOnlySessionStoreView {self.name!r}>"
