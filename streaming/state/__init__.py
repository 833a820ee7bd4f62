"""State stores: ``Stores`` builds them; processors reach them through ``context.get_state_store``."""

from streaming.state.api import KeyValueStore, StateStore, TimestampedKeyValueStore, ValueAndTimestamp
from streaming.state.stores import KeyValueBytesStoreSupplier, KeyValueStoreBuilder, StoreBuilder, Stores

__all__ = ["KeyValueBytesStoreSupplier", "KeyValueStore", "KeyValueStoreBuilder", "StateStore",
           "StoreBuilder", "Stores", "TimestampedKeyValueStore", "ValueAndTimestamp"]
