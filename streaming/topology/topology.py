"""``Topology``: source, processor and sink nodes plus state stores, split into sub-topologies."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from streaming.errors import TopologyError
from streaming.naming import check_store_name
from streaming.processor.api import TopicNameExtractor
from streaming.serdes import Serde
from streaming.state.stores import StoreBuilder
from streaming.timestamps import TimestampExtractor, resolve_extractor
from streaming.topic_generations import TopicGenerations
from streaming.topology.description import GlobalStoreDescription, SubtopologyDescription, TopologyDescription
from streaming.topology.nodes import (
    GlobalStoreDef,
    NodeDef,
    Operator,
    Partitioner,
    ProcessorNodeDef,
    SinkNodeDef,
    SourceNodeDef,
)


@dataclass(frozen=True)
class Subtopology:
    """Nodes connected by parent/child edges or a shared store. One task per input partition runs them."""

    id: int
    nodes: tuple[NodeDef, ...]
    source_topics: tuple[str, ...]
    sink_topics: tuple[str, ...]
    stores: tuple[str, ...]
    dynamic_sinks: tuple[str, ...] = ()
    """Sinks whose topic a topic name extractor chooses per record: not in ``sink_topics`` (see
    :meth:`Topology.add_sink`)."""

    def source_for(self, topic: str) -> SourceNodeDef:
        for node in self.nodes:
            if isinstance(node, SourceNodeDef) and topic in node.topics:
                return node
        raise KeyError(topic)


@dataclass(frozen=True)
class CopartitionGroup:
    """Topics that must have the same partition count because ``operation`` joins what they carry
    (Kafka Streams' co-partition groups): key k of every one of them must be in the same partition
    number, so one task sees both sides of the key. ``topics`` are the source topics feeding the join
    (internal ones prefixed once the topology is bound)."""

    operation: str  # e.g. "stream-table join 'KSTREAM-JOIN-0000000004'"
    topics: tuple[str, ...]


class Topology:
    """A processor topology, built with the Processor API or by ``StreamsBuilder.build()``.

    Every ``add_*`` method returns the topology, so calls chain. Names must be unique; parents must
    exist before their children are added.
    """

    def __init__(self) -> None:
        self._nodes: dict[str, NodeDef] = {}
        self._stores: dict[str, StoreBuilder] = {}
        self._topic_sources: dict[str, str] = {}
        self._internal_topics: set[str] = set()  # names without the application.id prefix until bound
        self._application_id: str | None = None
        self._generations = TopicGenerations()
        self._subtopologies: list[Subtopology] | None = None
        self._global_stores: dict[str, GlobalStoreDef] = {}
        self._global_state_stores: dict[str, Any] = {}  # store instances, in a runtime's view only
        self._copartitioned: list[tuple[str, tuple[str, ...]]] = []  # (operation, nodes whose sources join)

    # -- building -------------------------------------------------------------------------------------
    def add_source(self, name: str, *topics: str, key_serde: Serde[Any] | None = None,
                   value_serde: Serde[Any] | None = None, timestamp_extractor: TimestampExtractor | Any = None,
                   offset_reset: str | None = None, internal: bool = False) -> Topology:
        """A source node reading ``topics`` (serdes default to the config's default serdes).

        ``internal=True`` marks a topic the runtime owns (a repartition topic): its name gets the
        ``<application.id>-`` prefix when the topology is bound to an application, and the runtime
        creates it.
        """
        if not topics:
            raise TopologyError(f"source {name!r} needs at least one topic")
        if offset_reset not in (None, "earliest", "latest"):
            raise TopologyError(f"source {name!r}: offset_reset must be 'earliest' or 'latest', got {offset_reset!r}")
        for topic in topics:
            if not isinstance(topic, str) or not topic:
                raise TopologyError(f"source {name!r}: topic names must be non-empty strings, got {topic!r}")
            if topic in self._topic_sources:
                raise TopologyError(f"topic {topic!r} is already read by source {self._topic_sources[topic]!r}; "
                                    f"a topic can be read by one source node only")
            self._check_not_global(topic)
        extractor = None
        if timestamp_extractor is not None:
            try:
                extractor = resolve_extractor(timestamp_extractor)
            except (ValueError, ImportError, AttributeError) as exc:
                raise TopologyError(f"source {name!r}: {exc}") from None
        self._add(SourceNodeDef(name, topics=list(topics), key_serde=key_serde, value_serde=value_serde,
                                timestamp_extractor=extractor, offset_reset=offset_reset), ())
        for topic in topics:
            self._topic_sources[topic] = name
            if internal:
                self._internal_topics.add(topic)
        return self

    def add_processor(self, name: str, supplier: Callable[[], Any], *parent_names: str) -> Topology:
        """A processor node; ``supplier()`` must return a new ``Processor`` each call (one per task)."""
        if not callable(supplier):
            raise TopologyError(f"processor {name!r}: supplier must be callable (a Processor class or factory)")
        self._add(ProcessorNodeDef(name, supplier=supplier), parent_names)
        return self

    def add_operator(self, name: str, operator: Operator, *parent_names: str) -> Topology:
        """A DSL operation node (internal to ``StreamsBuilder``; compiled to a function per task)."""
        self._add(ProcessorNodeDef(name, operator=operator), parent_names)
        return self

    def add_sink(self, name: str, topic: str | TopicNameExtractor, *parent_names: str,
                 key_serde: Serde[Any] | None = None, value_serde: Serde[Any] | None = None,
                 partitioner: Partitioner | None = None, internal: bool = False) -> Topology:
        """A sink node writing to ``topic``. ``partitioner(topic, key, value, n)`` may pick the partition.
        ``internal=True``: a runtime-owned topic, as in :meth:`add_source`.

        ``topic`` may be a topic name extractor instead (a dynamic sink, Kafka Streams' ``TopicNameExtractor``):
        ``topic(key, value, record_context) -> str`` names each record's topic, which must exist (see
        ``KStream.to`` for what happens when it does not). A dynamic sink writes outputs only: it has no fixed
        topic, so :attr:`sink_topics` leaves it out (:attr:`dynamic_sinks` names it), start-up cannot check its
        topics, and it may not write a topic the application reads or owns (checked per record)."""
        extractor = None
        if callable(topic) and not isinstance(topic, str):
            if internal:
                raise TopologyError(f"sink {name!r}: an internal topic cannot be chosen by a topic name extractor")
            extractor, topic = topic, ""
        elif not isinstance(topic, str) or not topic:
            raise TopologyError(f"sink {name!r}: topic must be a non-empty string or a topic name extractor "
                                f"(key, value, record_context) -> str, got {topic!r}")
        self._add(SinkNodeDef(name, topic=topic, key_serde=key_serde, value_serde=value_serde,
                              partitioner=partitioner, topic_extractor=extractor), parent_names)
        if internal:
            self._internal_topics.add(topic)
        return self

    def bind(self, application_id: str, generations: TopicGenerations | None = None) -> Topology:
        """Give internal topics their ``<application.id>-`` prefix and every topic the physical name of its
        generation (``generations``, default: every topic at generation 1; :mod:`streaming.topic_generations`).
        Once: a topology runs under one application.id and one map."""
        generations = generations if generations is not None else TopicGenerations()
        if self._application_id == application_id and self._generations == generations:
            return self
        if self._application_id is not None:
            raise TopologyError(f"this topology is bound to application.id {self._application_id!r} with topic "
                                f"generations {self._generations.generations}; build a new one to run it as "
                                f"{application_id!r} with {generations.generations}")
        renamed = {topic: generations.physical(f"{application_id}-{topic}") for topic in self._internal_topics}

        def physical(topic: str) -> str:
            return renamed.get(topic) or generations.physical(topic)

        for node in self._nodes.values():
            if isinstance(node, SourceNodeDef):
                node.topics = [physical(t) for t in node.topics]
            elif isinstance(node, SinkNodeDef) and not node.is_dynamic:
                node.topic = physical(node.topic)
        for store in self._global_stores.values():
            store.topic = generations.physical(store.topic)
        self._topic_sources = {physical(t): n for t, n in self._topic_sources.items()}
        self._internal_topics = set(renamed.values())
        self._application_id = application_id
        self._generations = generations
        self._subtopologies = None
        return self

    @property
    def generations(self) -> TopicGenerations:
        """The topic generations this topology is bound with (every topic at generation 1 until bound)."""
        return self._generations

    @property
    def internal_topics(self) -> set[str]:
        """Runtime-owned topics (repartition topics), prefixed once the topology is bound."""
        return set(self._internal_topics)

    def add_state_store(self, store_builder: StoreBuilder, *processor_names: str) -> Topology:
        """Register a store (one instance per task) and connect it to the named processors."""
        check_store_name(store_builder.name)
        if store_builder.name in self._stores or store_builder.name in self._global_stores:
            raise TopologyError(f"state store {store_builder.name!r} is already added to this topology")
        self._stores[store_builder.name] = store_builder
        self.connect_processor_and_state_stores(*processor_names, store_names=[store_builder.name])
        return self

    def connect_processor_and_state_stores(self, *processor_names: str, store_names: list[str]) -> Topology:
        """Give processors access to stores already added."""
        for processor_name in processor_names:
            node = self._nodes.get(processor_name)
            if not isinstance(node, ProcessorNodeDef):
                raise TopologyError(f"cannot connect stores {store_names} to {processor_name!r}: no such processor")
            for store in store_names:
                if store not in self._stores:
                    raise TopologyError(f"processor {processor_name!r} uses state store {store!r}, "
                                        f"which was never added (add_state_store)")
                if store not in node.stores:
                    node.stores.append(store)
        self._subtopologies = None
        return self

    def add_global_store(self, store_builder: StoreBuilder, topic: str, *, source_name: str,
                         processor_name: str) -> Topology:
        """A global store: every instance keeps a full copy of ``topic`` (all partitions) in it.

        The store is filled from the topic itself before processing starts and then follows it, so it
        has no changelog (logging and caching are turned off). Processors of any sub-topology read it
        with ``context.get_state_store(name)``, without connecting it; writes raise. Records are stored
        as they are: the store's serdes must match the topic's, and a ``None`` value deletes the key.
        """
        name = check_store_name(store_builder.name)
        if name in self._stores or name in self._global_stores:
            raise TopologyError(f"state store {name!r} is already added to this topology")
        if not isinstance(topic, str) or not topic:
            raise TopologyError(f"global store {name!r}: topic must be a non-empty string, got {topic!r}")
        if topic in self._topic_sources:
            raise TopologyError(f"topic {topic!r} is already read by source {self._topic_sources[topic]!r}; "
                                f"it cannot also feed global store {name!r}")
        self._check_not_global(topic)
        for node_name in (source_name, processor_name):
            if node_name in self._nodes or node_name in self._global_node_names():
                raise TopologyError(f"a node named {node_name!r} is already in this topology")
        store_builder.with_logging_disabled().with_caching_disabled()
        self._global_stores[name] = GlobalStoreDef(store_builder, topic, source_name, processor_name)
        return self

    def _check_not_global(self, topic: str) -> None:
        for store in self._global_stores.values():
            if store.topic == topic:
                raise TopologyError(f"topic {topic!r} already feeds global store {store.store_builder.name!r}; "
                                    f"a topic can be read by one source node only")

    def _global_node_names(self) -> set[str]:
        return {n for g in self._global_stores.values() for n in (g.source_name, g.processor_name)}

    @property
    def global_stores(self) -> dict[str, GlobalStoreDef]:
        """Global store definitions by store name."""
        return dict(self._global_stores)

    def with_global_state_stores(self, stores: Mapping[str, Any]) -> Topology:
        """This topology as one runtime (a KafkaStreams instance or a test driver) runs it: the same
        definitions, plus that runtime's open global store instances, which its tasks hand to processors.
        """
        self.subtopologies()  # computed once, shared with the view
        view = copy.copy(self)
        view._global_state_stores = dict(stores)
        return view

    @property
    def global_state_stores(self) -> dict[str, Any]:
        """Open global store instances (empty outside a runtime's view, see :meth:`with_global_state_stores`)."""
        return self._global_state_stores

    def _add(self, node: NodeDef, parent_names: tuple[str, ...] | list[str]) -> None:
        if not isinstance(node.name, str) or not node.name:
            raise TopologyError(f"node names must be non-empty strings, got {node.name!r}")
        if node.name in self._nodes or node.name in self._global_node_names():
            raise TopologyError(f"a node named {node.name!r} is already in this topology")
        if not isinstance(node, SourceNodeDef) and not parent_names:
            raise TopologyError(f"{type(node).__name__.removesuffix('NodeDef').lower()} {node.name!r} needs a parent")
        for parent in parent_names:
            parent_node = self._nodes.get(parent)
            if parent_node is None:
                raise TopologyError(f"{node.name!r} names parent {parent!r}, which is not in the topology")
            if isinstance(parent_node, SinkNodeDef):
                raise TopologyError(f"{node.name!r} cannot have sink {parent!r} as a parent")
        node.parents = list(parent_names)
        for parent in parent_names:
            self._nodes[parent].children.append(node.name)
        self._nodes[node.name] = node
        self._subtopologies = None

    def copartition(self, operation: str, *node_names: str) -> Topology:
        """Require the source topics that feed ``node_names`` to be co-partitioned: ``operation`` (a join,
        named in errors) joins the records of these nodes by key. Checked at start-up; internal topics of
        the group are created with the group's partition count."""
        for name in node_names:
            if name not in self._nodes:
                raise TopologyError(f"{operation}: node {name!r} is not in the topology")
        self._copartitioned.append((operation, node_names))
        return self

    @property
    def copartition_groups(self) -> list[CopartitionGroup]:
        """Every group of topics a join needs co-partitioned (see :meth:`copartition`)."""
        return [CopartitionGroup(operation, tuple(dict.fromkeys(t for n in nodes for t in self._sources_of(n))))
                for operation, nodes in self._copartitioned]

    def _sources_of(self, name: str) -> list[str]:
        """The topics of the source nodes upstream of node ``name`` (itself included)."""
        topics: list[str] = []
        seen: set[str] = set()
        pending = [name]
        while pending:
            node = self._nodes[pending.pop()]
            if node.name in seen:
                continue
            seen.add(node.name)
            if isinstance(node, SourceNodeDef):
                topics.extend(node.topics)
            pending.extend(node.parents)
        return topics

    # -- reading ---------------------------------------------------------------------------------------
    @property
    def store_builders(self) -> dict[str, StoreBuilder]:
        return dict(self._stores)

    def node(self, name: str) -> NodeDef:
        return self._nodes[name]

    @property
    def source_topics(self) -> list[str]:
        return list(self._topic_sources)

    @property
    def sink_topics(self) -> list[str]:
        """Topics written by sinks with a fixed topic, internal topics included (a dynamic sink's topics are known
        only per record: see :attr:`dynamic_sinks`)."""
        return sorted({n.topic for n in self._nodes.values() if isinstance(n, SinkNodeDef) and not n.is_dynamic})

    @property
    def dynamic_sinks(self) -> list[str]:
        """The names of the sinks whose topic a topic name extractor chooses per record (:meth:`add_sink`)."""
        return [n.name for n in self._nodes.values() if isinstance(n, SinkNodeDef) and n.is_dynamic]

    def subtopologies(self) -> list[Subtopology]:
        """The sub-topologies, numbered in the order their first node was added."""
        if self._subtopologies is None:
            self._subtopologies = self._split()
        return self._subtopologies

    def _split(self) -> list[Subtopology]:
        if not self._nodes:
            if self._global_stores:
                return []  # only global stores: nothing generates tasks
            raise TopologyError("the topology has no nodes")
        root: dict[str, str] = {name: name for name in self._nodes}

        def find(name: str) -> str:
            while root[name] != name:
                root[name] = root[root[name]]
                name = root[name]
            return name

        def union(a: str, b: str) -> None:
            root[find(a)] = find(b)

        store_users: dict[str, str] = {}
        for node in self._nodes.values():
            for parent in node.parents:
                union(node.name, parent)
            if isinstance(node, ProcessorNodeDef):
                for store in node.stores:
                    if store in store_users:
                        union(node.name, store_users[store])
                    store_users[store] = node.name
        groups: dict[str, list[NodeDef]] = {}
        for node in self._nodes.values():
            groups.setdefault(find(node.name), []).append(node)
        result = []
        for index, nodes in enumerate(groups.values()):
            sources = [n for n in nodes if isinstance(n, SourceNodeDef)]
            if not sources:
                raise TopologyError(f"nodes {[n.name for n in nodes]} are not connected to any source")
            result.append(Subtopology(
                id=index, nodes=tuple(nodes),
                source_topics=tuple(t for s in sources for t in s.topics),
                sink_topics=tuple(sorted({n.topic for n in nodes if isinstance(n, SinkNodeDef) and not n.is_dynamic})),
                stores=tuple(sorted({s for n in nodes if isinstance(n, ProcessorNodeDef) for s in n.stores})),
                dynamic_sinks=tuple(n.name for n in nodes if isinstance(n, SinkNodeDef) and n.is_dynamic)))
        return result

    def describe(self) -> TopologyDescription:
        """The sub-topologies and their nodes; ``print()`` it for Kafka Streams' familiar text."""
        subtopologies = self.subtopologies()
        return TopologyDescription(
            tuple(SubtopologyDescription(s.id, s.nodes) for s in subtopologies),
            tuple(GlobalStoreDescription(len(subtopologies) + index, store)
                  for index, store in enumerate(self._global_stores.values())))

    def __repr__(self) -> str:
        return str(self.describe())
