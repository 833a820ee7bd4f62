"""Serdes: how keys and values become bytes and back.

``Serdes.String()``, ``Bytes()``, ``Integer()`` (4-byte big-endian), ``Long()`` (8-byte big-endian),
``Double()`` (8-byte IEEE 754) and ``Json()`` (orjson) read and write exactly what Kafka Streams'
built-in serdes do, so topics are shared with JVM applications. ``None`` is always ``None`` both ways
(a tombstone). User serdes subclass :class:`Serde` or come from :meth:`Serdes.from_functions`.

Typed records: ``Serdes.Json(Order)`` reads JSON into a dataclass, ``msgspec.Struct`` or pydantic model
(:mod:`streaming.typed_json`); ``Serdes.Avro(schema)`` writes schemaless Avro with an explicit schema
(:mod:`streaming.avro`, ``pip install brook[avro]``); ``Serdes.SchemaRegistryAvro / SchemaRegistryProtobuf /
SchemaRegistryJson`` use confluent-kafka's Schema Registry serializers (:mod:`streaming.schema_registry`,
``pip install brook[schema-registry]``). A value a serde cannot read raises :class:`SerdeError` (any exception does
the same job), which the runtime turns into a ``DeserializationError`` for the deserialization handler.
"""

from __future__ import annotations

import importlib
import struct
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import orjson

T = TypeVar("T")

_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_DOUBLE = struct.Struct(">d")


class SerdeError(ValueError):
    """A serde cannot read (or write) a value; ``field`` is the path of the field at fault (``items[1].qty``), if
    one is known. The runtime turns it, like any exception of a deserializer, into a ``DeserializationError``."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class Serde(Generic[T]):
    """Serializer and deserializer of one type. Subclasses override both methods.

    The runtime's per-record paths ask :meth:`not_none_serializer` / :meth:`not_none_deserializer` once, when they
    are built, for the function to apply to a value that is not None, and pass None to :meth:`serialize` /
    :meth:`deserialize` themselves. The built-in serdes return a C function there (``orjson.dumps``,
    ``str.encode``), which saves a Python call per record; a subclass that overrides ``serialize`` or
    ``deserialize`` gets its own method."""

    def serialize(self, obj: T | None) -> bytes | None:
        raise NotImplementedError

    def deserialize(self, data: bytes | None) -> T | None:
        raise NotImplementedError

    def not_none_serializer(self) -> Callable[[T], bytes | None]:
        """What serializes a value that is not None: :meth:`serialize`, or the same function without its frame."""
        return self.serialize

    def not_none_deserializer(self) -> Callable[[bytes], T | None]:
        """What deserializes bytes that are not None: :meth:`deserialize`, or the same function without its frame."""
        return self.deserialize

    def _own(self, method: str, base: type[Serde[Any]], direct: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``direct`` unless this serde's class overrides ``base.<method>`` (then the override, bound)."""
        bound = getattr(self, method)
        return direct if getattr(type(self), method) is getattr(base, method) else bound

    def __repr__(self) -> str:
        # Built-ins print as their factory call (``Serdes.Long()``), which resolve_serde reads back.
        name = type(self).__name__
        if type(self).__module__ == __name__ and name.endswith("Serde"):
            return f"Serdes.{name.removesuffix('Serde')}()"
        return f"{type(self).__qualname__}()"


class StringSerde(Serde[str]):
    def serialize(self, obj: str | None) -> bytes | None:
        return None if obj is None else obj.encode()

    def deserialize(self, data: bytes | None) -> str | None:
        return None if data is None else data.decode()

    def not_none_serializer(self) -> Callable[[str], bytes | None]:
        return self._own("serialize", StringSerde, str.encode)

    def not_none_deserializer(self) -> Callable[[bytes], str | None]:
        return self._own("deserialize", StringSerde, bytes.decode)


class BytesSerde(Serde[bytes]):
    def serialize(self, obj: bytes | None) -> bytes | None:
        return obj

    def deserialize(self, data: bytes | None) -> bytes | None:
        return data


class _StructSerde(Serde[Any]):
    _struct: struct.Struct

    def serialize(self, obj: Any) -> bytes | None:
        return None if obj is None else self._struct.pack(obj)

    def not_none_serializer(self) -> Callable[[Any], bytes | None]:
        return self._own("serialize", _StructSerde, self._struct.pack)

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        if len(data) != self._struct.size:
            raise ValueError(f"{type(self).__name__} expects {self._struct.size} bytes, got {len(data)}")
        return self._struct.unpack(data)[0]


class IntegerSerde(_StructSerde):
    _struct = _INT


class LongSerde(_StructSerde):
    _struct = _LONG


class DoubleSerde(_StructSerde):
    _struct = _DOUBLE


class JsonSerde(Serde[Any]):
    """JSON through orjson; ``loads`` accepts any JSON value. ``Serdes.Json(Order)`` (a type) makes a
    :class:`~streaming.typed_json.TypedJsonSerde` instead, reading and writing ``Order`` objects."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is JsonSerde and (args or kwargs):
            from streaming.typed_json import TypedJsonSerde

            return TypedJsonSerde(*args, **kwargs)
        return super().__new__(cls)

    def serialize(self, obj: Any) -> bytes | None:
        return None if obj is None else orjson.dumps(obj)

    def deserialize(self, data: bytes | None) -> Any:
        return None if data is None else orjson.loads(data)

    def not_none_serializer(self) -> Callable[[Any], bytes | None]:
        return self._own("serialize", JsonSerde, orjson.dumps)

    def not_none_deserializer(self) -> Callable[[bytes], Any]:
        return self._own("deserialize", JsonSerde, orjson.loads)


class FunctionSerde(Serde[Any]):
    """A serde made of two plain functions; ``None`` passes through untouched."""

    def __init__(self, serializer: Callable[[Any], bytes], deserializer: Callable[[bytes], Any]) -> None:
        self._ser = serializer
        self._de = deserializer

    def serialize(self, obj: Any) -> bytes | None:
        return None if obj is None else self._ser(obj)

    def deserialize(self, data: bytes | None) -> Any:
        return None if data is None else self._de(data)

    def __repr__(self) -> str:
        return f"Serdes.from_functions({self._ser!r}, {self._de!r})"


class Serdes:
    """Factory of the built-in serdes, named as in Kafka Streams."""

    String = StringSerde
    Bytes = BytesSerde
    Integer = IntegerSerde
    Long = LongSerde
    Double = DoubleSerde
    Json = JsonSerde

    @staticmethod
    def Avro(schema: Any, *, writer_schema: Any = None, record_type: Any = None) -> Serde[Any]:
        """Schemaless Avro with an explicit schema (fastavro; ``pip install brook[avro]``): see
        :class:`streaming.avro.AvroSerde`."""
        from streaming.avro import AvroSerde

        return AvroSerde(schema, writer_schema=writer_schema, record_type=record_type)

    @staticmethod
    def SchemaRegistryAvro(registry: Any, schema: Any = None, *, topic: str, is_key: bool = False,
                           record_type: Any = None, conf: dict[str, Any] | None = None) -> Serde[Any]:
        """Avro in Confluent's wire format through a Schema Registry: see :mod:`streaming.schema_registry`."""
        from streaming.schema_registry import avro_serde

        return avro_serde(registry, schema, topic=topic, is_key=is_key, record_type=record_type, conf=conf)

    @staticmethod
    def SchemaRegistryProtobuf(registry: Any, message_type: Any, *, topic: str, is_key: bool = False,
                               conf: dict[str, Any] | None = None) -> Serde[Any]:
        """Protobuf messages of ``message_type`` through a Schema Registry: see :mod:`streaming.schema_registry`."""
        from streaming.schema_registry import protobuf_serde

        return protobuf_serde(registry, message_type, topic=topic, is_key=is_key, conf=conf)

    @staticmethod
    def SchemaRegistryJson(registry: Any, schema: Any, *, topic: str, is_key: bool = False,
                           record_type: Any = None, conf: dict[str, Any] | None = None) -> Serde[Any]:
        """JSON validated by a JSON Schema from a Schema Registry: see :mod:`streaming.schema_registry`."""
        from streaming.schema_registry import json_serde

        return json_serde(registry, schema, topic=topic, is_key=is_key, record_type=record_type, conf=conf)

    @staticmethod
    def from_functions(serializer: Callable[[Any], bytes], deserializer: Callable[[bytes], Any]) -> Serde[Any]:
        """A serde from a serializer and a deserializer function."""
        return FunctionSerde(serializer, deserializer)


_BUILTIN_NAMES = {"String": StringSerde, "Bytes": BytesSerde, "Integer": IntegerSerde,
                  "Long": LongSerde, "Double": DoubleSerde, "Json": JsonSerde}


def resolve_serde(spec: Any) -> Serde[Any]:
    """A serde from a config value: an instance, a Serde class, a built-in name or ``module:attr``."""
    if isinstance(spec, Serde):
        return spec
    if isinstance(spec, type) and issubclass(spec, Serde):
        return spec()
    if isinstance(spec, str):
        name = spec.removeprefix("Serdes.").removesuffix("()")
        if name in _BUILTIN_NAMES:
            return _BUILTIN_NAMES[name]()
        if ":" in spec:
            module, _, attr = spec.partition(":")
            return resolve_serde(getattr(importlib.import_module(module), attr))
    raise ValueError(
        f"not a serde: {spec!r} (expected a Serde, a built-in name such as 'String' or 'Json', or 'module:attr')")
