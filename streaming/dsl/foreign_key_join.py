"""Foreign-key table joins: ``left.join(right, foreign_key_extractor, joiner)`` (Kafka Streams' KIP-213).

Each left row names a right row by a foreign key taken from its value; the tables need not be
co-partitioned. The join runs in four steps across two sub-topologies:

1. **Subscribe** (left side, on each left update): the row subscribes to its foreign key by writing a
   subscription to ``<application.id>-<join>-subscription-registration-topic``, keyed by the foreign key
   (so it lands in the right table's partition of that key), carrying the left key, the left task's
   partition and a hash of the left value. A row whose foreign key changed first unsubscribes from the
   old one.
2. **Receive** (right side): the subscription is kept in the subscription store under (foreign key,
   left key) and answered at once with the right row's current value.
3. **Right updates** (right side): an update of a right row answers every subscription of its key
   (a prefix scan of the subscription store), a deleted right row with None.
4. **Resolve** (left side): answers come back through ``<application.id>-<join>-subscription-response-
   topic`` to the left row's partition. An answer whose hash is not the hash of the left row's current
   value is stale (the row changed after subscribing; a newer answer is on its way) and is discarded;
   otherwise the result is ``joiner(left_value, right_value)``.

The result is a table kept in a store (always: it gives old values, and repeated deletes of a key that
has no result reach nobody). It is keyed by the left key. What it emits:

- inner join: ``joiner(left, right)`` while the left row's foreign key has a right row; a delete when
  the left row is deleted, its foreign key changes to one without a right row, or the right row is
  deleted. A left row whose foreign key is None has no result and is counted as dropped.
- left join: as inner, but a left row without a right row (none for its key, or a None foreign key)
  gives ``joiner(left, None)``; only deleting the left row deletes the result.

Where the result does not depend on the right table (the left row is deleted, or its foreign key is
None) the left side emits it at once instead of round-tripping a subscription as Kafka Streams does: the
same result, sooner, and no subscription with a None key. Timestamps: an answer to a subscription
carries the later of the left update's and the right row's; an answer to a right update the right
update's. The right table's topic must be partitioned by Kafka's default partitioner on the key
serialized with the right table's key serde, as the subscription topic is.
"""

from __future__ import annotations

import hashlib
import logging
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streaming.dsl.change import Change
from streaming.dsl.functions import keyed_joiner, takes_key
from streaming.dsl.materialized import Materialized, as_materialized, make_store_builder
from streaming.dsl.stateful_operators import TableSource
from streaming.dsl.value_getters import Joiner, KeyedJoiner, ValueGetter
from streaming.errors import TopologyError
from streaming.naming import SUBSCRIPTION_REGISTRATION_SUFFIX, SUBSCRIPTION_RESPONSE_SUFFIX
from streaming.runtime.context import fan_out
from streaming.serdes import Serde, Serdes
from streaming.state.stores import KeyValueStoreBuilder, Stores
from streaming.topology.nodes import Emit

if TYPE_CHECKING:
    from streaming.dsl.ktable import KTable

log = logging.getLogger(__name__)

# -- the internal record formats (read only by this application) ----------------------------------------------
VERSION = 1
UNSUBSCRIBE = 0  # forget the subscription, no answer
SUBSCRIBE_ANSWER_ALWAYS = 1  # answer with the right value, or None when there is none (Kafka: PROPAGATE_NULL...)
SUBSCRIBE_ANSWER_IF_FOUND = 2  # answer only when there is a right value (Kafka: PROPAGATE_ONLY_IF_FK_VAL...)
_SUBSCRIPTION = struct.Struct(">BBi")  # version, instruction, left partition; then 16-byte hash (or none), left key
_RESPONSE = struct.Struct(">Bi?")  # version, left partition, has right value; then 16-byte hash, right value
HASH_SIZE = 16


def value_hash(data: bytes) -> bytes:
    """The hash of a serialized left value that answers carry (BLAKE2b, 128 bits; Kafka uses Murmur3-128)."""
    return hashlib.blake2b(data, digest_size=HASH_SIZE).digest()


def encode_subscription(instruction: int, partition: int, hash_: bytes | None, left_key: bytes) -> bytes:
    return _SUBSCRIPTION.pack(VERSION, instruction, partition) + (hash_ or b"") + left_key


def decode_subscription(data: bytes) -> tuple[int, int, bytes | None, bytes]:
    """``(instruction, left partition, hash or None, left key)`` of a subscription record."""
    version, instruction, partition = _SUBSCRIPTION.unpack_from(data)
    if version != VERSION:
        raise TopologyError(f"foreign-key join subscription of unknown version {version}")
    start = _SUBSCRIPTION.size
    if instruction == UNSUBSCRIBE:
        return instruction, partition, None, data[start:]
    return instruction, partition, data[start:start + HASH_SIZE], data[start + HASH_SIZE:]


def encode_response(partition: int, hash_: bytes, right_value: bytes | None) -> bytes:
    return _RESPONSE.pack(VERSION, partition, right_value is not None) + hash_ + (right_value or b"")


def decode_response(data: bytes) -> tuple[bytes, bytes | None]:
    """``(hash, serialized right value or None)`` of a response record."""
    version, _, found = _RESPONSE.unpack_from(data)
    if version != VERSION:
        raise TopologyError(f"foreign-key join response of unknown version {version}")
    start = _RESPONSE.size + HASH_SIZE
    return data[_RESPONSE.size:start], data[start:] if found else None


def response_partition(topic: str, key: Any, value: bytes, partitions: int) -> int:
    """The response sink's partitioner: back to the partition of the left row's task."""
    return int.from_bytes(value[1:5], "big", signed=True)


def subscription_key(foreign_key: bytes, left_key: bytes) -> bytes:
    """The subscription store's key: the foreign key (length-prefixed, so a prefix scan finds exactly its
    subscriptions), then the left key."""
    return len(foreign_key).to_bytes(4, "big") + foreign_key + left_key


def subscription_prefix(foreign_key: bytes) -> bytes:
    return len(foreign_key).to_bytes(4, "big") + foreign_key


# -- the operators ----------------------------------------------------------------------------------------------
class SubscriptionSend:
    """Left side, step 1 (see the module doc): turns each left update ``Change(new, old)`` into
    subscriptions to the ``sink`` child, and results that need no right value into the ``result`` child."""

    def __init__(self, extractor: Callable[..., Any], joiner: KeyedJoiner, left_join: bool,
                 foreign_key_serde: Serde[Any] | None,
                 key_serde: Serde[Any] | None, value_serde: Serde[Any] | None, sink: str, result: str) -> None:
        self.extractor = extractor
        self.joiner = joiner
        self.left_join = left_join
        self.foreign_key_serde = foreign_key_serde
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.sink = sink
        self.result = result

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        send, emit_result, drop = children[self.sink], children[self.result], context.record_dropped
        serialize_fk = (self.foreign_key_serde or context.default_key_serde).serialize
        serialize_key = (self.key_serde or context.default_key_serde).serialize
        serialize_value = (self.value_serde or context.default_value_serde).serialize
        extractor, joiner, left_join, partition = self.extractor, self.joiner, self.left_join, context.task_partition
        with_key = takes_key(extractor)

        def foreign_key(key: Any, value: Any) -> bytes | None:
            found = extractor(key, value) if with_key else extractor(value)
            return None if found is None else serialize_fk(found)

        def subscribe(key: Any, change: Change, timestamp: int, headers: Any) -> None:
            new, old = change
            if new is None and old is None:
                return
            left_key = serialize_key(key)
            old_fk = None if old is None else foreign_key(key, old)
            new_fk = None if new is None else foreign_key(key, new)
            if old_fk is not None and old_fk != new_fk:
                send(old_fk, encode_subscription(UNSUBSCRIBE, partition, None, left_key), timestamp, headers)
            if new_fk is None:
                if new is not None and left_join:
                    emit_result(key, joiner(key, new, None), timestamp, headers)
                    return
                if new is not None:
                    drop("null foreign key in a foreign-key join")
                emit_result(key, None, timestamp, headers)
                return
            answer_always = left_join or (old_fk is not None and old_fk != new_fk)
            send(new_fk, encode_subscription(SUBSCRIBE_ANSWER_ALWAYS if answer_always else SUBSCRIBE_ANSWER_IF_FOUND,
                                             partition, value_hash(serialize_value(new)), left_key),
                 timestamp, headers)
        return subscribe


class SubscriptionReceive:
    """Right side, step 2: keeps (or forgets) each subscription in the subscription store and answers it
    with the right table's current value for the foreign key."""

    def __init__(self, store_name: str, right: ValueGetter, foreign_key_serde: Serde[Any] | None,
                 right_value_serde: Serde[Any] | None) -> None:
        self.store_name = store_name
        self.right = right
        self.foreign_key_serde = foreign_key_serde
        self.right_value_serde = right_value_serde

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        downstream, store = fan_out(list(children.values())), context.get_state_store(self.store_name)
        get_right = self.right.compile(context)
        deserialize_fk = (self.foreign_key_serde or context.default_key_serde).deserialize
        serialize_value = (self.right_value_serde or context.default_value_serde).serialize
        put, delete = store.put, store.delete

        def receive(foreign_key: bytes, subscription: bytes, timestamp: int, headers: Any) -> None:
            instruction, partition, hash_, left_key = decode_subscription(subscription)
            key = subscription_key(foreign_key, left_key)
            if instruction == UNSUBSCRIBE:
                delete(key)
                return
            put(key, subscription)
            found = get_right(deserialize_fk(foreign_key))
            if found is None:
                if instruction == SUBSCRIBE_ANSWER_IF_FOUND:
                    return
                value = None
            else:
                value = serialize_value(found[0])
                timestamp = max(timestamp, found[1])
            downstream(left_key, encode_response(partition, hash_, value), timestamp, headers)  # type: ignore[arg-type]
        return receive


class ForeignTableJoin:
    """Right side, step 3: answers every subscription of an updated right row with its new value (None
    for a delete)."""

    def __init__(self, store_name: str, foreign_key_serde: Serde[Any] | None,
                 right_value_serde: Serde[Any] | None) -> None:
        self.store_name = store_name
        self.foreign_key_serde = foreign_key_serde
        self.right_value_serde = right_value_serde

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        downstream, store = fan_out(list(children.values())), context.get_state_store(self.store_name)
        serialize_fk = (self.foreign_key_serde or context.default_key_serde).serialize
        serialize_value = (self.right_value_serde or context.default_value_serde).serialize
        read = store.read_raw

        def right_update(key: Any, change: Change, timestamp: int, headers: Any) -> None:
            new = change[0]
            value = None if new is None else serialize_value(new)
            for _, subscription in list(read(None, None, subscription_prefix(serialize_fk(key)))):
                _, partition, hash_, left_key = decode_subscription(subscription)
                downstream(left_key, encode_response(partition, hash_, value), timestamp, headers)  # type: ignore[arg-type]
        return right_update


class ResponseJoin:
    """Left side, step 4: drops stale answers (their hash is not the current left value's) and joins the
    others with the current left value."""

    def __init__(self, left: ValueGetter, joiner: KeyedJoiner, left_join: bool, value_serde: Serde[Any] | None,
                 right_value_serde: Serde[Any] | None) -> None:
        self.left = left
        self.joiner = joiner
        self.left_join = left_join
        self.value_serde = value_serde
        self.right_value_serde = right_value_serde

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        downstream, get_left, joiner = fan_out(list(children.values())), self.left.compile(context), self.joiner
        serialize_value = (self.value_serde or context.default_value_serde).serialize
        deserialize_right = (self.right_value_serde or context.default_value_serde).deserialize
        left_join, task = self.left_join, context.task_id

        def resolve(key: Any, response: bytes, timestamp: int, headers: Any) -> None:
            hash_, right = decode_response(response)
            found = get_left(key)
            if found is None or value_hash(serialize_value(found[0])) != hash_:
                if log.isEnabledFor(logging.DEBUG):
                    log.debug("task %s: foreign-key join answer for key %r is stale (the row changed since)", task, key)
                return
            if right is None:
                downstream(key, joiner(key, found[0], None) if left_join else None, timestamp, headers)
            else:
                downstream(key, joiner(key, found[0], deserialize_right(right)), timestamp, headers)
        return resolve


# -- building -----------------------------------------------------------------------------------------------------
def join_foreign_key(left: KTable, right: KTable, extractor: Callable[..., Any], joiner: Joiner, left_join: bool,
                     materialized: Materialized | str | None, name: str | None) -> KTable:
    """Add a foreign-key join of ``left`` with ``right`` (see the module doc). ``extractor(value)`` (or
    ``extractor(key, value)``) gives a left row's foreign key, a key of ``right``. Internal topics and
    the subscription store are named after ``name`` (default ``KTABLE-FK-JOIN-<n>``); the result store
    after ``materialized`` (default ``KTABLE-FK-JOIN-OUTPUT-STATE-STORE-<n>``)."""
    from streaming.dsl.ktable import KTable
    builder = left._builder
    if right._builder is not builder:
        raise TopologyError("cannot join tables of different StreamsBuilders")
    if not callable(extractor) or not callable(joiner):
        raise TopologyError(f"a foreign-key join needs a foreign key extractor and a joiner, got {extractor!r} "
                            f"and {joiner!r}")
    base = name or builder._new_name("FK-JOIN", prefix="KTABLE")
    keyed = keyed_joiner(joiner)
    spec = as_materialized(materialized)
    result_store = spec.store_name or builder._new_store_name("KTABLE-FK-JOIN-OUTPUT-")
    subscription_store = f"{base}-subscription-store"
    left_getter, right_getter = left._value_getter(), right._value_getter()
    left._enable_sending_old_values()  # a left update must know its old foreign key to unsubscribe
    topology = builder.topology
    topology.add_state_store(make_store_builder(spec, result_store, left.key_serde, None))
    topology.add_state_store(KeyValueStoreBuilder(Stores.persistent_key_value_store(subscription_store),
                                                  Serdes.Bytes(), Serdes.Bytes()))

    registration, response = base + SUBSCRIPTION_REGISTRATION_SUFFIX, base + SUBSCRIPTION_RESPONSE_SUFFIX
    send, output = f"{base}-subscription-send", f"{base}-output"
    topology.add_operator(send, SubscriptionSend(extractor, keyed, left_join, right.key_serde, left.key_serde,
                                                 left.value_serde, f"{base}-subscription-sink", output), left._node)
    topology.add_sink(f"{base}-subscription-sink", registration, send, key_serde=Serdes.Bytes(),
                      value_serde=Serdes.Bytes(), internal=True)
    topology.add_source(f"{base}-subscription-source", registration, key_serde=Serdes.Bytes(),
                        value_serde=Serdes.Bytes(), internal=True)
    receive, foreign = f"{base}-subscription-receive", f"{base}-foreign-table-join"
    topology.add_operator(receive, SubscriptionReceive(subscription_store, right_getter, right.key_serde,
                                                       right.value_serde), f"{base}-subscription-source")
    topology.connect_processor_and_state_stores(receive, store_names=[subscription_store, *right_getter.store_names])
    topology.add_operator(foreign, ForeignTableJoin(subscription_store, right.key_serde, right.value_serde), right._node)
    topology.connect_processor_and_state_stores(foreign, store_names=[subscription_store])
    topology.add_sink(f"{base}-response-sink", response, receive, foreign, key_serde=Serdes.Bytes(),
                      value_serde=Serdes.Bytes(), partitioner=response_partition, internal=True)
    topology.add_source(f"{base}-response-source", response, key_serde=left.key_serde, value_serde=Serdes.Bytes(),
                        internal=True)
    resolve = f"{base}-response-join"
    topology.add_operator(resolve, ResponseJoin(left_getter, keyed, left_join, left.value_serde, right.value_serde),
                          f"{base}-response-source")
    topology.connect_processor_and_state_stores(resolve, store_names=list(left_getter.store_names))
    operator = TableSource(result_store)
    topology.add_operator(output, operator, resolve, send)
    topology.connect_processor_and_state_stores(output, store_names=[result_store])

    kind = "left " if left_join else ""
    topology.copartition(f"foreign-key {kind}join {base!r} (subscriptions)", f"{base}-subscription-source", right._node)
    topology.copartition(f"foreign-key {kind}join {base!r} (responses)", f"{base}-response-source", left._node)
    return KTable(builder, output, spec.key_serde or left.key_serde, spec.value_serde, result_store, operator)
