"""The DSL: StreamsBuilder, KStream and the split/branch helper."""

from streaming.dsl.builder import StreamsBuilder
from streaming.dsl.kstream import BranchedKStream, KStream

__all__ = ["BranchedKStream", "KStream", "StreamsBuilder"]
