"""``StreamsBuilder``: the DSL's entry point; ``build()`` returns the Topology."""

from __future__ import annotations

from typing import Any

from streaming.dsl.kstream import KStream
from streaming.errors import TopologyError
from streaming.serdes import Serde
from streaming.state.stores import StoreBuilder
from streaming.timestamps import TimestampExtractor
from streaming.topology.topology import Topology


class StreamsBuilder:
    """Builds a topology with the DSL: ``stream(...)`` then operations, then ``build()``.

    Nodes get Kafka Streams-style names (``KSTREAM-FILTER-0000000001``) unless ``name=`` is given.
    """

    def __init__(self) -> None:
        self.topology = Topology()
        self._index = 0

    def _new_name(self, kind: str) -> str:
        name = f"KSTREAM-{kind}-{self._index:010d}"
        self._index += 1
        return name

    def _add_operator(self, kind: str, operator: Any, name: str | None, *parents: str) -> str:
        node = name or self._new_name(kind)
        self.topology.add_operator(node, operator, *parents)
        return node

    def stream(self, topics: str | list[str], key_serde: Serde[Any] | None = None,
               value_serde: Serde[Any] | None = None, timestamp_extractor: TimestampExtractor | None = None,
               offset_reset: str | None = None, name: str | None = None) -> KStream:
        """A stream of the records of one or more topics.

        ``offset_reset`` ('earliest' or 'latest') applies where the group has no committed offset;
        by default the consumer's ``auto.offset.reset`` (Kafka Streams' default: earliest).
        """
        topic_list = [topics] if isinstance(topics, str) else list(topics)
        node = name or self._new_name("SOURCE")
        self.topology.add_source(node, *topic_list, key_serde=key_serde, value_serde=value_serde,
                                 timestamp_extractor=timestamp_extractor, offset_reset=offset_reset)
        return KStream(self, node, key_serde, value_serde)

    def add_state_store(self, store_builder: StoreBuilder) -> StreamsBuilder:
        """Add a store that ``KStream.process(supplier, store_name)`` can then use."""
        self.topology.add_state_store(store_builder)
        return self

    def build(self) -> Topology:
        """The topology built so far (validated: every node reachable from a source)."""
        if not self.topology.source_topics:
            raise TopologyError("the topology has no source: call builder.stream(...) first")
        self.topology.subtopologies()
        return self.topology
