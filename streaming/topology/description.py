"""``Topology.describe()``: the same text Kafka Streams prints, and the same structure to inspect."""

from __future__ import annotations

from dataclasses import dataclass

from streaming.topology.nodes import NodeDef, ProcessorNodeDef, SinkNodeDef, SourceNodeDef


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
                lines.append(f"    Sink: {node.name} (topic: {node.topic})")
            elif isinstance(node, ProcessorNodeDef):
                lines.append(f"    Processor: {node.name} (stores: [{', '.join(node.stores)}])")
            if node.children:
                lines.append(f"      --> {', '.join(node.children)}")
            if node.parents:
                lines.append(f"      <-- {', '.join(node.parents)}")
        return "\n".join(lines)


@dataclass(frozen=True)
class TopologyDescription:
    subtopologies: tuple[SubtopologyDescription, ...]

    def __str__(self) -> str:
        return "\n".join(["Topologies:", *(str(s) for s in self.subtopologies)]) + "\n"
