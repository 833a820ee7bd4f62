"""A topology with a wall-clock punctuator, which batch reprocessing refuses (tests/e2e/test_reprocess_assets.py)."""

from __future__ import annotations

from streaming import Serdes, Topology
from streaming.processor import Processor, ProcessorContext, PunctuationType, Record


class EmitEverySecond(Processor[str, str]):
    def init(self, context: ProcessorContext) -> None:
        self.context = context
        context.schedule(1_000, PunctuationType.WALL_CLOCK_TIME, self.emit)

    def process(self, record: Record[str, str]) -> None:
        self.last = record

    def emit(self, timestamp: int) -> None:
        self.context.forward(Record("tick", str(timestamp), timestamp))


def topology() -> Topology:
    return (Topology()
            .add_source("words", "words", key_serde=Serdes.String(), value_serde=Serdes.String())
            .add_processor("ticker", EmitEverySecond, "words")
            .add_sink("out", "ticks", "ticker", key_serde=Serdes.String(), value_serde=Serdes.String()))
