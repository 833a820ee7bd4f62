"""The Processor API: write a processor, wire it into a Topology, read and write state stores."""

from streaming.processor.api import (
    Cancellable,
    ObservedStreamTime,
    Processor,
    ProcessorContext,
    ProcessorSupplier,
    PunctuationType,
    Record,
    RecordContext,
    TopicNameExtractor,
)

__all__ = ["Cancellable", "ObservedStreamTime", "Processor", "ProcessorContext", "ProcessorSupplier", "PunctuationType", "Record",
           "RecordContext", "TopicNameExtractor"]
