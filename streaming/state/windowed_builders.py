"""Suppliers and builders of window and session stores (``Stores.persistent_window_store`` and friends).

Their changelogs are ``cleanup.policy=compact,delete`` with ``retention.ms`` = the store's retention
plus one day (Kafka Streams' ``windowstore.changelog.additional.retention.ms`` default), so the topic
forgets windows the store has dropped; extra topic configs given to ``with_logging_enabled`` win.
"""

from __future__ import annotations

from typing import Any

from streaming.naming import check_store_name
from streaming.serdes import Serde
from streaming.state.segments import SegmentedBytesStore, default_segment_interval
from streaming.state.session import TypedSessionStore, session_end_of
from streaming.state.stores import StoreBuilder
from streaming.state.window import TimestampedTypedWindowStore, window_start_of

CHANGELOG_ADDITIONAL_RETENTION_MS = 24 * 60 * 60 * 1000


class WindowBytesStoreSupplier:
    """Makes one segmented bytes store per task for a window store (Kafka Streams' ``WindowBytesStoreSupplier``)."""

    def __init__(self, name: str, retention_ms: int, window_size_ms: int, retain_duplicates: bool,
                 persistent: bool, segment_interval_ms: int | None = None) -> None:
        self.name = check_store_name(name)
        if window_size_ms <= 0:
            raise ValueError(f"window store {name!r}: window_size must be positive, got {window_size_ms}")
        if retention_ms < window_size_ms:
            raise ValueError(f"window store {name!r}: the retention ({retention_ms} ms) must be at least the window "
                             f"size ({window_size_ms} ms)")
        self.retention_ms = retention_ms
        self.window_size_ms = window_size_ms
        self.retain_duplicates = retain_duplicates
        self.persistent = persistent
        self.segment_interval_ms = segment_interval_ms or default_segment_interval(retention_ms)

    def get(self) -> SegmentedBytesStore:
        return SegmentedBytesStore(self.name, self.retention_ms, self.segment_interval_ms, window_start_of,
                                   self.persistent)


class SessionBytesStoreSupplier:
    """Makes one segmented bytes store per task for a session store."""

    def __init__(self, name: str, retention_ms: int, persistent: bool, segment_interval_ms: int | None = None) -> None:
        self.name = check_store_name(name)
        if retention_ms <= 0:
            raise ValueError(f"session store {name!r}: retention must be positive, got {retention_ms}")
        self.retention_ms = retention_ms
        self.persistent = persistent
        self.segment_interval_ms = segment_interval_ms or default_segment_interval(retention_ms)

    def get(self) -> SegmentedBytesStore:
        return SegmentedBytesStore(self.name, self.retention_ms, self.segment_interval_ms, session_end_of,
                                   self.persistent)


class _WindowedStoreBuilder(StoreBuilder):
    """A builder whose changelog defaults to ``compact,delete`` with the store's retention (see the module doc)."""

    retention_ms: int

    def __init__(self, name: str, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None,
                 persistent: bool) -> None:
        self._user_log_config: dict[str, str] = {}
        super().__init__(name)
        self.key_serde = key_serde
        self.value_serde = value_serde
        self._persistent = persistent

    @property
    def log_config(self) -> dict[str, str]:  # type: ignore[override]
        return {"cleanup.policy": "compact,delete",
                "retention.ms": str(self.retention_ms + CHANGELOG_ADDITIONAL_RETENTION_MS), **self._user_log_config}

    @log_config.setter
    def log_config(self, config: dict[str, str]) -> None:
        self._user_log_config = dict(config)

    @property
    def persistent(self) -> bool:
        return self._persistent


class WindowStoreBuilder(_WindowedStoreBuilder):
    """Builds :class:`~streaming.state.window.TimestampedTypedWindowStore` instances."""

    def __init__(self, supplier: WindowBytesStoreSupplier, key_serde: Serde[Any] | None,
                 value_serde: Serde[Any] | None) -> None:
        self.supplier = supplier
        self.retention_ms = supplier.retention_ms
        super().__init__(supplier.name, key_serde, value_serde, supplier.persistent)

    @property
    def window_size_ms(self) -> int:
        return self.supplier.window_size_ms

    def build(self) -> TimestampedTypedWindowStore:
        return TimestampedTypedWindowStore(self.name, self.supplier.get(), self.key_serde, self.value_serde,
                                           self.supplier.window_size_ms, self.supplier.retain_duplicates,
                                           logging_enabled=self.logging_enabled, caching_enabled=self.caching_enabled)


class SessionStoreBuilder(_WindowedStoreBuilder):
    """Builds :class:`~streaming.state.session.TypedSessionStore` instances."""

    def __init__(self, supplier: SessionBytesStoreSupplier, key_serde: Serde[Any] | None,
                 value_serde: Serde[Any] | None) -> None:
        self.supplier = supplier
        self.retention_ms = supplier.retention_ms
        super().__init__(supplier.name, key_serde, value_serde, supplier.persistent)

    def build(self) -> TypedSessionStore:
        return TypedSessionStore(self.name, self.supplier.get(), self.key_serde, self.value_serde,
                                 logging_enabled=self.logging_enabled, caching_enabled=self.caching_enabled)
