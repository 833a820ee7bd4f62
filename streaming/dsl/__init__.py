"""The DSL: StreamsBuilder, KStream, KTable, grouped streams and tables, Materialized."""

from streaming.dsl.builder import StreamsBuilder
from streaming.dsl.change import Change
from streaming.dsl.kgrouped import KGroupedStream, KGroupedTable
from streaming.dsl.kstream import BranchedKStream, KStream
from streaming.dsl.ktable import GlobalKTable, KTable
from streaming.dsl.materialized import Materialized

__all__ = ["BranchedKStream", "Change", "GlobalKTable", "KGroupedStream", "KGroupedTable", "KStream", "KTable",
           "Materialized", "StreamsBuilder"]
