"""InternalTopicManager: creates the topics the runtime owns — changelogs, repartition topics, the stream-time
topics of stateful sub-topologies, the dead-letter topic, and the shed and alerts topics of load shedding and
the idle watchdog. Each by its physical name: at the generation the topology is bound with
(:mod:`streaming.topic_generations`; the dead-letter, shed and alerts topics have none)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from streaming.admin import TopicError, create_topics
from streaming.errors import StreamsError
from streaming.naming import alerts_topic, changelog_topic, dead_letter_topic, shed_topic
from streaming.runtime.stream_time import stream_time_topics
from streaming.topology.nodes import SinkNodeDef
from streaming.topology.topology import Topology

log = logging.getLogger(__name__)

#: The dead-letter topic's partitions: dead letters are few, and one partition keeps them in the order
#: they were written (``brook dlq replay`` replays in that order).
DEAD_LETTER_PARTITIONS = 1
#: The alerts topic's partitions: a few alerts, read in order by the Dagster sensor (assets/idle_alerts.py).
ALERTS_PARTITIONS = 1
#: How long alerts are kept (set explicitly: the embedded broker reports only configs set at creation).
ALERTS_RETENTION_MS = 7 * 24 * 3600 * 1000


def internal_topic_partitions(topology: Topology, application_id: str, counts: dict[str, int]) -> dict[str, int]:
    """Partition counts of every internal topic.

    As Kafka Streams sizes them: an internal topic that a join needs co-partitioned with other topics
    (see ``Topology.copartition``) gets the partition count of the group's external topics, or, when the
    group has only internal topics, the highest count among them; any other repartition topic gets the
    partition count of the sub-topology that writes it (the most partitions among that sub-topology's
    sources). A changelog gets its sub-topology's task count, since changelog partition = task partition;
    so does a stateful sub-topology's stream-time topic (one partition per task).
    """
    known = dict(counts)
    subtopologies = topology.subtopologies()
    internal = topology.internal_topics
    groups = [group.topics for group in topology.copartition_groups]
    # Repartition topics may feed each other, and a foreign-key join's two topics feed each other's
    # writers: iterate to a fixpoint.
    for _ in range(2 * len(internal) + 2):  # each pass sizes a topic or raises one's count; bounded
        changed = False
        for topics in groups:
            external = [known[t] for t in topics if t not in internal and t in known]
            members = [known[t] for t in topics if t in known]
            if external:
                target = max(external)  # unequal external counts fail in KafkaStreams.check_topics
            elif len(members) == len(topics):
                target = max(members)
            else:
                continue
            for topic in topics:
                if topic in internal and known.get(topic) != target:
                    known[topic] = target
                    changed = True
        for sub in subtopologies:
            sizes = [known[t] for t in sub.source_topics if t in known]
            if len(sizes) < len(sub.source_topics):
                continue
            for node in sub.nodes:
                if isinstance(node, SinkNodeDef) and node.topic in internal and node.topic not in known:  # never dynamic
                    known[node.topic] = max(sizes)
                    changed = True
        if not changed:
            break
    missing = [t for t in internal if t not in known]
    if missing:
        raise StreamsError(f"cannot size internal topics {missing}: their writers read no sized topic")
    result = {t: known[t] for t in internal}
    builders = topology.store_builders
    for sub in subtopologies:
        for store in sub.stores:
            if builders[store].logging_enabled:
                result[topology.generations.changelog(application_id, store)] = max(known[t] for t in sub.source_topics)
    for sub_id, topic in stream_time_topics(topology, application_id).items():
        sub = next(sub for sub in subtopologies if sub.id == sub_id)
        result[topic] = max(known[t] for t in sub.source_topics)
    return result


def logical_topics(topology: Topology, application_id: str) -> set[str]:
    """The logical name of every key-partitioned topic ``topology`` (bound to ``application_id``) reads or writes:
    sources, sinks, global-table topics, internal topics, changelogs of logged stores and stream-time topics —
    the topics that may have generations (:mod:`streaming.topic_generations`). Not the topics a dynamic sink chooses
    per record (outputs only, unknown before they are written: they stay at generation 1, their own name)."""
    generations = topology.generations
    physical = {*topology.source_topics, *topology.sink_topics, *topology.internal_topics,
                *(store.topic for store in topology.global_stores.values())}
    logged = {store for sub in topology.subtopologies() for store in sub.stores
              if topology.store_builders[store].logging_enabled}
    return ({generations.logical(topic) for topic in physical}
            | {changelog_topic(application_id, store) for store in logged}
            | {generations.logical(topic) for topic in stream_time_topics(topology, application_id).values()})


@dataclass(frozen=True)
class InternalTopicSpec:
    """An internal topic as the runtime creates it: what it is for, its partition count and its configs."""

    name: str
    kind: str
    """``changelog``, ``repartition`` (also a foreign-key join's subscription and response topics),
    ``stream-time``, ``dead-letters``, ``shed`` or ``alerts``."""
    partitions: int
    configs: dict[str, str]


def internal_topic_specs(topology: Topology, application_id: str, counts: dict[str, int],
                         dead_letters: bool = False, shed: bool = False,
                         alerts: bool = False) -> dict[str, InternalTopicSpec]:
    """Every internal topic of ``topology`` (bound to ``application_id``), sized from the partition counts
    ``counts`` of its external topics (:func:`internal_topic_partitions`), with the configs it is created with.
    ``dead_letters``: also the dead-letter topic ``<application.id>-dlq`` (one partition, delete policy).
    ``shed``: also ``<application.id>-shed`` (as many partitions as the most partitioned source topic, so a shed
    record keeps its source partition's order; delete policy). ``alerts``: also ``<application.id>-alerts``
    (one partition, delete policy, :data:`ALERTS_RETENTION_MS`)."""
    wanted = internal_topic_partitions(topology, application_id, counts)
    kinds: dict[str, tuple[str, dict[str, str]]] = {}
    for store, builder in topology.store_builders.items():
        topic = topology.generations.changelog(application_id, store)
        if topic in wanted:
            kinds[topic] = ("changelog", {"cleanup.policy": "compact", **builder.log_config})
    for topic in topology.internal_topics:
        kinds[topic] = ("repartition", {"cleanup.policy": "delete"})
    for topic in stream_time_topics(topology, application_id).values():
        kinds[topic] = ("stream-time", {"cleanup.policy": "compact"})  # keyed by task id: the last record per task
    if dead_letters:
        wanted[dead_letter_topic(application_id)] = DEAD_LETTER_PARTITIONS
        kinds[dead_letter_topic(application_id)] = ("dead-letters", {"cleanup.policy": "delete"})
    if shed:
        wanted[shed_topic(application_id)] = max(
            [counts[t] for t in topology.source_topics if t in counts and t not in topology.internal_topics] or [1])
        kinds[shed_topic(application_id)] = ("shed", {"cleanup.policy": "delete"})
    if alerts:
        wanted[alerts_topic(application_id)] = ALERTS_PARTITIONS
        kinds[alerts_topic(application_id)] = ("alerts", {"cleanup.policy": "delete",
                                                          "retention.ms": str(ALERTS_RETENTION_MS)})
    return {topic: InternalTopicSpec(topic, kinds[topic][0], count, kinds[topic][1]) for topic, count in wanted.items()}


def create_internal_topics(topology: Topology, application_id: str, admin_config: dict[str, str],
                           counts: dict[str, int], dead_letters: bool = False, shed: bool = False,
                           alerts: bool = False) -> dict[str, int]:
    """Create (or check) every internal topic; an existing one with another partition count is an error.
    ``dead_letters``, ``shed``, ``alerts``: also those topics (see :func:`internal_topic_specs`)."""
    specs = internal_topic_specs(topology, application_id, counts, dead_letters, shed, alerts)
    wanted = {topic: spec.partitions for topic, spec in specs.items()}
    if not wanted:
        return wanted
    try:
        create_topics(admin_config["bootstrap.servers"], wanted,
                      configs={topic: spec.configs for topic, spec in specs.items()}, client_config=admin_config)
    except TopicError as exc:
        raise StreamsError(f"internal topic check failed: {exc}. The topology's partitioning changed since the "
                           f"topic was created; reset the application (brook app reset: it deletes and re-creates "
                           f"its internal topics) or keep the old partition counts") from exc
    log.info("internal topics ready: %s", wanted)
    return wanted
