"""Runtime internals (Kafka Streams' ``processor.internals``). Users import from ``streaming`` instead."""
