"""Dynamic sinks: the checks a topic a topic name extractor chose goes through before a record is sent to it.

A dynamic sink (``KStream.to(extractor)``, ``Topology.add_sink(name, extractor, ...)``; Kafka Streams'
``TopicNameExtractor``) has no fixed topic, so nothing can be checked at start-up; the task checks each record's
topic before sending (``StreamTask._dynamic_sink``), in this order:

1. the extractor itself: an exception there is user code failing, a processing error
   (``processing.exception.handler``);
2. the name (:func:`topic_name_problem`): Kafka's rules for topic names;
3. the application's own topics (:func:`reserved_topics`): a dynamic sink writes outputs only, never a topic the
   application reads (its inputs, global tables) or owns (changelogs, repartition, stream-time, dead-letter,
   metadata and epoch topics). So a topic a dynamic sink writes is never one the platform's co-partition groups,
   scaling, batch plans or resets reason about, and none of them needs to know the extractor's topics;
4. the cluster's metadata (``RecordCollector.topic_exists``): Kafka Streams documents that the topic must exist
   and that it never creates it, but a producer sending to a missing topic makes a broker with
   ``auto.create.topics.enable`` (Kafka's default) create it with the broker's defaults. Brook asks for the
   cluster's topic list first (never metadata naming the topic: that request, too, may auto-create it), so a
   missing topic is refused before anything is produced.

Steps 2-4 fail as production errors (``production.exception.handler``: fail, skip, or dead-letter), whose message
names the sink, the topic, the record's key and its input record (topic, partition, offset, task).
"""

from __future__ import annotations

import re

from streaming.naming import (
    dead_letter_topic,
    epoch_topic,
    metadata_topic,
    replayed_dead_letters_topic,
)
from streaming.runtime.stream_time import stream_time_topics
from streaming.topology.topology import Topology

_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]+")
#: Kafka's longest topic name (``Topic.MAX_NAME_LENGTH``).
MAX_TOPIC_NAME_LENGTH = 249


def topic_name_problem(name: object) -> str | None:
    """Why ``name`` is not a valid Kafka topic name (Kafka's ``Topic.validate``), or None if it is one."""
    if not isinstance(name, str):
        return f"a topic name must be a str, got {type(name).__name__}"
    if not name:
        return "a topic name cannot be empty"
    if name in (".", ".."):
        return f"a topic cannot be named {name!r}"
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"a topic name has at most {MAX_TOPIC_NAME_LENGTH} characters, this one {len(name)}"
    if _TOPIC_NAME.fullmatch(name) is None:
        return "a topic name has only ASCII letters, digits, '.', '_' and '-'"
    return None


def reserved_topics(topology: Topology, application_id: str) -> dict[str, str]:
    """The topics a dynamic sink of ``topology`` (bound to ``application_id``) may not write, each with what it is
    to the application. Physical and logical names both (an extractor names logical topics, as topologies do)."""
    generations = topology.generations
    reserved: dict[str, str] = {}

    def add(topic: str, role: str) -> None:
        reserved.setdefault(topic, role)
        reserved.setdefault(generations.logical(topic), role)

    for topic in topology.internal_topics:
        add(topic, "an internal topic of the application")
    for topic in topology.source_topics:
        add(topic, "an input of the application")
    for store in topology.global_stores.values():
        add(store.topic, "an input of the application (a global table's topic)")
    for store, builder in topology.store_builders.items():
        if builder.logging_enabled:
            add(generations.changelog(application_id, store), f"the changelog of store {store!r}")
    for topic in stream_time_topics(topology, application_id).values():
        add(topic, "a stream-time topic of the application")
    for topic in (dead_letter_topic(application_id), replayed_dead_letters_topic(application_id),
                  metadata_topic(application_id), epoch_topic(application_id)):
        add(topic, "a topic the application owns")
    return reserved
