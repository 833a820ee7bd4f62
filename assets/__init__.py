"""Brook's Dagster code location: operates the stream workers' data (``assets.definitions.defs``)."""
