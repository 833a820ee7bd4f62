"""``Materialized``: how a DSL operation's state store is made (name, serdes, changelog, cache, type)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from streaming.errors import TopologyError
from streaming.naming import check_store_name
from streaming.serdes import Serde
from streaming.state.stores import KeyValueBytesStoreSupplier, KeyValueStoreBuilder, Stores
from streaming.windows.specs import duration_ms

STORE_TYPES = ("rocksdb", "in_memory")


@dataclass(frozen=True)
class Materialized:
    """Store options of ``count``, ``reduce``, ``aggregate``, ``builder.table`` and ``global_table``.

    Defaults are Kafka Streams': a RocksDB store (``with_store_type("in_memory")`` for memory), logged to
    the changelog ``<application.id>-<store>-changelog`` (not for global tables: they restore from
    their topic), cached (one downstream record per key per commit; global tables never cache), with
    the operation's serdes (``count``: Long values). An unnamed store gets a generated name such as
    ``KSTREAM-AGGREGATE-STATE-STORE-0000000001`` and still gets a changelog; name it with
    ``Materialized.as_("counts")`` (or pass the name as a string) to query it.

    Every ``with_*`` method returns a new ``Materialized``; the original is unchanged.
    """

    store_name: str | None = None
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    logging_enabled: bool = True
    log_config: Mapping[str, str] = field(default_factory=dict)
    caching_enabled: bool = True
    store_type: str = "rocksdb"
    supplier: KeyValueBytesStoreSupplier | None = None
    retention_ms: int | None = None  # window and session stores only (default: window size + grace)

    @classmethod
    def as_(cls, store: str | KeyValueBytesStoreSupplier) -> Materialized:
        """A store named ``store``, or made by a supplier (``Stores.in_memory_key_value_store("s")``)."""
        if isinstance(store, KeyValueBytesStoreSupplier):
            return cls(store_name=check_store_name(store.name), supplier=store)
        return cls(store_name=check_store_name(store))

    @classmethod
    def with_(cls, key_serde: Serde[Any] | None = None, value_serde: Serde[Any] | None = None) -> Materialized:
        """An unnamed store with these serdes (Kafka Streams' ``Materialized.with``)."""
        return cls(key_serde=key_serde, value_serde=value_serde)

    def with_key_serde(self, serde: Serde[Any]) -> Materialized:
        return dataclasses.replace(self, key_serde=serde)

    def with_value_serde(self, serde: Serde[Any]) -> Materialized:
        return dataclasses.replace(self, value_serde=serde)

    def with_logging_enabled(self, config: Mapping[str, str] | None = None) -> Materialized:
        """Log to a changelog topic, created with these extra topic configs."""
        return dataclasses.replace(self, logging_enabled=True, log_config=dict(config or {}))

    def with_logging_disabled(self) -> Materialized:
        """No changelog: the store's state is lost when its task moves or local state is wiped."""
        return dataclasses.replace(self, logging_enabled=False, log_config={})

    def with_caching_enabled(self) -> Materialized:
        return dataclasses.replace(self, caching_enabled=True)

    def with_caching_disabled(self) -> Materialized:
        """Forward every update downstream, not one per key per commit."""
        return dataclasses.replace(self, caching_enabled=False)

    def with_retention(self, retention: int | timedelta) -> Materialized:
        """How long a window or session store keeps a window (at least size + grace, the default)."""
        return dataclasses.replace(self, retention_ms=duration_ms(retention, "Materialized.with_retention: retention",
                                                                  positive=True))

    def with_store_type(self, store_type: str) -> Materialized:
        """``"rocksdb"`` (the default) or ``"in_memory"``."""
        if store_type not in STORE_TYPES:
            raise TopologyError(f"store type must be one of {', '.join(STORE_TYPES)}, got {store_type!r}")
        return dataclasses.replace(self, store_type=store_type)


def as_materialized(spec: Materialized | str | None) -> Materialized:
    """A ``Materialized`` from what a DSL method accepts: None, a store name or a ``Materialized``."""
    if spec is None:
        return Materialized()
    if isinstance(spec, str):
        return Materialized.as_(spec)
    if isinstance(spec, Materialized):
        return spec
    raise TopologyError(f"materialized must be a store name or a Materialized, got {spec!r}")


def make_store_builder(materialized: Materialized, name: str, key_serde: Serde[Any] | None,
                       value_serde: Serde[Any] | None, timestamped: bool = True) -> KeyValueStoreBuilder:
    """The store builder ``materialized`` describes, named ``name``; its own serdes win over the given ones.
    Tables and aggregations keep timestamps (Kafka Streams' timestamped stores); global tables do not."""
    if materialized.supplier is not None:
        supplier = materialized.supplier
    elif materialized.store_type == "in_memory":
        supplier = Stores.in_memory_key_value_store(name)
    else:
        supplier = Stores.persistent_key_value_store(name)
    builder = KeyValueStoreBuilder(supplier, materialized.key_serde or key_serde,
                                   materialized.value_serde or value_serde, timestamped=timestamped)
    if materialized.logging_enabled:
        builder.with_logging_enabled(dict(materialized.log_config))
    else:
        builder.with_logging_disabled()
    if materialized.caching_enabled:
        builder.with_caching_enabled()
    return builder
