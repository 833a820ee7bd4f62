"""What a batch run of a topology is made of: its tasks, the order of its stages, and where each record goes.

A sub-topology runs as one task per partition, as live. Topics the app writes and reads itself (repartition
topics, and user topics it both writes and reads, such as the word count's ``wordcount-words``) are *fed*: their
records come from the upstream tasks of the same run, not from the archive, so a sub-topology that reads one is a
later stage than the sub-topologies that write it. Every other topic a sub-topology reads is an *input* (replayed
from the archive); every other topic the app writes is an *output*.

Refused, each with a :class:`BatchPlanError` naming what: global stores and global tables (live, a global store
follows its topic with no time synchronization, so no replay order reproduces it), sub-topologies that feed each
other in a cycle (a foreign-key join's subscription and response topics), and, when the tasks are built, a
wall-clock punctuator (:mod:`streaming.batch.task_runner`).

A dynamic sink (``KStream.to(extractor)``) names its topic per record; it never writes a topic the app reads
(:mod:`streaming.runtime.dynamic_sink`), so it feeds no stage. Its possible outputs are the topics of
``partition_counts`` the app neither reads nor owns nor writes through a fixed sink (the platform spec's declared
outputs: ``dynamic_output_topics``); a record routed to any other topic goes down the production error path, as
live a topic missing from the cluster does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from streaming.errors import TopologyError
from streaming.naming import dead_letter_topic
from streaming.runtime.dynamic_sink import reserved_topics
from streaming.runtime.internal_topics import DEAD_LETTER_PARTITIONS, internal_topic_partitions
from streaming.runtime.task import task_id_of
from streaming.topology.topology import Subtopology, Topology

__all__ = ["BatchPlan", "BatchPlanError", "TaskSpec"]


class BatchPlanError(TopologyError):
    """The topology cannot run in batch (the message names the store, topics or processor)."""


@dataclass(frozen=True)
class TaskSpec:
    """One task of a batch run: sub-topology ``subtopology``, partition ``partition``."""

    subtopology: int
    partition: int
    sources: tuple[str, ...]

    @property
    def id(self) -> str:
        return task_id_of(self.subtopology, self.partition)

    @property
    def source_partitions(self) -> list[tuple[str, int]]:
        return [(topic, self.partition) for topic in self.sources]


class BatchPlan:
    """The stages, tasks and partition counts of one topology bound to ``application_id``.

    ``partition_counts``: the partition count of every topic the app reads or writes that it does not own (its
    inputs and outputs, as the platform spec declares them); internal topics are sized as the runtime sizes them.
    """

    def __init__(self, topology: Topology, application_id: str, partition_counts: Mapping[str, int]) -> None:
        topology.bind(application_id)
        if topology.global_stores:
            raise BatchPlanError(f"global stores {sorted(topology.global_stores)} cannot run in batch: live, a global "
                                 f"store follows its topic with no time synchronization, which no replay can repeat")
        self.topology = topology
        self.application_id = application_id
        subtopologies = topology.subtopologies()
        written = {topic for sub in subtopologies for topic in sub.sink_topics}
        self.fed_topics = frozenset(t for sub in subtopologies for t in sub.source_topics if t in written)
        self.input_topics = tuple(sorted({t for sub in subtopologies for t in sub.source_topics} - self.fed_topics))
        self.output_topics = tuple(sorted(written - set(topology.internal_topics)))
        reserved = reserved_topics(topology, application_id) if topology.dynamic_sinks else {}
        self.dynamic_output_topics = tuple(sorted(
            t for t in partition_counts if t not in reserved and t not in self.output_topics)) \
            if topology.dynamic_sinks else ()
        """The topics the app's dynamic sinks may write (the module doc); empty without dynamic sinks."""
        missing = [t for t in (*self.input_topics, *self.output_topics) if t not in partition_counts]
        if missing:
            raise BatchPlanError(f"the partition count of topics {missing} is not known (the platform spec declares "
                                 f"the app's inputs and outputs)")
        counts = {t: partition_counts[t] for t in (*self.input_topics, *self.output_topics,
                                                   *self.dynamic_output_topics)}
        self.partition_counts = {**counts, **internal_topic_partitions(topology, application_id, counts),
                                 dead_letter_topic(application_id): DEAD_LETTER_PARTITIONS}
        self.stages = self._stages(subtopologies)
        self.tasks = {sub.id: [TaskSpec(sub.id, p, sub.source_topics) for p in range(self._task_count(sub))]
                      for sub in subtopologies}

    @property
    def all_output_topics(self) -> tuple[str, ...]:
        """The outputs of fixed sinks, then those dynamic sinks may write: every topic a run's outputs may hold."""
        return (*self.output_topics, *self.dynamic_output_topics)

    def _task_count(self, sub: Subtopology) -> int:
        return max(self.partition_counts[t] for t in sub.source_topics)

    def _stages(self, subtopologies: list[Subtopology]) -> list[Subtopology]:
        """The sub-topologies in an order where each comes after every sub-topology that feeds it."""
        feeds = {sub.id: {other.id for other in subtopologies if other.id != sub.id
                          and set(other.sink_topics) & set(sub.source_topics) & self.fed_topics}
                 for sub in subtopologies}
        ordered: list[Subtopology] = []
        done: set[int] = set()
        while len(ordered) < len(subtopologies):
            ready = [sub for sub in subtopologies if sub.id not in done and feeds[sub.id] <= done]
            if not ready:
                stuck = [sub for sub in subtopologies if sub.id not in done]
                topics = sorted({t for sub in stuck for t in sub.source_topics if t in self.fed_topics})
                raise BatchPlanError(f"sub-topologies {[sub.id for sub in stuck]} feed each other in a cycle through "
                                     f"topics {topics} (a foreign-key join?): a batch run processes each "
                                     f"sub-topology once per day, after those feeding it")
            ordered.extend(ready)
            done.update(sub.id for sub in ready)
        return ordered

    def subtopology(self, subtopology_id: int) -> Subtopology:
        return next(sub for sub in self.topology.subtopologies() if sub.id == subtopology_id)

    def reader_of(self, topic: str) -> int:
        """The sub-topology that reads fed topic ``topic``."""
        return next(sub.id for sub in self.topology.subtopologies() if topic in sub.source_topics)
