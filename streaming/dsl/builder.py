"""``StreamsBuilder``: the DSL's entry point; ``build()`` returns the Topology."""

from __future__ import annotations

from typing import Any

from streaming.dsl.kstream import KStream
from streaming.dsl.ktable import GlobalKTable, KTable
from streaming.dsl.materialized import Materialized, as_materialized, make_store_builder
from streaming.dsl.stateful_operators import TableSource
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

    def _new_name(self, kind: str, prefix: str = "KSTREAM") -> str:
        name = f"{prefix}-{kind}-{self._index:010d}"
        self._index += 1
        return name

    def _new_store_name(self, prefix: str) -> str:
        """A generated store name, e.g. ``KSTREAM-AGGREGATE-STATE-STORE-0000000001`` (same counter as nodes)."""
        name = f"{prefix}STATE-STORE-{self._index:010d}"
        self._index += 1
        return name

    def _add_operator(self, kind: str, operator: Any, name: str | None, *parents: str,
                      prefix: str = "KSTREAM") -> str:
        node = name or self._new_name(kind, prefix)
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

    def _table_parts(self, topic: str, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None,
                     materialized: Materialized | str | None, name: str | None, timestamped: bool
                     ) -> tuple[str, Serde[Any] | None, Serde[Any] | None, StoreBuilder, str, str]:
        """What a table and a global table both need: the store's name, serdes and builder, and the
        names of the source node and of the node that updates the store."""
        spec = as_materialized(materialized)
        store_name = spec.store_name or self._new_store_name(f"{topic}-")
        key_serde, value_serde = key_serde or spec.key_serde, value_serde or spec.value_serde
        source = self._new_name("SOURCE")
        node = name or self._new_name("SOURCE", prefix="KTABLE")
        store = make_store_builder(spec, store_name, key_serde, value_serde, timestamped)
        return store_name, key_serde, value_serde, store, source, node

    def table(self, topic: str, key_serde: Serde[Any] | None = None, value_serde: Serde[Any] | None = None,
              materialized: Materialized | str | None = None, timestamp_extractor: TimestampExtractor | None = None,
              offset_reset: str | None = None, name: str | None = None) -> KTable:
        """A table of ``topic``: each record updates its key, a ``None`` value (tombstone) deletes the key.

        The table lives in a store (``materialized``: a name or a :class:`~streaming.Materialized`; by
        default RocksDB, cached, logged to ``<application.id>-<store>-changelog``, named
        ``<topic>-STATE-STORE-<n>`` when unnamed). Serdes: ``key_serde``/``value_serde``, else the
        materialized ones, else the config's defaults, for both the topic and the store. Downstream it
        forwards every update (or one per key per commit when cached); a tombstone forwards a delete,
        except for a key the table does not have (then nothing happens). Records with a None key are
        skipped and counted.
        """
        store_name, key_serde, value_serde, store, source, node = self._table_parts(
            topic, key_serde, value_serde, materialized, name, timestamped=True)
        self.topology.add_state_store(store)
        self.topology.add_source(source, topic, key_serde=key_serde, value_serde=value_serde,
                                 timestamp_extractor=timestamp_extractor, offset_reset=offset_reset)
        operator = TableSource(store_name)
        self.topology.add_operator(node, operator, source)
        self.topology.connect_processor_and_state_stores(node, store_names=[store_name])
        return KTable(self, node, key_serde, value_serde, store_name, operator)

    def global_table(self, topic: str, key_serde: Serde[Any] | None = None, value_serde: Serde[Any] | None = None,
                     materialized: Materialized | str | None = None, name: str | None = None) -> GlobalKTable:
        """A table of every partition of ``topic``, copied in full to every instance (a global store).

        The store (named by ``materialized``, else ``<topic>-STATE-STORE-<n>``; RocksDB unless
        ``with_store_type("in_memory")``) is filled from the topic before processing starts, then
        follows it; it has no changelog (logging settings are ignored: the topic is the changelog) and
        no cache. Records are stored as written, so the serdes (``key_serde``/``value_serde``, else the
        materialized ones, else the defaults) must be the topic's; a ``None`` value deletes the key.
        Processors read it with ``context.get_state_store(table.queryable_store_name)``; writes raise.
        """
        store_name, key_serde, value_serde, store, source, processor = self._table_parts(
            topic, key_serde, value_serde, materialized, name, timestamped=False)
        self.topology.add_global_store(store, topic, source_name=source, processor_name=processor)
        return GlobalKTable(topic, store_name, key_serde, value_serde)

    def add_state_store(self, store_builder: StoreBuilder) -> StreamsBuilder:
        """Add a store that ``KStream.process(supplier, store_name)`` can then use."""
        self.topology.add_state_store(store_builder)
        return self

    def build(self) -> Topology:
        """The topology built so far (validated: every node reachable from a source)."""
        if not self.topology.source_topics and not self.topology.global_stores:
            raise TopologyError("the topology has no source: call builder.stream(...) first")
        self.topology.subtopologies()
        return self.topology
