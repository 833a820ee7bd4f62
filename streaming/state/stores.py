"""``Stores``: the factory of store suppliers and builders, named as in Kafka Streams."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from streaming.naming import check_store_name
from streaming.serdes import Serde
from streaming.state.bytes_store import BytesStore
from streaming.state.keyvalue import TimestampedTypedKeyValueStore, TypedKeyValueStore
from streaming.state.memory import InMemoryBytesStore
from streaming.state.rocksdb import RocksDBBytesStore

if TYPE_CHECKING:
    from streaming.state.windowed_builders import (
        SessionBytesStoreSupplier,
        SessionStoreBuilder,
        WindowBytesStoreSupplier,
        WindowStoreBuilder,
    )


class KeyValueBytesStoreSupplier:
    """Makes one bytes store per task (``get()``); ``name`` is the store's name."""

    def __init__(self, name: str, factory: Callable[[str], BytesStore], persistent: bool) -> None:
        self.name = check_store_name(name)
        self._factory = factory
        self.persistent = persistent

    def get(self) -> BytesStore:
        return self._factory(self.name)


class StoreBuilder:
    """Builds one store instance per task. Logging (a changelog topic) is on by default."""

    def __init__(self, name: str) -> None:
        self.name = check_store_name(name)
        self.logging_enabled = True
        self.log_config: dict[str, str] = {}
        self.caching_enabled = False

    def with_logging_enabled(self, config: dict[str, str] | None = None) -> StoreBuilder:
        """Back the store with ``<application.id>-<store>-changelog`` (extra topic configs optional)."""
        self.logging_enabled = True
        self.log_config = dict(config or {})
        return self

    def with_logging_disabled(self) -> StoreBuilder:
        """No changelog: state is lost when the task moves or local state is wiped."""
        self.logging_enabled = False
        self.log_config = {}
        return self

    def with_caching_enabled(self) -> StoreBuilder:
        """Collapse updates per key until the commit (``statestore.cache.max.bytes`` per thread)."""
        self.caching_enabled = True
        return self

    def with_caching_disabled(self) -> StoreBuilder:
        self.caching_enabled = False
        return self

    @property
    def persistent(self) -> bool:
        """Whether the stores it builds keep their data on disk."""
        raise NotImplementedError

    def build(self) -> Any:
        raise NotImplementedError


class KeyValueStoreBuilder(StoreBuilder):
    """Builds typed key-value stores over the supplier's bytes stores; ``timestamped`` ones keep a
    timestamp with each value (:class:`~streaming.state.api.TimestampedKeyValueStore`)."""

    def __init__(self, supplier: KeyValueBytesStoreSupplier, key_serde: Serde[Any] | None,
                 value_serde: Serde[Any] | None, timestamped: bool = False) -> None:
        super().__init__(supplier.name)
        self.supplier = supplier
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.timestamped = timestamped

    @property
    def persistent(self) -> bool:
        return self.supplier.persistent

    def build(self) -> TypedKeyValueStore:
        kind = TimestampedTypedKeyValueStore if self.timestamped else TypedKeyValueStore
        return kind(self.name, self.supplier.get(), self.key_serde, self.value_serde,
                    logging_enabled=self.logging_enabled, caching_enabled=self.caching_enabled)


class Stores:
    """Factory of stores: ``Stores.key_value_store_builder(Stores.in_memory_key_value_store("s"), ...)``."""

    @staticmethod
    def persistent_key_value_store(name: str) -> KeyValueBytesStoreSupplier:
        """A key-value store in RocksDB under ``state.dir/<application.id>/<task>/<store>``."""
        return KeyValueBytesStoreSupplier(name, RocksDBBytesStore, persistent=True)

    @staticmethod
    def in_memory_key_value_store(name: str) -> KeyValueBytesStoreSupplier:
        """A key-value store held in memory (restored from its changelog when logging is on)."""
        return KeyValueBytesStoreSupplier(name, InMemoryBytesStore, persistent=False)

    @staticmethod
    def key_value_store_builder(supplier: KeyValueBytesStoreSupplier, key_serde: Serde[Any] | None = None,
                                value_serde: Serde[Any] | None = None) -> KeyValueStoreBuilder:
        """A builder of typed key-value stores; serdes default to the config's default serdes."""
        return KeyValueStoreBuilder(supplier, key_serde, value_serde)

    @staticmethod
    def timestamped_key_value_store_builder(supplier: KeyValueBytesStoreSupplier,
                                            key_serde: Serde[Any] | None = None,
                                            value_serde: Serde[Any] | None = None) -> KeyValueStoreBuilder:
        """A builder of key-value stores that keep each value's timestamp (``get_with_timestamp``), the
        kind the DSL's tables and aggregations use."""
        return KeyValueStoreBuilder(supplier, key_serde, value_serde, timestamped=True)

    # -- window and session stores (streaming.state.window, streaming.state.session) ------------------------------
    @staticmethod
    def persistent_window_store(name: str, retention: int | timedelta, window_size: int | timedelta,
                                retain_duplicates: bool = False) -> WindowBytesStoreSupplier:
        """A window store in RocksDB, kept in time segments (half the retention, at least a minute; each a key prefix
        of the store's one database), windows older than ``retention`` dropped a segment at a time.
        ``retain_duplicates`` keeps every put (what join buffers need)."""
        return _window_supplier(name, retention, window_size, retain_duplicates, persistent=True)

    @staticmethod
    def in_memory_window_store(name: str, retention: int | timedelta, window_size: int | timedelta,
                               retain_duplicates: bool = False) -> WindowBytesStoreSupplier:
        """A window store in memory (restored from its changelog), segmented as the persistent one."""
        return _window_supplier(name, retention, window_size, retain_duplicates, persistent=False)

    @staticmethod
    def window_store_builder(supplier: WindowBytesStoreSupplier, key_serde: Serde[Any] | None = None,
                             value_serde: Serde[Any] | None = None) -> WindowStoreBuilder:
        """A builder of window stores (values keep their timestamps); logging on, caching off by default."""
        from streaming.state.windowed_builders import WindowStoreBuilder
        return WindowStoreBuilder(supplier, key_serde, value_serde)

    @staticmethod
    def persistent_session_store(name: str, retention: int | timedelta) -> SessionBytesStoreSupplier:
        """A session store in RocksDB, segmented by session end; sessions that ended more than
        ``retention`` before the store's stream time are dropped."""
        from streaming.state.windowed_builders import SessionBytesStoreSupplier
        return SessionBytesStoreSupplier(name, _millis(retention, "retention"), persistent=True)

    @staticmethod
    def in_memory_session_store(name: str, retention: int | timedelta) -> SessionBytesStoreSupplier:
        from streaming.state.windowed_builders import SessionBytesStoreSupplier
        return SessionBytesStoreSupplier(name, _millis(retention, "retention"), persistent=False)

    @staticmethod
    def session_store_builder(supplier: SessionBytesStoreSupplier, key_serde: Serde[Any] | None = None,
                              value_serde: Serde[Any] | None = None) -> SessionStoreBuilder:
        from streaming.state.windowed_builders import SessionStoreBuilder
        return SessionStoreBuilder(supplier, key_serde, value_serde)


def _millis(value: int | timedelta, what: str) -> int:
    from streaming.windows.specs import duration_ms
    return duration_ms(value, what, positive=True)


def _window_supplier(name: str, retention: int | timedelta, window_size: int | timedelta, retain_duplicates: bool,
                     persistent: bool) -> WindowBytesStoreSupplier:
    from streaming.state.windowed_builders import WindowBytesStoreSupplier
    return WindowBytesStoreSupplier(name, _millis(retention, "retention"), _millis(window_size, "window_size"),
                                    retain_duplicates, persistent)
