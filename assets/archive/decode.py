"""Kafka records (raw key and value bytes) decoded into a topic's archive columns, batch by batch.

Keys and values decode exactly as the apps' serdes write them (``streaming.serdes``: String is
UTF-8, Long and Integer big-endian, Double IEEE 754, Json through orjson). A JSON value with
declared fields becomes one column per field, typed as declared (``json`` fields as JSON text); its
undeclared fields go to ``extra_fields`` (name -> JSON text), so nothing the producer wrote is lost.
A null value (a tombstone) is a row with null value columns.

A record that cannot be decoded (bad bytes, a value that is not a JSON object, a field of the wrong
type) is not dropped: its row carries the reason in ``_error`` and the raw bytes in ``_raw_key`` /
``_raw_value``, and the archive writes it under ``_undecodable/`` instead of with the day's records.

Every row, decodable or not, also carries the record as Kafka holds it — key and value bytes and headers
(``_record_key``, ``_record_value``, ``_record_headers``) — which the archive writes under ``_raw/``: what a
replay of the topology needs (``assets/reprocess``).

:func:`decode_batches` works on Arrow record batches with the ``brook-kafka`` source's columns, so it
runs inside Spark's ``mapInArrow`` as well as on its own.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson
import pyarrow as pa

from assets.archive.schema import arrow_schema
from assets.platform_spec import ARCHIVE_METADATA_COLUMNS, EXTRA_FIELDS_COLUMN, FieldType, RecordFormat, TopicSpec

__all__ = ["ERROR_COLUMN", "HEADERS_TYPE", "RAW_KEY_COLUMN", "RAW_VALUE_COLUMN", "RECORD_HEADERS_COLUMN",
           "RECORD_KEY_COLUMN", "RECORD_VALUE_COLUMN", "DecodeError", "decode_batches", "decoded_schema"]

ERROR_COLUMN = "_error"
RAW_KEY_COLUMN = "_raw_key"
RAW_VALUE_COLUMN = "_raw_value"
RECORD_KEY_COLUMN = "_record_key"
RECORD_VALUE_COLUMN = "_record_value"
RECORD_HEADERS_COLUMN = "_record_headers"
#: Kafka headers as the ``brook-kafka`` source and Spark's Kafka source give them.
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


class DecodeError(ValueError):
    """A key, value or field that does not match the topic's declared format."""


def _struct_decoder(fmt: str, name: str) -> Callable[[bytes], Any]:
    packer = struct.Struct(fmt)

    def decode(data: bytes) -> Any:
        if len(data) != packer.size:
            raise DecodeError(f"{name} needs {packer.size} bytes, got {len(data)}")
        return packer.unpack(data)[0]

    return decode


def _utf8(data: bytes) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise DecodeError(f"not UTF-8: {exc.reason} at byte {exc.start}") from None


def _json_text(data: bytes) -> str:
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"not JSON: {exc}") from None
    return _utf8(data)


_SCALAR_DECODERS: dict[RecordFormat, Callable[[bytes], Any]] = {
    "string": _utf8,
    "long": _struct_decoder(">q", "long"),
    "integer": _struct_decoder(">i", "integer"),
    "double": _struct_decoder(">d", "double"),
    "json": _json_text,
    "bytes": bytes,
}


def _field_value(kind: FieldType, name: str, value: Any) -> Any:
    """A JSON field's value as its declared type (JSON text for ``json``)."""
    if value is None:
        return None
    if kind == "json":
        return orjson.dumps(value).decode()
    ok = {
        "string": isinstance(value, str),
        "long": isinstance(value, int) and not isinstance(value, bool),
        "double": isinstance(value, (int, float)) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
    }[kind]
    if not ok:
        raise DecodeError(f"field {name!r} should be {kind}, got {type(value).__name__} {value!r:.40}")
    if kind == "long" and not -(2**63) <= value < 2**63:
        raise DecodeError(f"field {name!r} {value} does not fit a long")
    return float(value) if kind == "double" else value


def decoded_schema(topic: TopicSpec) -> pa.Schema:
    """The archive's columns plus ``_error``, ``_raw_key`` and ``_raw_value`` (set for undecodable records), and the
    record's key and value bytes and headers (set for every record)."""
    archive = arrow_schema(topic)
    relaxed = [field.with_nullable(True) for field in archive]  # an undecodable row has nulls anywhere
    return pa.schema([*relaxed, pa.field(ERROR_COLUMN, pa.string()), pa.field(RAW_KEY_COLUMN, pa.binary()),
                      pa.field(RAW_VALUE_COLUMN, pa.binary()), pa.field(RECORD_KEY_COLUMN, pa.binary()),
                      pa.field(RECORD_VALUE_COLUMN, pa.binary()), pa.field(RECORD_HEADERS_COLUMN, HEADERS_TYPE)])


class _Columns:
    """Python lists of the decoded columns for one batch."""

    def __init__(self, topic: TopicSpec) -> None:
        self.topic = topic
        self.value_columns = (list(topic.fields) + [EXTRA_FIELDS_COLUMN]) if topic.fields else ["value"]
        self.data: dict[str, list[Any]] = {name: [] for name in ["key", *self.value_columns, ERROR_COLUMN,
                                                                    RAW_KEY_COLUMN, RAW_VALUE_COLUMN]}

    def _decode_value(self, value: bytes | None) -> dict[str, Any]:
        if value is None:
            return dict.fromkeys(self.value_columns)
        if not self.topic.fields:
            return {"value": _SCALAR_DECODERS[self.topic.value](value)}
        try:
            document = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise DecodeError(f"not JSON: {exc}") from None
        if not isinstance(document, dict):
            raise DecodeError(f"not a JSON object but {type(document).__name__}")
        decoded = {name: _field_value(kind, name, document.get(name)) for name, kind in self.topic.fields.items()}
        extra = [(name, orjson.dumps(v).decode()) for name, v in document.items() if name not in self.topic.fields]
        decoded[EXTRA_FIELDS_COLUMN] = extra or None
        return decoded

    def add(self, key: bytes | None, value: bytes | None) -> None:
        try:
            where = "key"
            decoded_key = None if key is None else _SCALAR_DECODERS[self.topic.key](key)
            where = "value"
            decoded = self._decode_value(value)
        except DecodeError as exc:
            for name in ["key", *self.value_columns]:
                self.data[name].append(None)
            self.data[ERROR_COLUMN].append(f"{where}: {exc}")
            self.data[RAW_KEY_COLUMN].append(key)
            self.data[RAW_VALUE_COLUMN].append(value)
            return
        self.data["key"].append(decoded_key)
        for name in self.value_columns:
            self.data[name].append(decoded[name])
        self.data[ERROR_COLUMN].append(None)
        self.data[RAW_KEY_COLUMN].append(None)
        self.data[RAW_VALUE_COLUMN].append(None)


def decode_batch(batch: pa.RecordBatch, topic: TopicSpec, schema: pa.Schema) -> pa.RecordBatch:
    """One batch of ``brook-kafka`` rows (key, value, topic, partition, offset, timestamp, headers if read) decoded."""
    columns = _Columns(topic)
    for key, value in zip(batch.column("key").to_pylist(), batch.column("value").to_pylist(), strict=True):
        columns.add(key, value)
    as_read = {RECORD_KEY_COLUMN: batch.column("key"), RECORD_VALUE_COLUMN: batch.column("value"),
               RECORD_HEADERS_COLUMN: batch.column("headers") if "headers" in batch.schema.names
               else pa.nulls(batch.num_rows, HEADERS_TYPE)}
    arrays = []
    for field in schema:
        if field.name in ARCHIVE_METADATA_COLUMNS:
            arrays.append(batch.column(field.name).cast(field.type))
        elif field.name in as_read:
            arrays.append(as_read[field.name].cast(field.type))
        else:
            arrays.append(pa.array(columns.data[field.name], type=field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def decode_batches(batches: Iterable[pa.RecordBatch], topic: TopicSpec) -> Iterator[pa.RecordBatch]:
    """Decode each batch (the function given to Spark's ``mapInArrow``, with ``topic`` bound)."""
    schema = decoded_schema(topic)
    for batch in batches:
        yield decode_batch(batch, topic, schema)
