"""Typed records: ``Serdes.Json(Order)`` for dataclasses and pydantic models, ``Serdes.Avro(schema)`` with fastavro;
round trips, errors that name the field, the dead-letter path, and Avro schema evolution."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import msgspec
import pydantic
import pytest

from streaming import Serdes, StreamsBuilder
from streaming.naming import dead_letter_topic
from streaming.runtime.dead_letters import error_headers
from streaming.serdes import JsonSerde, SerdeError, resolve_serde
from streaming.testing import TopologyTestDriver

AT = dt.datetime(2026, 11, 26, 8, 0, tzinfo=dt.UTC)


@dataclasses.dataclass
class Item:
    sku: str
    qty: int
    price: float


@dataclasses.dataclass
class Order:
    order_id: str
    user_id: str
    amount: int
    created: dt.datetime
    items: list[Item]
    note: str | None = None


class PItem(pydantic.BaseModel):
    sku: str
    qty: int
    price: float


class POrder(pydantic.BaseModel):
    order_id: str
    user_id: str
    amount: int
    created: dt.datetime
    items: list[PItem]
    note: str | None = None


class SOrder(msgspec.Struct):
    order_id: str
    amount: int


def order(n: int = 1, **changes: Any) -> Order:
    return dataclasses.replace(Order(f"o{n}", "u1", 10 * n, AT, [Item("a", 1, 2.5), Item("b", n, 1.0)]), **changes)


def test_json_without_a_type_is_the_untyped_serde() -> None:
    serde = Serdes.Json()
    assert type(serde) is JsonSerde and repr(serde) == "Serdes.Json()" and isinstance(serde, Serdes.Json)
    assert serde.deserialize(b'{"a": [1]}') == {"a": [1]}
    assert isinstance(resolve_serde("Json"), JsonSerde)


@pytest.mark.parametrize("type_", [Order, POrder])
def test_typed_json_round_trips_and_reads_what_untyped_json_writes(type_: Any) -> None:
    serde = Serdes.Json(type_)
    assert repr(serde) == f"Serdes.Json({type_.__qualname__})"
    value = order(2) if type_ is Order else POrder.model_validate(dataclasses.asdict(order(2)))
    data = serde.serialize(value)
    assert serde.deserialize(data) == value
    as_dict = Serdes.Json().deserialize(data)
    assert as_dict["items"][1] == {"sku": "b", "qty": 2, "price": 1.0}
    assert dt.datetime.fromisoformat(as_dict["created"]) == AT
    assert serde.deserialize(Serdes.Json().serialize(as_dict)) == value
    assert serde.serialize(None) is None and serde.deserialize(None) is None


def test_typed_json_takes_msgspec_structs_and_generic_types() -> None:
    serde = Serdes.Json(SOrder)
    assert serde.deserialize(serde.serialize(SOrder("o1", 3))) == SOrder("o1", 3)
    many = Serdes.Json(list[Item])
    assert many.deserialize(b'[{"sku": "a", "qty": 1, "price": 1}]') == [Item("a", 1, 1.0)]


def test_typed_json_rejects_a_type_it_cannot_read() -> None:
    with pytest.raises(TypeError, match="not a type msgspec or pydantic can read"):
        Serdes.Json(object())


@pytest.mark.parametrize(("data", "field", "message"), [
    (b'{"order_id": "o1", "user_id": "u", "amount": "12", "created": "2026-01-01T00:00:00Z", "items": []}',
     "amount", "field `amount`: expected `int`, got `str`"),
    ((b'{"order_id": "o1", "user_id": "u", "amount": 1, "created": "2026-01-01T00:00:00Z",'
      b' "items": [{"sku": "a", "qty": 1, "price": 1}, {"sku": "b", "qty": "x", "price": 1}]}'),
     "items[1].qty", "field `items[1].qty`: expected `int`, got `str`"),
    (b'{"order_id": "o1", "user_id": "u", "created": "2026-01-01T00:00:00Z", "items": []}',
     "amount", "field `amount`: missing (required)"),
    (b'{"order_id": "o1", "user_id": "u", "amount": 1, "created": "yesterday", "items": []}',
     "created", "field `created`: invalid RFC3339 encoded datetime"),
])
def test_dataclass_decoding_errors_name_the_field(data: bytes, field: str, message: str) -> None:
    with pytest.raises(SerdeError) as error:
        Serdes.Json(Order).deserialize(data)
    assert error.value.field == field
    assert str(error.value) == f"Serdes.Json(Order): {message}"


def test_malformed_json_is_a_serde_error_without_a_field() -> None:
    with pytest.raises(SerdeError, match=r"^Serdes.Json\(Order\): JSON is malformed") as error:
        Serdes.Json(Order).deserialize(b'{"order_id": oops')
    assert error.value.field is None


def test_pydantic_decoding_errors_name_the_field() -> None:
    data = (b'{"order_id": "o1", "user_id": "u", "amount": "many", "created": "2026-01-01T00:00:00Z",'
            b' "items": [{"sku": "a", "qty": 1}]}')
    with pytest.raises(SerdeError) as error:
        Serdes.Json(POrder).deserialize(data)
    assert error.value.field == "amount"
    assert str(error.value).startswith("Serdes.Json(POrder): field `amount`: input should be a valid integer")
    assert "field `items[0].price`: field required" in str(error.value)


def typed_topology() -> StreamsBuilder:
    builder = StreamsBuilder()
    (builder.stream("orders", key_serde=Serdes.String(), value_serde=Serdes.Json(Order))
     .filter(lambda _k, o: o.amount > 10)
     .map_values(lambda o: dataclasses.replace(o, note=f"{len(o.items)} items"))
     .to("big-orders", value_serde=Serdes.Json(Order)))
    return builder


def test_typed_values_through_a_topology_and_a_bad_one_to_the_dead_letter_topic() -> None:
    app = "typed-app"
    settings = {"application.id": app, "default.deserialization.exception.handler": "dead_letter"}
    with TopologyTestDriver(typed_topology().build(), settings) as driver:
        orders = driver.create_input_topic("orders", Serdes.String(), Serdes.Json(Order))
        out = driver.create_output_topic("big-orders", Serdes.String(), Serdes.Json(Order))
        dlq = driver.create_output_topic(dead_letter_topic(app), Serdes.Bytes(), Serdes.Bytes())
        orders.pipe_input("u1", order(1), timestamp=1_000)
        orders.pipe_input("u1", order(2), timestamp=1_001)
        bad = b'{"order_id": "o3", "user_id": "u1", "amount": "30", "created": "2026-01-01T00:00:00Z", "items": []}'
        driver.pipe_raw("orders", b"u1", bad, 1_002)
        orders.pipe_input("u1", order(4), timestamp=1_003)
        assert out.read_values_to_list() == [order(2, note="2 items"), order(4, note="2 items")]
        [letter] = dlq.read_records_to_list()
        assert letter.value == bad
        headers = error_headers(letter.headers)
        assert headers["stage"] == "deserialization" and headers["type"] == "streaming.serdes.SerdeError"
        assert "field `amount`: expected `int`, got `str`" in headers["message"]
        assert (headers["source.topic"], headers["source.partition"], headers["source.offset"]) == ("orders", "0", "2")


# Avro ------------------------------------------------------------------------------------------------------------

ITEM_SCHEMA = {"type": "record", "name": "Item", "fields": [
    {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}, {"name": "price", "type": "double"}]}
ORDER_V1 = {"type": "record", "name": "Order", "namespace": "brook.test", "fields": [
    {"name": "order_id", "type": "string"},
    {"name": "user_id", "type": "string"},
    {"name": "amount", "type": "int"},
    {"name": "created", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "items", "type": {"type": "array", "items": ITEM_SCHEMA}},
    {"name": "note", "type": ["null", "string"], "default": None}]}
# v2: amount widened to long, a field added with a default, note removed.
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"][:2], {"name": "amount", "type": "long"},
                                   *ORDER_V1["fields"][3:5], {"name": "currency", "type": "string", "default": "EUR"}]}


def test_avro_round_trips_dicts_and_dataclasses() -> None:
    as_dicts = Serdes.Avro(ORDER_V1)
    record = dataclasses.asdict(order(1))
    assert as_dicts.deserialize(as_dicts.serialize(record)) == record
    typed = Serdes.Avro(ORDER_V1, record_type=Order)
    assert repr(typed) == "Serdes.Avro(Order)"
    assert typed.serialize(order(1)) == as_dicts.serialize(record)
    assert typed.deserialize(typed.serialize(order(3))) == order(3)
    as_model = Serdes.Avro(ORDER_V1, record_type=POrder)
    model = POrder.model_validate(record)
    assert as_model.deserialize(as_model.serialize(model)) == model
    assert typed.serialize(None) is None and typed.deserialize(None) is None


def test_avro_reads_records_of_an_older_writer_schema() -> None:
    old = Serdes.Avro(ORDER_V1)
    new = Serdes.Avro(ORDER_V2, writer_schema=ORDER_V1)
    read = new.deserialize(old.serialize(dataclasses.asdict(order(2, note="gift"))))
    assert read["currency"] == "EUR" and "note" not in read and read["amount"] == 20
    assert read["items"][1] == {"sku": "b", "qty": 2, "price": 1.0}


def test_avro_errors_name_what_is_wrong() -> None:
    typed = Serdes.Avro(ORDER_V1, record_type=Order)
    with pytest.raises(SerdeError, match=r"Serdes.Avro\(Order\): cannot write Order: .*amount.*expected int"):
        typed.serialize(order(1, amount="ten"))
    data = typed.serialize(order(1))
    with pytest.raises(SerdeError, match=r"cannot read \d+ bytes: EOFError"):
        typed.deserialize(data[:-3])
    with pytest.raises(SerdeError, match="bytes left after the record"):
        typed.deserialize(data + b"\x00")
    # A record that fits the schema but not the type: the field is named.
    loose = {**ORDER_V1, "fields": [*ORDER_V1["fields"][:2], {"name": "amount", "type": "string"},
                                    *ORDER_V1["fields"][3:]]}
    as_text = Serdes.Avro(loose).serialize({**dataclasses.asdict(order(1)), "amount": "ten"})
    with pytest.raises(SerdeError) as error:
        Serdes.Avro(loose, record_type=Order).deserialize(as_text)
    assert error.value.field == "amount"
    assert str(error.value) == "Serdes.Avro(Order): field `amount`: expected `int`, got `str`"


def test_avro_values_through_a_topology() -> None:
    builder = StreamsBuilder()
    (builder.stream("orders", key_serde=Serdes.String(), value_serde=Serdes.Avro(ORDER_V1, record_type=Order))
     .map_values(lambda o: {**dataclasses.asdict(o), "amount": o.amount * 2})
     .to("doubled", value_serde=Serdes.Avro(ORDER_V1)))
    with TopologyTestDriver(builder.build(), {"application.id": "avro-app"}) as driver:
        driver.create_input_topic("orders", Serdes.String(), Serdes.Avro(ORDER_V1, record_type=Order)).pipe_input(
            "u1", order(1), timestamp=1_000)
        out = driver.create_output_topic("doubled", Serdes.String(), Serdes.Avro(ORDER_V2, writer_schema=ORDER_V1))
        [value] = out.read_values_to_list()
        assert value["amount"] == 20 and value["currency"] == "EUR"
