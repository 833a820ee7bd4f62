"""Prometheus metrics of a KafkaStreams instance: counters the runtime keeps, read at scrape time."""
