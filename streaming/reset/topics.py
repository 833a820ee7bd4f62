"""What an application reset does to each topic, decided from the application's own topology.

As Kafka Streams' ``StreamsResetter`` (tools/src/main/java/org/apache/kafka/tools/StreamsResetter.java), by role:

- **input** (a source topic the app does not write): its committed offsets move to the position asked for
  (earliest by default). A topic read as a table (``builder.table``) goes to earliest unless asked otherwise:
  a table reset to a time loses its rows from before it (Kafka Streams users reset tables to earliest too).
  A global table's topic is read whole by every instance at start, outside the group: nothing to move.
- **intermediate** (a user topic the app both writes and reads, like the word count's ``wordcount-words``): to
  its end, so what the app wrote before the reset is not read again (the app writes it anew).
- **internal** (changelogs, repartition topics, a foreign-key join's subscription and response topics, the
  stream-time topics; the dead-letter topic and its replay ledger only when asked): deleted, and re-created with
  the partition counts and configs the runtime creates them with; the app's offsets of those it reads go to 0.
- **output** (written, never read): untouched. ``<application.id>-metadata`` and ``<application.id>-epoch`` are
  the application's, not the topology's: never deleted.

Internal topics come from the topology (``Topology.internal_topics``, the stores' changelogs, the stream-time
topics), never from name patterns: StreamsResetter deletes every topic whose name starts with the application
id and ends like an internal topic, which took an input named that way for an internal one (KAFKA-7930). A topic
that is both an input and an internal topic (a source topic named like one of the app's changelogs, or an input
listed in ``internal_topics``) is refused: an input is never deleted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from streaming.dsl.stateful_operators import TableSource
from streaming.naming import replayed_dead_letters_topic
from streaming.reset.errors import ResetError
from streaming.runtime.internal_topics import InternalTopicSpec, internal_topic_specs
from streaming.topology.nodes import ProcessorNodeDef, SourceNodeDef
from streaming.topology.topology import Topology

__all__ = ["AppTopics", "classify_topics"]


@dataclass(frozen=True)
class AppTopics:
    """An application's topics by what a reset does to them (module doc)."""

    inputs: tuple[str, ...]
    tables: tuple[str, ...]
    global_tables: tuple[str, ...]
    intermediates: tuple[str, ...]
    outputs: tuple[str, ...]
    internal: tuple[InternalTopicSpec, ...]
    internal_sources: tuple[str, ...]
    """The internal topics the app reads (repartition and foreign-key topics): its offsets of them go to 0."""


def _table_topics(topology: Topology) -> set[str]:
    """Source topics whose records go straight into a table's store (``builder.table``)."""
    tables = set()
    for sub in topology.subtopologies():
        for node in sub.nodes:
            if isinstance(node, SourceNodeDef) and any(
                    isinstance(child := topology.node(name), ProcessorNodeDef) and isinstance(child.operator,
                                                                                             TableSource)
                    for name in node.children):
                tables.update(node.topics)
    return tables


def classify_topics(topology: Topology, application_id: str, counts: dict[str, int], *, dead_letters: bool = False,
                    only_internal: Iterable[str] | None = None) -> AppTopics:
    """The topics of ``topology`` (bound to ``application_id``) by role, sized from ``counts`` (partition counts of
    the cluster's topics). ``dead_letters``: the dead-letter topic and its replay ledger are deleted too.
    ``only_internal``: delete only these internal topics (Kafka Streams' ``--internal-topics``: a subset of the
    app's internal topics), by logical or physical name (a topology bound to topic generations resolves them).

    Raises:
        ResetError: an input the cluster does not have; a topic that is an input and an internal topic; a topic in
            ``only_internal`` that is not one of the app's internal topics (each names the topic).
    """
    internal_names = topology.internal_topics
    sources = [t for t in topology.source_topics if t not in internal_names]
    sinks = {t for t in topology.sink_topics if t not in internal_names}
    global_tables = sorted({d.topic for d in topology.global_stores.values()})
    missing = sorted(t for t in [*sources, *global_tables] if t not in counts)
    if missing:
        raise ResetError(f"input topics {missing} of application {application_id!r} do not exist on the cluster")
    specs = internal_topic_specs(topology, application_id, counts, dead_letters)
    if dead_letters:
        ledger = replayed_dead_letters_topic(application_id)
        specs[ledger] = InternalTopicSpec(ledger, "dead-letters", counts.get(ledger, 1), {"cleanup.policy": "delete"})
    read = set(sources) | set(global_tables)
    both = sorted(read & set(specs))
    if both:
        raise ResetError(f"topic {both[0]!r} is an input of application {application_id!r} and also one of its "
                         f"internal topics ({specs[both[0]].kind}): a reset deletes internal topics and never an "
                         f"input; rename the topic or the store")
    if only_internal is not None:
        chosen = list(dict.fromkeys(topology.generations.physical(t) for t in only_internal))  # logical names too
        for topic in chosen:
            if topic not in specs:
                role = "an input" if topic in read else "an output" if topic in sinks else "not a topic"
                raise ResetError(f"topic {topic!r} cannot be listed as internal: it is {role} of application "
                                 f"{application_id!r}, and a reset deletes only its internal topics "
                                 f"({', '.join(sorted(specs)) or 'none'})")
        specs = {topic: specs[topic] for topic in chosen}
    tables = _table_topics(topology)
    intermediates = sorted(set(sources) & sinks)
    inputs = [t for t in sources if t not in sinks]
    return AppTopics(
        inputs=tuple(sorted(t for t in inputs if t not in tables)),
        tables=tuple(sorted(t for t in inputs if t in tables)),
        global_tables=tuple(global_tables),
        intermediates=tuple(intermediates),
        outputs=tuple(sorted(sinks - set(sources))),
        internal=tuple(specs[t] for t in sorted(specs)),
        internal_sources=tuple(sorted(t for t in internal_names if t in topology.source_topics and t in specs)),
    )
