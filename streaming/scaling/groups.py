"""Co-partition groups: the topics of an application that must keep equal partition counts, and so scale together.

Kafka Streams' ``copartitionGroups`` (``InternalTopologyBuilder.copartitionGroups``, enforced by
``CopartitionedTopicsEnforcer``) holds the sources of each join. Brook's runtime asks more: every sub-topology's
source topics have equal counts (``KafkaStreams.check_topics``: task ``<sub>_<p>`` reads partition ``p`` of each),
and its changelogs and stream-time topic have one partition per task (``internal_topic_partitions``). So a group
here is a connected set of topics under "must have the same count":

- the topics of each join's co-partition group (``Topology.copartition_groups``, the DSL's joins and a
  foreign-key join's subscription and response topics with the tables they meet);
- the source topics of each sub-topology, its logged stores' changelogs and its stream-time topic.

A repartition topic is a source of the sub-topology that reads it; its writers partition by murmur2 over
whatever count it has, so it does not tie the writers' group to the readers'. Output topics (written, never read)
and global tables' topics (read whole by every instance) belong to no group. So do the topics a dynamic sink
(``KStream.to(extractor)``) chooses per record: it may write output topics only, never one the app reads or owns
(refused per record: :mod:`streaming.runtime.dynamic_sink`), so it makes no topic "intermediate" and, whatever its
partitioner, partitions nothing a re-shard must reproduce (``custom_partitioned`` skips it).
"""

from __future__ import annotations

from dataclasses import dataclass

from streaming.dsl.foreign_key_join import SubscriptionReceive, SubscriptionSend, response_partition
from streaming.naming import changelog_topic
from streaming.runtime.stream_time import stream_time_topics
from streaming.topology.nodes import ProcessorNodeDef, SinkNodeDef
from streaming.topology.topology import Topology

__all__ = ["GroupTopic", "ScalingGroup", "custom_partitioned", "left_subscription_stores", "scaling_groups"]

#: The roles of a group's topics, in the order plans list them.
ROLES = ("input", "intermediate", "repartition", "changelog", "stream-time")


@dataclass(frozen=True)
class GroupTopic:
    """A topic of a group (a logical name: the topology's), its role (:data:`ROLES`), the sub-topology that
    reads it or owns it (None for a topic only a join ties in) and, for a changelog, its store."""

    topic: str
    role: str
    subtopology: int | None
    store: str | None = None


@dataclass(frozen=True)
class ScalingGroup:
    """A co-partition group (module doc): its ``name`` (the first of its input or intermediate topics, else the
    first of its topics), the topics in :data:`ROLES` order, its sub-topologies and why they are tied (the
    joins)."""

    name: str
    topics: tuple[GroupTopic, ...]
    subtopologies: tuple[int, ...]
    joins: tuple[str, ...]

    def names(self, *roles: str) -> list[str]:
        """The group's topics of ``roles`` (all when none are given)."""
        return [t.topic for t in self.topics if not roles or t.role in roles]

    @property
    def external(self) -> list[str]:
        """The topics an operator names to choose the group: inputs and intermediate topics (or, in a group that
        reads only repartition topics, those)."""
        return self.names("input", "intermediate") or self.names("repartition")


def scaling_groups(topology: Topology, application_id: str) -> list[ScalingGroup]:
    """The co-partition groups of ``topology`` run as ``application_id`` (module doc), ordered by name."""
    topology = topology.bind(application_id)
    internal = topology.internal_topics
    sinks = set(topology.sink_topics)
    builders = topology.store_builders
    stream_time = stream_time_topics(topology, application_id)
    members: dict[str, GroupTopic] = {}
    root: dict[str, str] = {}

    def find(topic: str) -> str:
        root.setdefault(topic, topic)
        while root[topic] != topic:
            root[topic] = root[root[topic]]
            topic = root[topic]
        return topic

    def union(a: str, b: str) -> None:
        root[find(a)] = find(b)

    def role_of(topic: str) -> str:
        if topic in internal:
            return "repartition"
        return "intermediate" if topic in sinks else "input"

    for sub in topology.subtopologies():
        owned = [*sub.source_topics]
        for topic in sub.source_topics:
            members[topic] = GroupTopic(topic, role_of(topic), sub.id)
        for store in sub.stores:
            if builders[store].logging_enabled:
                changelog = changelog_topic(application_id, store)
                members[changelog] = GroupTopic(changelog, "changelog", sub.id, store)
                owned.append(changelog)
        if sub.id in stream_time:
            members[stream_time[sub.id]] = GroupTopic(stream_time[sub.id], "stream-time", sub.id)
            owned.append(stream_time[sub.id])
        for topic in owned:
            union(topic, owned[0])
    joins: dict[str, list[str]] = {}
    for group in topology.copartition_groups:
        for topic in group.topics:
            members.setdefault(topic, GroupTopic(topic, role_of(topic), None))
            union(topic, group.topics[0])
        if group.topics:
            joins.setdefault(group.topics[0], []).append(group.operation)
    components: dict[str, list[GroupTopic]] = {}
    for topic, member in members.items():
        components.setdefault(find(topic), []).append(member)
    operations: dict[str, list[str]] = {}
    for first, names in joins.items():
        operations.setdefault(find(first), []).extend(names)
    groups = []
    for key, component in components.items():
        ordered = tuple(sorted(component, key=lambda t: (ROLES.index(t.role), t.topic)))
        named = [t.topic for t in ordered if t.role in ("input", "intermediate")] or [ordered[0].topic]
        groups.append(ScalingGroup(named[0], ordered,
                                   tuple(sorted({t.subtopology for t in ordered if t.subtopology is not None})),
                                   tuple(dict.fromkeys(operations.get(key, [])))))
    return sorted(groups, key=lambda g: g.name)


def left_subscription_stores(topology: Topology, group: ScalingGroup) -> list[str]:
    """The subscription stores of the foreign-key joins whose left side ``group`` runs (found from the operators: the
    left side's ``SubscriptionSend`` writes the topic the right side's ``SubscriptionReceive`` reads). Their values
    carry the left row's partition (:func:`streaming.scaling.store_keys.subscription_with_left_partition`), so
    re-sharding ``group`` rewrites them, wherever those stores are. ``topology`` is bound."""
    stores = []
    subtopologies = topology.subtopologies()
    for sub in subtopologies:
        if sub.id not in group.subtopologies:
            continue
        for node in sub.nodes:
            if not (isinstance(node, ProcessorNodeDef) and isinstance(node.operator, SubscriptionSend)):
                continue
            sink = topology.node(node.operator.sink)
            assert isinstance(sink, SinkNodeDef)
            for reader in subtopologies:
                if sink.topic not in reader.source_topics:
                    continue
                for child in reader.source_for(sink.topic).children:
                    operator = getattr(topology.node(child), "operator", None)
                    if isinstance(operator, SubscriptionReceive):
                        stores.append(operator.store_name)
    return sorted(set(stores))


def custom_partitioned(topology: Topology, group: ScalingGroup) -> list[tuple[str, str]]:
    """``(topic, sink)`` for each of ``group``'s topics that a sink of ``topology`` writes with its own partitioner
    (``to(..., partitioner=)``, ``repartition(partitioner=)``): its readers' state is partitioned the way that
    partitioner chose, which a re-shard by murmur2 cannot reproduce. A foreign-key join's response sink is not one:
    it sends an answer to the partition its subscription names, which a re-shard rewrites
    (:func:`left_subscription_stores`)."""
    topics = set(group.names("input", "intermediate", "repartition"))
    found = []
    for sub in topology.subtopologies():
        for node in sub.nodes:
            if isinstance(node, SinkNodeDef) and not node.is_dynamic and node.topic in topics \
                    and node.partitioner is not None \
                    and node.partitioner is not response_partition:
                found.append((node.topic, node.name))
    return sorted(found)
