"""Which record key decides the partition of a changelog record: one function per kind of store.

A task's stores hold the state of the keys of its partition, so every changelog record belongs to the partition
``toPositive(murmur2(record key)) % n`` of its *record key* (the key the task's input was partitioned by), which is
not always the changelog record's key: window, session and join stores add time to it, a foreign-key join keys
its subscriptions by the foreign key. Re-sharding a store into ``n`` partitions maps each changelog key back to
that record key (:func:`partition_key_function`) and hashes it with :func:`streaming.runtime.partitioning.
partition_for_key`. The layouts are Brook's own (the same as Kafka Streams' where Kafka Streams has the store):

- **key-value** (``KeyValueStore``, the DSL's tables and aggregations, a foreign-key join's result): the key
  itself.
- **window** (``WindowKeySchema``; time-windowed aggregations and a stream-stream join's two buffers
  ``<name>-this-join-store`` / ``<name>-other-join-store``): key, window start (8 bytes), sequence number (4
  bytes): the key is all but the last 12 bytes.
- **session** (``SessionKeySchema``): key, session end, session start (8 bytes each): all but the last 16.
- **join-outer** (a left/outer stream-stream join's ``<name>-outer-shared-join-store``, Kafka Streams'
  ``TimestampedKeyAndJoinSide``): the record timestamp (8 bytes), the side (1 byte), the key: all but the first
  9 bytes.
- **suppress** (a ``KTable.suppress`` buffer, keyed by the suppressed table's serialized key): the key itself
  for a plain table; a time-windowed table's key carries its window start (``TimeWindowedSerializer``, all but
  the last 8 bytes), a session-windowed one its end and start (``SessionWindowedSerializer``, all but the last
  16).
- **fk-subscription** (a foreign-key join's ``<name>-subscription-store``, on the right table's side, Kafka
  Streams' ``CombinedKey``): the foreign key's length (4 bytes, big-endian), the foreign key, the left key: the
  foreign key, since subscriptions are partitioned with the right table. Its values name the *left* row's
  partition (where the answer goes back to): re-sharding the left side rewrites them
  (:func:`subscription_with_left_partition`).

Stream time is not a store: its topic has one record per task, keyed by the task id, and does not re-hash
(:mod:`streaming.scaling.stream_time`). Global stores are read whole by every instance and are not re-sharded.

A store a Processor API processor writes has the layout of its builder (key-value, window or session), but its key
need not be the record key: the orders pipeline's ``order-ids`` window store is keyed by order id while its orders
are partitioned by user. Nothing in the topology says which, so such a store is marked
(``StoreLayout.processor_api``) and its :class:`Placement` is the operator's choice: ``by-key`` (the default: its
keys are record keys, as Kafka Streams assumes when it restores a task's store from the task's partition),
``replicate`` (each entry goes to every new partition that receives keys of its old partition: right whatever the
key means, for caches such as a deduplication window, at the cost of copies) or ``drop`` (the store starts empty).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from streaming.dsl.foreign_key_join import (
    ForeignTableJoin,
    SubscriptionReceive,
    decode_subscription,
    encode_subscription,
)
from streaming.dsl.stream_join import StreamJoinSide
from streaming.dsl.suppress import SuppressOperator
from streaming.state.windowed_builders import SessionStoreBuilder, WindowStoreBuilder
from streaming.topology.nodes import ProcessorNodeDef
from streaming.topology.topology import Topology
from streaming.windows.serdes import SessionWindowedSerde, WindowedSerde

__all__ = ["Placement", "StoreKind", "StoreLayout", "partition_key_function", "store_layouts",
           "subscription_with_left_partition"]

_WINDOW_SUFFIX = 12  # window start + sequence number (streaming.state.window)
_SESSION_SUFFIX = 16  # session end + session start (streaming.state.session)
_TIME_WINDOWED_SUFFIX = 8  # TimeWindowedSerializer: window start
_JOIN_OUTER_PREFIX = 9  # timestamp + side (streaming.dsl.stream_join)
_LENGTH = struct.Struct(">i")


class StoreKind(StrEnum):
    """How a store's changelog keys are laid out (module doc)."""

    KEY_VALUE = "key-value"
    WINDOW = "window"
    SESSION = "session"
    JOIN_OUTER = "join-outer"
    SUPPRESS = "suppress"
    SUPPRESS_TIME_WINDOWED = "suppress-time-windowed"
    SUPPRESS_SESSION_WINDOWED = "suppress-session-windowed"
    FK_SUBSCRIPTION = "fk-subscription"


class Placement(StrEnum):
    """Where a re-shard puts a store's entries (module doc)."""

    BY_KEY = "by-key"
    REPLICATE = "replicate"
    DROP = "drop"


def _suffix(size: int, what: str) -> Callable[[bytes], bytes]:
    def strip(key: bytes) -> bytes:
        if len(key) < size:
            raise ValueError(f"a {what} changelog key has at least {size} bytes, got {len(key)}: {key[:40]!r}")
        return key[:-size]
    return strip


def _join_outer(key: bytes) -> bytes:
    if len(key) < _JOIN_OUTER_PREFIX:
        raise ValueError(f"a join-outer changelog key has at least {_JOIN_OUTER_PREFIX} bytes, got {len(key)}")
    return key[_JOIN_OUTER_PREFIX:]


def _foreign_key(key: bytes) -> bytes:
    if len(key) < _LENGTH.size:
        raise ValueError(f"a subscription changelog key has at least 4 bytes, got {len(key)}")
    size = _LENGTH.unpack_from(key)[0]
    if size < 0 or _LENGTH.size + size > len(key):
        raise ValueError(f"a subscription changelog key names a foreign key of {size} bytes in {len(key)} bytes")
    return key[_LENGTH.size:_LENGTH.size + size]


def _identity(key: bytes) -> bytes:
    return key


_FUNCTIONS: dict[StoreKind, Callable[[bytes], bytes]] = {
    StoreKind.KEY_VALUE: _identity,
    StoreKind.WINDOW: _suffix(_WINDOW_SUFFIX, "window"),
    StoreKind.SESSION: _suffix(_SESSION_SUFFIX, "session"),
    StoreKind.JOIN_OUTER: _join_outer,
    StoreKind.SUPPRESS: _identity,
    StoreKind.SUPPRESS_TIME_WINDOWED: _suffix(_TIME_WINDOWED_SUFFIX, "time-windowed suppress"),
    StoreKind.SUPPRESS_SESSION_WINDOWED: _suffix(_SESSION_SUFFIX, "session-windowed suppress"),
    StoreKind.FK_SUBSCRIPTION: _foreign_key,
}


def partition_key_function(kind: StoreKind | str) -> Callable[[bytes], bytes]:
    """The function from a changelog key of a ``kind`` store to the record key bytes whose murmur2 decides its
    partition (module doc). The function raises ``ValueError`` on a key too short for the layout."""
    return _FUNCTIONS[StoreKind(kind)]


@dataclass(frozen=True)
class StoreLayout:
    """A logged store of a topology and the layout of its changelog keys."""

    store: str
    kind: StoreKind
    subtopology: int
    note: str = ""
    """What the store is, when the kind alone does not say (a join buffer, whose suppression)."""
    processor_api: tuple[str, ...] = ()
    """The Processor API processors that write the store: its keys are assumed to be record keys (module doc)."""


def _kv_kind(topology: Topology, store: str) -> tuple[StoreKind, str]:
    """The kind of a key-value store, from the DSL operators that use it (the builder alone does not say)."""
    for sub in topology.subtopologies():
        for node in sub.nodes:
            if not isinstance(node, ProcessorNodeDef) or store not in node.stores:
                continue
            operator = node.operator
            if isinstance(operator, StreamJoinSide) and operator.outer_store == store:
                return StoreKind.JOIN_OUTER, f"the unmatched records of stream-stream join node {node.name!r}"
            if isinstance(operator, SuppressOperator) and operator.store_name == store:
                serde = operator.key_serde
                if isinstance(serde, SessionWindowedSerde):
                    return StoreKind.SUPPRESS_SESSION_WINDOWED, f"suppression {node.name!r} of a session table"
                if isinstance(serde, WindowedSerde):
                    return StoreKind.SUPPRESS_TIME_WINDOWED, f"suppression {node.name!r} of a windowed table"
                return StoreKind.SUPPRESS, f"suppression {node.name!r}"
            if isinstance(operator, SubscriptionReceive | ForeignTableJoin) and operator.store_name == store:
                return StoreKind.FK_SUBSCRIPTION, f"subscriptions of foreign-key join node {node.name!r}"
    return StoreKind.KEY_VALUE, ""


def store_layouts(topology: Topology) -> dict[str, StoreLayout]:
    """Every logged store of ``topology`` (the ones with a changelog to re-shard) and its layout, by name: window
    and session stores by their builders, key-value stores by the DSL operator that uses them; the Processor API
    processors that write each."""
    layouts = {}
    builders = topology.store_builders
    for sub in topology.subtopologies():
        for store in sub.stores:
            builder = builders[store]
            if not builder.logging_enabled:
                continue
            if isinstance(builder, SessionStoreBuilder):
                kind, note = StoreKind.SESSION, ""
            elif isinstance(builder, WindowStoreBuilder):
                kind = StoreKind.WINDOW
                note = "a stream-stream join's buffer" if builder.supplier.retain_duplicates else ""
            else:
                kind, note = _kv_kind(topology, store)
            writers = tuple(node.name for node in sub.nodes if isinstance(node, ProcessorNodeDef)
                            and node.supplier is not None and store in node.stores)
            layouts[store] = StoreLayout(store, kind, sub.id, note, writers)
    return layouts


def subscription_with_left_partition(value: bytes, left_partition: int) -> bytes:
    """A foreign-key subscription store's value (``encode_subscription``) naming ``left_partition`` as the left
    row's partition: what re-sharding the left table's side to ``n`` partitions writes, with
    ``left_partition = partition_for_key(left key, n)``, so answers go to the left row's new task."""
    instruction, _, hash_, left_key = decode_subscription(value)
    return encode_subscription(instruction, left_partition, hash_, left_key)
