"""The Processor API: write a processor, wire it into a Topology, read and write state stores."""

from streaming.processor.api import (
    Cancellable,
    Processor,
    ProcessorContext,
    ProcessorSupplier,
    PunctuationType,
    Record,
)

__all__ = ["Cancellable", "Processor", "ProcessorContext", "ProcessorSupplier", "PunctuationType", "Record"]
