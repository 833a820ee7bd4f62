"""A counting app for fault tests: counts records per key in a RocksDB store with a changelog and emits
every update with the input record's partition and offset, so a test can tell re-processed records.

Topics come from the environment: ``COUNT_INPUT``, ``COUNT_OUTPUT``; ``COUNT_SLOW_MS`` slows each record.
A record whose value is :data:`POISON` fails processing before it touches the store (what happens next is
``processing.exception.handler``'s choice, e.g. a dead letter).
"""

from __future__ import annotations

import os
import time

from streaming import Serdes, Stores, Topology
from streaming.processor import Processor, ProcessorContext, Record

STORE = "counts"
POISON = "poison"


class PoisonRecordError(ValueError):
    """Raised for a record whose value is :data:`POISON`."""


class CountProcessor(Processor[str, str]):
    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store(STORE)
        self.slow = int(os.environ.get("COUNT_SLOW_MS", "0")) / 1000

    def process(self, record: Record[str, str]) -> None:
        if self.slow:
            time.sleep(self.slow)
        if record.value == POISON:
            raise PoisonRecordError(f"poison record for key {record.key!r}")
        count = (self.store.get(record.key) or 0) + 1
        self.store.put(record.key, count)
        self.context.forward(record.with_value(
            {"count": count, "partition": self.context.partition, "offset": self.context.offset}))


def topology(input_topic: str | None = None, output_topic: str | None = None) -> Topology:
    return (
        Topology()
        .add_source("input", input_topic or os.environ["COUNT_INPUT"], key_serde=Serdes.String(),
                    value_serde=Serdes.String())
        .add_processor("count", CountProcessor, "input")
        .add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store(STORE), Serdes.String(),
                                                        Serdes.Long()), "count")
        .add_sink("output", output_topic or os.environ["COUNT_OUTPUT"], "count", key_serde=Serdes.String(),
                  value_serde=Serdes.Json())
    )
