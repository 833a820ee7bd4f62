"""Repartitioning: a sink into an internal topic ``<application.id>-<name>-repartition`` and a source from
it, so records reach the task that owns their (new) key. The source starts a new sub-topology."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streaming.errors import StreamsError
from streaming.naming import REPARTITION_SUFFIX
from streaming.runtime.context import fan_out
from streaming.serdes import Serde
from streaming.topology.nodes import Emit, Partitioner

if TYPE_CHECKING:
    from streaming.dsl.builder import StreamsBuilder

_GENERATED = re.compile(r"K(STREAM|TABLE)-.*-\d{10}")


class DropNullKeys:
    """Skips (and counts) records with a None key before a repartition topic: they have no partition."""

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        downstream, drop = fan_out(list(children.values())), context.record_dropped

        def drop_null_keys(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            if key is None:
                drop("null key before a repartition topic")
                return
            downstream(key, value, timestamp, headers)
        return drop_null_keys


class GroupBySelectKey:
    """``KStream.group_by``'s key selector. The first selected key is also serialized with the key serde
    the repartition topic will use, so a serde that cannot take these keys fails on the first record
    with an error naming the group_by node, the serde and the key (later records that the serde cannot
    take fail in the repartition sink, whose error names the serde and the key too)."""

    def __init__(self, selector: Callable[[Any, Any], Any], key_serde: Serde[Any] | None, node: str) -> None:
        self.selector = selector
        self.key_serde = key_serde
        self.node = node

    def compile(self, children: dict[str, Emit], context: Any) -> Emit:
        downstream, selector, node = fan_out(list(children.values())), self.selector, self.node
        serde = self.key_serde or context.default_key_serde
        checked = False

        def group_by(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            nonlocal checked
            new_key = selector(key, value)
            if not checked and new_key is not None:
                try:
                    serde.serialize(new_key)
                except Exception as exc:
                    raise StreamsError(
                        f"group_by {node!r}: key serde {serde!r} cannot serialize the selected key {new_key!r} "
                        f"({exc!r}); pass group_by(..., key_serde=...) a serde for these keys") from exc
                checked = True
            downstream(new_key, value, timestamp, headers)
        return group_by


def add_repartition(builder: StreamsBuilder, parent: str, name: str, key_serde: Serde[Any] | None,
                    value_serde: Serde[Any] | None, partitioner: Partitioner | None = None,
                    drop_null_keys: bool = True) -> str:
    """Route ``parent``'s records through the internal topic ``<name>-repartition``; return the name of
    the source node that reads it back.

    Node names follow Kafka Streams: for a generated ``name`` the filter, sink and source get generated
    names too; for a user's ``name`` they are ``<name>-repartition-filter``/``-sink``/``-source``.
    """
    topic = name if name.endswith(REPARTITION_SUFFIX) else name + REPARTITION_SUFFIX
    generated_sink, generated_filter, generated_source = (
        builder._new_name("SINK"), builder._new_name("FILTER"), builder._new_name("SOURCE"))
    if _GENERATED.fullmatch(name):
        sink, null_filter, source = generated_sink, generated_filter, generated_source
    else:
        sink, null_filter, source = topic + "-sink", topic + "-filter", topic + "-source"
    topology = builder.topology
    if drop_null_keys:
        topology.add_operator(null_filter, DropNullKeys(), parent)
        parent = null_filter
    topology.add_sink(sink, topic, parent, key_serde=key_serde, value_serde=value_serde, partitioner=partitioner,
                      internal=True)
    topology.add_source(source, topic, key_serde=key_serde, value_serde=value_serde, internal=True)
    return source

