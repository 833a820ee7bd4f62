"""Sinks that write outside Kafka (``pip install brook[sinks]``): :class:`DatabaseSink` upserts into MySQL/MariaDB,
PostgreSQL or SQLite at each commit (see :mod:`streaming.sinks.database`)."""

from streaming.sinks.database import DatabaseSink

__all__ = ["DatabaseSink"]
