"""Topologies: the graph of nodes the runtime instantiates once per task."""

from streaming.topology.description import SubtopologyDescription, TopologyDescription
from streaming.topology.topology import Subtopology, Topology

__all__ = ["Subtopology", "SubtopologyDescription", "Topology", "TopologyDescription"]
