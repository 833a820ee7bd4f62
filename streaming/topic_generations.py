"""Topic generations: which physical topic carries each logical topic now (partition scaling, issue 18).

Topologies, asset keys and ``platform.yaml`` keep logical names: ``orders``, and the internal topics as
:mod:`streaming.naming` builds them (``<application.id>-<store>-changelog``, ``<application.id>-<name>-repartition``,
``<application.id>-<subtopology>-stream-time``, a foreign-key join's subscription topics). Scaling a co-partition
group by migration writes a new generation of each of its topics with the new partition count
(:func:`streaming.naming.generation_name`: ``orders.v2``, ``...-changelog.v2``), and the platform spec then maps
each logical topic it moved to its generation; a topic the map does not name is at generation 1, its logical
name. The map is explicit: the scaling plan names every topic of the group it moved, internal ones included.

The runtime resolves every key-partitioned topic it reads or writes through one :class:`TopicGenerations` (config
key ``topic.generations``): sources, sinks, repartition, foreign-key and global-table topics when the topology is
bound (:meth:`streaming.topology.topology.Topology.bind`), changelogs and stream-time topics where they are named
(:meth:`TopicGenerations.changelog`, :meth:`TopicGenerations.stream_time`). All of it happens once, when tasks and
topics are set up, never per record. The application's ``-metadata``, ``-epoch``, ``-dlq`` and ``-dlq-replayed``
topics are not partitioned by a record key: they have no generations, and naming one is an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streaming.naming import (
    changelog_topic,
    dead_letter_topic,
    epoch_topic,
    generation_name,
    is_legal_name,
    logical_of,
    metadata_topic,
    replayed_dead_letters_topic,
    stream_time_topic,
)


def check_generations(value: Any) -> dict[str, int]:
    """``value`` as a ``{logical topic: generation}`` map; :class:`ValueError` naming a bad entry (:class:`TypeError`
    if it is no map).

    Keys are logical topic names (never a ``.v<n>`` physical name); generations are integers >= 1."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"must map logical topics to generations, e.g. {{'orders': 2}}, got {type(value).__name__}")
    result: dict[str, int] = {}
    for topic, generation in value.items():
        if not isinstance(topic, str) or not is_legal_name(topic):
            raise ValueError(f"topic {topic!r} is not a legal topic name")
        if logical_of(topic)[1] != 1:
            raise ValueError(f"topic {topic!r} is a physical generation's name; name the logical topic "
                             f"{logical_of(topic)[0]!r}")
        generation_name(topic, generation)  # raises ValueError naming the topic for a bad generation
        result[topic] = generation
    return result


class TopicGenerations:
    """The resolver from logical to physical topic names of one application (see the module docstring).

    ``generations``: ``{logical topic: generation}``; absent topics (and an absent map) are at generation 1.
    """

    __slots__ = ("_generations", "_logical")

    def __init__(self, generations: Mapping[str, int] | None = None) -> None:
        checked = check_generations(generations)
        self._generations = {topic: n for topic, n in checked.items() if n != 1}
        self._logical = {generation_name(topic, n): topic for topic, n in self._generations.items()}

    @property
    def generations(self) -> dict[str, int]:
        """The logical topics not at generation 1, with their generation."""
        return dict(self._generations)

    def physical(self, logical: str) -> str:
        """The physical topic that carries ``logical`` now (``logical`` itself at generation 1)."""
        generation = self._generations.get(logical)
        return logical if generation is None else generation_name(logical, generation)

    def logical(self, physical: str) -> str:
        """The logical topic ``physical`` carries (from this map, so a user topic named ``x.v2`` at generation 1
        stays itself)."""
        return self._logical.get(physical, physical)

    def label(self, physical: str) -> str:
        """``physical`` for messages: ``orders.v2 (generation 2 of orders)``, or the name alone at generation 1."""
        logical = self.logical(physical)
        return physical if logical == physical else f"{physical} (generation {self._generations[logical]} of {logical})"

    def changelog(self, application_id: str, store: str) -> str:
        """The physical changelog of ``store``."""
        return self.physical(changelog_topic(application_id, store))

    def stream_time(self, application_id: str, subtopology: int) -> str:
        """The physical stream-time topic of sub-topology ``subtopology``."""
        return self.physical(stream_time_topic(application_id, subtopology))

    def check_application(self, application_id: str, topics: set[str] | None = None) -> None:
        """Raise :class:`ValueError` (one line, naming the application and the topic) if the map names a topic
        that has no generations (``<application.id>-metadata``, ``-epoch``, ``-dlq``, ``-dlq-replayed``), or,
        given the application's logical ``topics``, one that is not among them (a typo would silently do nothing)."""
        unpartitioned = {metadata_topic(application_id), epoch_topic(application_id),
                         dead_letter_topic(application_id), replayed_dead_letters_topic(application_id)}
        for topic in self._generations:
            if topic in unpartitioned:
                raise ValueError(f"application {application_id!r}: topic {topic!r} has no generations (it is not "
                                 f"partitioned by a record key); remove it from the topic generations")
            if topics is not None and topic not in topics:
                raise ValueError(f"application {application_id!r}: topic generations name {topic!r}, which is "
                                 f"not a topic of the application (known: {', '.join(sorted(topics))})")

    def describe(self) -> list[str]:
        """One ``logical -> physical`` line per topic not at generation 1, for the start-up log."""
        return [f"{topic} -> {self.physical(topic)}" for topic in sorted(self._generations)]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TopicGenerations) and other._generations == self._generations

    def __hash__(self) -> int:
        return hash(frozenset(self._generations.items()))

    def __repr__(self) -> str:
        return f"TopicGenerations({self._generations!r})"
