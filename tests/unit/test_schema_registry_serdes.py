"""The Schema Registry serdes (Avro, Protobuf, JSON Schema) against confluent-kafka's in-memory mock registry
(``mock://``): no registry server can be run here, so HTTP, auth and the server's compatibility checks are untested."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message_factory import GetMessageClass

from streaming import Serdes, StreamsBuilder
from streaming.naming import dead_letter_topic
from streaming.runtime.dead_letters import error_headers
from streaming.schema_registry import registry_client
from streaming.serdes import SerdeError
from streaming.testing import TopologyTestDriver


@dataclasses.dataclass
class Payment:
    payment_id: str
    amount: int
    at: dt.datetime


AVRO_V1 = {"type": "record", "name": "Payment", "fields": [
    {"name": "payment_id", "type": "string"}, {"name": "amount", "type": "int"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
AVRO_V2 = {**AVRO_V1, "fields": [*AVRO_V1["fields"], {"name": "method", "type": "string", "default": "card"}]}
JSON_SCHEMA = {"type": "object", "required": ["payment_id", "amount", "at"], "properties": {
    "payment_id": {"type": "string"}, "amount": {"type": "integer"}, "at": {"type": "string"}}}
AT = dt.datetime(2026, 11, 26, 8, 0, tzinfo=dt.UTC)


def registry() -> dict[str, str]:
    return {"url": f"mock://{uuid.uuid4().hex}"}  # one fresh mock store per test


def test_equal_configs_share_one_client() -> None:
    config = registry()
    assert registry_client(config) is registry_client(dict(config))
    assert registry_client(config) is not registry_client(registry())


def test_avro_round_trip_in_confluent_wire_format() -> None:
    serde = Serdes.SchemaRegistryAvro(registry(), AVRO_V1, topic="payments", record_type=Payment)
    data = serde.serialize(Payment("p1", 5, AT))
    assert data[0] == 0 and int.from_bytes(data[1:5], "big") >= 1  # magic byte, schema id
    assert serde.deserialize(data) == Payment("p1", 5, AT)
    assert serde.serialize(None) is None and serde.deserialize(None) is None
    assert repr(serde) == "Serdes.SchemaRegistryAvro(Payment)"


def test_avro_reader_schema_resolves_records_of_an_older_registered_schema() -> None:
    config = registry()
    old = Serdes.SchemaRegistryAvro(config, AVRO_V1, topic="payments")
    new = Serdes.SchemaRegistryAvro(config, AVRO_V2, topic="payments")
    read = new.deserialize(old.serialize({"payment_id": "p1", "amount": 5, "at": AT}))
    assert read == {"payment_id": "p1", "amount": 5, "at": AT, "method": "card"}
    assert registry_client(config).get_subjects() == ["payments-value"]


def test_json_schema_round_trip_and_validation() -> None:
    config = registry()
    typed = Serdes.SchemaRegistryJson(config, JSON_SCHEMA, topic="payments", record_type=Payment)
    assert typed.deserialize(typed.serialize(Payment("p1", 5, AT))) == Payment("p1", 5, AT)
    as_dicts = Serdes.SchemaRegistryJson(config, JSON_SCHEMA, topic="payments", is_key=True)
    with pytest.raises(Exception, match="'ten' is not of type 'integer'"):
        as_dicts.serialize({"payment_id": "p1", "amount": "ten", "at": "now"})
    assert "payments-key" in registry_client(config).get_subjects()


def payment_message() -> type:
    """A Protobuf message class built at run time (no protoc here): ``brooktest.Payment {payment_id, amount}``."""
    proto = descriptor_pb2.FileDescriptorProto(name="brooktest/payment.proto", package="brooktest", syntax="proto3")
    message = proto.message_type.add(name="Payment")
    types = descriptor_pb2.FieldDescriptorProto
    message.field.add(name="payment_id", number=1, type=types.TYPE_STRING, label=types.LABEL_OPTIONAL)
    message.field.add(name="amount", number=2, type=types.TYPE_INT64, label=types.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return GetMessageClass(pool.FindMessageTypeByName("brooktest.Payment"))


def test_protobuf_round_trip() -> None:
    message_type = payment_message()
    serde = Serdes.SchemaRegistryProtobuf(registry(), message_type, topic="payments")
    value = message_type(payment_id="p1", amount=7)
    data = serde.serialize(value)
    assert data[0] == 0 and serde.deserialize(data) == value
    assert repr(serde) == "Serdes.SchemaRegistryProtobuf(Payment)"


def test_registry_serdes_through_a_topology_with_a_bad_record_dead_lettered() -> None:
    config, app = registry(), "registry-app"
    value_serde = Serdes.SchemaRegistryAvro(config, AVRO_V1, topic="payments", record_type=Payment)
    out_serde = Serdes.SchemaRegistryAvro(config, AVRO_V1, topic="doubled", record_type=Payment)
    builder = StreamsBuilder()
    (builder.stream("payments", key_serde=Serdes.String(), value_serde=value_serde)
     .map_values(lambda p: dataclasses.replace(p, amount=p.amount * 2)).to("doubled", value_serde=out_serde))
    settings = {"application.id": app, "default.deserialization.exception.handler": "dead_letter"}
    with TopologyTestDriver(builder.build(), settings) as driver:
        driver.create_input_topic("payments", Serdes.String(), value_serde).pipe_input("k", Payment("p1", 5, AT))
        driver.pipe_raw("payments", b"k", b"not avro", 2_000)
        out = driver.create_output_topic("doubled", Serdes.String(), out_serde)
        assert out.read_values_to_list() == [Payment("p1", 10, AT)]
        [letter] = driver.create_output_topic(dead_letter_topic(app), Serdes.Bytes(), Serdes.Bytes()) \
            .read_records_to_list()
        assert letter.value == b"not avro" and error_headers(letter.headers)["stage"] == "deserialization"


def test_a_record_that_does_not_fit_the_type_names_the_field() -> None:
    config = registry()
    writer = Serdes.SchemaRegistryJson(config, {"type": "object"}, topic="payments")
    reader = Serdes.SchemaRegistryJson(config, {"type": "object"}, topic="payments", record_type=Payment)
    with pytest.raises(SerdeError) as error:
        reader.deserialize(writer.serialize({"payment_id": "p1", "amount": "ten", "at": "2026-01-01T00:00:00Z"}))
    assert error.value.field == "amount"
