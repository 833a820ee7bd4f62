"""Node definitions of a topology: what to build in every task, not the running instances."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from streaming.serdes import Serde
from streaming.timestamps import TimestampExtractor

# The internal calling convention between nodes: (key, value, timestamp, headers) -> None.
Emit = Callable[[Any, Any, int, Any], None]
# StreamPartitioner: (topic, key, value, num_partitions) -> partition or None (default partitioner).
Partitioner = Callable[[str, Any, Any, int], "int | None"]


class Operator(Protocol):
    """A DSL operation compiled into one plain function per task: no Processor object on the hot path.

    ``children`` maps each child node's name to its function, in the order the children were added.
    """

    def compile(self, children: dict[str, Emit], context: Any) -> Emit: ...

    def describe(self) -> str: ...


@dataclass
class NodeDef:
    name: str
    parents: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)


@dataclass
class SourceNodeDef(NodeDef):
    topics: list[str] = field(default_factory=list)
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    timestamp_extractor: TimestampExtractor | None = None
    offset_reset: str | None = None  # "earliest" | "latest" | None (the consumer's auto.offset.reset)


@dataclass
class ProcessorNodeDef(NodeDef):
    supplier: Callable[[], Any] | None = None  # Processor API: a new Processor per task
    operator: Operator | None = None  # DSL: compiled to a function
    stores: list[str] = field(default_factory=list)


@dataclass
class GlobalStoreDef:
    """A global store: a full copy of ``topic`` (every partition) on every instance, updated only from it.

    Not part of any sub-topology (no tasks); ``source_name`` and ``processor_name`` are the names it
    shows in ``describe()``. Records are applied as they are (key and value bytes), a ``None`` value
    deleting the key, so the store's serdes must be the ones the topic is written with.
    """

    store_builder: Any
    topic: str
    source_name: str
    processor_name: str


@dataclass
class SinkNodeDef(NodeDef):
    """A sink: to the fixed ``topic``, or with a ``topic_extractor`` (a dynamic sink, ``topic`` ""), to the topic
    ``topic_extractor(key, value, record_context)`` names for each record (Kafka Streams' ``TopicNameExtractor``)."""

    topic: str = ""
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    partitioner: Partitioner | None = None
    topic_extractor: Callable[[Any, Any, Any], str] | None = None

    @property
    def is_dynamic(self) -> bool:
        """Whether the topic is chosen per record (no fixed topic: the topology's ``sink_topics`` leave it out)."""
        return self.topic_extractor is not None


def extractor_name(extractor: Any) -> str:
    """How ``describe()`` names a topic name extractor: ``module.qualname`` of a function (or of a callable
    object's class), or the object's own ``str()`` when its class defines one (as Kafka Streams prints the
    extractor's ``toString()``)."""
    cls = type(extractor)
    if not hasattr(extractor, "__qualname__") and (cls.__str__ is not object.__str__
                                                   or cls.__repr__ is not object.__repr__):
        return str(extractor)
    named = extractor if hasattr(extractor, "__qualname__") else cls
    return f"{getattr(named, '__module__', '?')}.{named.__qualname__}"
