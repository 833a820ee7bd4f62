"""The Arrow schema of a topic's archive, from the columns its spec declares."""

from __future__ import annotations

import pyarrow as pa

from assets.platform_spec import ColumnType, TopicSpec

__all__ = ["arrow_schema", "arrow_type"]

_ARROW_TYPES: dict[ColumnType, pa.DataType] = {
    "string": pa.string(),
    "long": pa.int64(),
    "integer": pa.int32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "json": pa.string(),  # JSON text
    "bytes": pa.binary(),
    "timestamp": pa.timestamp("us", tz="UTC"),  # Spark's TimestampType
    "map": pa.map_(pa.string(), pa.string()),  # extra_fields: field name -> JSON text
}


def arrow_type(column_type: ColumnType) -> pa.DataType:
    """The Arrow type an archive column of ``column_type`` is written with."""
    return _ARROW_TYPES[column_type]


def arrow_schema(topic: TopicSpec) -> pa.Schema:
    """Columns of the topic's archive, in order, all nullable except the record's coordinates."""
    required = {"topic", "partition", "offset", "timestamp"}
    return pa.schema([pa.field(name, arrow_type(kind), nullable=name not in required)
                      for name, kind in topic.columns().items()])
