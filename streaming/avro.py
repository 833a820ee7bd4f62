"""``Serdes.Avro(schema)``: schemaless Avro (the bare binary encoding, no header) with an explicit schema.

Needs fastavro (``pip install brook[avro]``). Every application reading the topic must know the schema the
records were written with: this serde carries it, rather than a Schema Registry's id in each record (for that, see
:mod:`streaming.schema_registry`).
"""

from __future__ import annotations

import datetime
import decimal
import io
import json
import uuid
from typing import Any

from streaming.serdes import Serde, SerdeError
from streaming.typed_json import converter, to_builtins, type_name

# Types fastavro writes as themselves (logical types), kept when a dataclass becomes a dict.
AVRO_NATIVE_TYPES = (datetime.datetime, datetime.date, datetime.time, decimal.Decimal, uuid.UUID, bytes)


def _fastavro() -> Any:
    try:
        import fastavro
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("Serdes.Avro needs fastavro: pip install 'brook[avro]'") from exc
    return fastavro


def _parse(schema: Any) -> Any:
    if isinstance(schema, (str, bytes)):
        schema = json.loads(schema)
    return _fastavro().parse_schema(schema)


class AvroSerde(Serde[Any]):
    """Avro records with ``schema`` (a dict, or its JSON text), as dicts or as ``record_type`` objects.

    - ``schema``: the application's schema. Records are written with it, and read into it.
    - ``writer_schema``: the schema the records on the topic were written with, when it is older (or newer) than
      ``schema``: reading resolves them to ``schema`` by Avro's rules (a field added with a default gets the
      default, a removed field is skipped, an ``int`` widens to ``long``). Without it, the topic must hold records
      written with ``schema``. (A topic whose records were written with several schemas needs the Schema Registry.)
    - ``record_type``: a dataclass, ``msgspec.Struct`` or pydantic model to read records into and write from
      (nested records as nested types; logical types such as ``timestamp-millis`` as ``datetime``); default dicts.

    Reading fails with :class:`~streaming.serdes.SerdeError` — then a ``DeserializationError`` for the
    deserialization handler — on bytes the writer schema cannot read, on bytes left over after the record (most
    likely the wrong schema), and, with a ``record_type``, on a record that does not fit the type (naming the field).
    Writing a record that does not fit the schema fails naming the field (fastavro's validation).
    """

    def __init__(self, schema: Any, *, writer_schema: Any = None, record_type: Any = None) -> None:
        fastavro = _fastavro()
        self.schema = _parse(schema)
        self.writer_schema = _parse(writer_schema) if writer_schema is not None else self.schema
        self._resolve = self.schema if writer_schema is not None else None
        self.record_type = record_type
        self._write, self._read = fastavro.schemaless_writer, fastavro.schemaless_reader
        name = type_name(record_type) if record_type is not None else self.schema.get("name", "?")
        self._name = f"Serdes.Avro({name})"
        self._convert = converter(record_type, self._name) if record_type is not None else None

    def serialize(self, obj: Any) -> bytes | None:
        if obj is None:
            return None
        record = to_builtins(obj, AVRO_NATIVE_TYPES) if self.record_type is not None else obj
        buffer = io.BytesIO()
        try:
            self._write(buffer, self.schema, record)
        except Exception as exc:
            raise SerdeError(f"{self._name}: cannot write {type(obj).__qualname__}: {self._why(record, exc)}") from exc
        return buffer.getvalue()

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        buffer = io.BytesIO(data)
        try:
            record = self._read(buffer, self.writer_schema, self._resolve)
        except Exception as exc:
            raise SerdeError(f"{self._name}: cannot read {len(data)} bytes: {exc!r}") from exc
        if buffer.tell() != len(data):
            raise SerdeError(f"{self._name}: {len(data) - buffer.tell()} bytes left after the record ({len(data)} "
                             "bytes): written with another schema?")
        return self._convert(record) if self._convert is not None else record

    def _why(self, record: Any, exc: Exception) -> str:
        """fastavro's validation names the field a write failed on; its writer alone often does not."""
        from fastavro.validation import ValidationError, validate

        try:
            validate(record, self.schema, raise_errors=True)
        except ValidationError as invalid:
            return "; ".join(str(error) for error in invalid.errors) or str(invalid)
        except Exception:  # noqa: BLE001 - the writer's own error says enough
            return repr(exc)
        return repr(exc)

    def __repr__(self) -> str:
        return self._name
