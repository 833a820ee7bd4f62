"""Serdes over a Confluent Schema Registry: Avro, Protobuf and JSON Schema in Confluent's wire format.

Thin wrappers of confluent-kafka's own serializers (``confluent_kafka.schema_registry``; ``pip install
brook[schema-registry]``), so the records are byte for byte those of Kafka Streams' ``KafkaAvroSerde`` /
``KafkaProtobufSerde`` / ``KafkaJsonSchemaSerde`` and of confluent-kafka producers: a magic byte, the schema id,
then the payload. Writing registers the schema (or, with ``conf={"auto.register.schemas": False,
"use.latest.version": True}``, uses the subject's latest); reading fetches the writer's schema by its id.

``registry`` is a ``SchemaRegistryClient`` or its config (``{"url": "https://registry:8081",
"basic.auth.user.info": ...}``); serdes given equal configs share one client (and its schema caches). ``topic`` and
``is_key`` name the subject by Confluent's default TopicNameStrategy (``<topic>-value`` / ``<topic>-key``): a
Brook serde is not told the topic it serves, so give the topic this serde writes and reads. ``conf`` goes to the
serializer (``auto.register.schemas``, ``use.latest.version``, ``subject.name.strategy``, ...), and to the
deserializer the keys it knows.

Tested only against the library's in-memory mock (``{"url": "mock://<name>"}``: one store per name here): no
Schema Registry server could be run where Brook was built, so talking to a real one (HTTP, auth, compatibility
checks) is confluent-kafka's code, untested by Brook.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from streaming.serdes import Serde
from streaming.typed_json import converter, to_builtins, type_name

_clients: dict[str, Any] = {}
_clients_lock = threading.Lock()
# The deserializers of confluent-kafka reject the serializer-only keys.
_SERIALIZER_ONLY = {"auto.register.schemas", "normalize.schemas", "use.schema.id"}


def _schema_registry() -> Any:
    try:
        from confluent_kafka import schema_registry
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("the Schema Registry serdes need pip install 'brook[schema-registry]'") from exc
    return schema_registry


def registry_client(registry: Any) -> Any:
    """A ``SchemaRegistryClient``: ``registry`` itself, or one shared by every serde given an equal config."""
    if not isinstance(registry, dict):
        return registry
    key = json.dumps(registry, sort_keys=True, default=repr)
    with _clients_lock:
        if key not in _clients:
            _clients[key] = _schema_registry().SchemaRegistryClient.new_client(dict(registry))
        return _clients[key]


class SchemaRegistrySerde(Serde[Any]):
    """A serializer and a deserializer of ``confluent_kafka.schema_registry`` as a Brook serde."""

    def __init__(self, serializer: Any, deserializer: Any, topic: str, is_key: bool, name: str) -> None:
        from confluent_kafka.serialization import MessageField, SerializationContext

        self.serializer, self.deserializer = serializer, deserializer
        self._context = SerializationContext(topic, MessageField.KEY if is_key else MessageField.VALUE)
        self._name = name

    def serialize(self, obj: Any) -> bytes | None:
        return None if obj is None else self.serializer(obj, self._context)

    def deserialize(self, data: bytes | None) -> Any:
        return None if data is None else self.deserializer(data, self._context)

    def __repr__(self) -> str:
        return self._name


def _split(conf: dict[str, Any] | None) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    if not conf:
        return None, None
    return conf, {key: value for key, value in conf.items() if key not in _SERIALIZER_ONLY} or None


def _schema_text(schema: Any) -> Any:
    return json.dumps(schema) if isinstance(schema, dict) else schema


def _record_hooks(record_type: Any, serde: str, native: tuple[type, ...] | None) -> tuple[Any, Any]:
    """The serializer's ``to_dict`` and the deserializer's ``from_dict`` for ``record_type`` objects (None, None:
    records are dicts); ``native``: the types the serializer takes as they are (:func:`to_builtins`)."""
    if record_type is None:
        return None, None
    convert = converter(record_type, f"{serde}({type_name(record_type)})")

    def to_dict(obj: Any, _context: Any) -> Any:
        return to_builtins(obj, native)

    def from_dict(record: Any, _context: Any) -> Any:
        return convert(record)

    return to_dict, from_dict


def avro_serde(registry: Any, schema: Any = None, *, topic: str, is_key: bool = False, record_type: Any = None,
               conf: dict[str, Any] | None = None) -> SchemaRegistrySerde:
    """``Serdes.SchemaRegistryAvro``: records as dicts, or as ``record_type`` (a dataclass, ``msgspec.Struct`` or
    pydantic model). ``schema`` (dict or JSON text) is the writer's schema and the reader's: records written with
    an older or newer registered schema are resolved to it. Without one the serde can only read (each record as
    written), or write the subject's latest schema with ``conf={"use.latest.version": True,
    "auto.register.schemas": False}``."""
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

    from streaming.avro import AVRO_NATIVE_TYPES

    client = registry_client(registry)
    to_dict, from_dict = _record_hooks(record_type, "Serdes.SchemaRegistryAvro", AVRO_NATIVE_TYPES)
    ser_conf, de_conf = _split(conf)
    text = _schema_text(schema)
    serializer = AvroSerializer(client, text, to_dict=to_dict, conf=ser_conf)
    deserializer = AvroDeserializer(client, text, from_dict=from_dict, conf=de_conf)
    name = type_name(record_type) if record_type is not None else ""
    return SchemaRegistrySerde(serializer, deserializer, topic, is_key, f"Serdes.SchemaRegistryAvro({name})")


def protobuf_serde(registry: Any, message_type: Any, *, topic: str, is_key: bool = False,
                   conf: dict[str, Any] | None = None) -> SchemaRegistrySerde:
    """``Serdes.SchemaRegistryProtobuf``: messages of the generated class ``message_type``."""
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

    client = registry_client(registry)
    ser_conf, de_conf = _split(conf)
    serializer = ProtobufSerializer(message_type, client, conf=ser_conf)
    deserializer = ProtobufDeserializer(message_type, conf=de_conf, schema_registry_client=client)
    name = f"Serdes.SchemaRegistryProtobuf({type_name(message_type)})"
    return SchemaRegistrySerde(serializer, deserializer, topic, is_key, name)


def json_serde(registry: Any, schema: Any, *, topic: str, is_key: bool = False, record_type: Any = None,
               conf: dict[str, Any] | None = None) -> SchemaRegistrySerde:
    """``Serdes.SchemaRegistryJson``: values checked against the JSON Schema ``schema`` (dict or JSON text) both
    ways, as dicts or as ``record_type`` objects."""
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer

    client = registry_client(registry)
    to_dict, from_dict = _record_hooks(record_type, "Serdes.SchemaRegistryJson", None)
    ser_conf, de_conf = _split(conf)
    text = _schema_text(schema)
    serializer = JSONSerializer(text, client, to_dict=to_dict, conf=ser_conf)
    deserializer = JSONDeserializer(text, from_dict=from_dict, schema_registry_client=client, conf=de_conf)
    name = type_name(record_type) if record_type is not None else ""
    return SchemaRegistrySerde(serializer, deserializer, topic, is_key, f"Serdes.SchemaRegistryJson({name})")
