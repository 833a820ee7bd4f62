"""``Topology.describe()``: the same text Kafka Streams prints, and the same structure to inspect."""

from __future__ import annotations

from dataclasses import dataclass

from streaming.topology.nodes import (
    GlobalStoreDef,
    NodeDef,
    ProcessorNodeDef,
    SinkNodeDef,
    SourceNodeDef,
    extractor_name,
)


@dataclass(frozen=True)
class SubtopologyDescription:
    id: int
    nodes: tuple[NodeDef, ...]

    def __str__(self) -> str:
        lines = [f"   Sub-topology: {self.id}"]
        for node in self.nodes:
            if isinstance(node, SourceNodeDef):
                lines.append(f"    Source: {node.name} (topics: [{', '.join(node.topics)}])")
            elif isinstance(node, SinkNodeDef):
                if node.topic_extractor is not None:  # as Kafka Streams prints a TopicNameExtractor
                    lines.append(f"    Sink: {node.name} (extractor class: {extractor_name(node.topic_extractor)})")
                else:
                    lines.append(f"    Sink: {node.name} (topic: {node.topic})")
            elif isinstance(node, ProcessorNodeDef):
                lines.append(f"    Processor: {node.name} (stores: [{', '.join(node.stores)}])")
            if node.children:
                lines.append(f"      --> {', '.join(node.children)}")
            if node.parents:
                lines.append(f"      <-- {', '.join(node.parents)}")
        return "\n".join(lines)


@dataclass(frozen=True)
class GlobalStoreDescription:
    """A global store, printed as Kafka Streams does: a sub-topology that generates no tasks."""

    id: int
    store: GlobalStoreDef

    def __str__(self) -> str:
        store = self.store
        return "\n".join([
            f"   Sub-topology: {self.id} for global store (will not generate tasks)",
            f"    Source: {store.source_name} (topics: [{store.topic}])",
            f"      --> {store.processor_name}",
            f"    Processor: {store.processor_name} (stores: [{store.store_builder.name}])",
            f"      <-- {store.source_name}"])


@dataclass(frozen=True)
class TopologyDescription:
    subtopologies: tuple[SubtopologyDescription, ...]
    global_stores: tuple[GlobalStoreDescription, ...] = ()

    def __str__(self) -> str:
        parts = [*(str(s) for s in self.subtopologies), *(str(g) for g in self.global_stores)]
        return "\n".join(["Topologies:", *parts]) + "\n"
