"""Serdes: round trips, Kafka-compatible wire formats, user serdes and resolution by name."""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest

from streaming import Serde, Serdes
from streaming.serdes import JsonSerde, StringSerde, resolve_serde

# A module-level serde for resolve_serde("module:attr").
UPPER = Serdes.from_functions(lambda s: s.upper().encode(), lambda b: b.decode().lower())


@pytest.mark.parametrize(("serde", "values"), [
    (Serdes.String(), ["", "hello", "héllo wörld ✓", "line\nbreak"]),
    (Serdes.Bytes(), [b"", b"\x00\xff", bytes(range(256))]),
    (Serdes.Integer(), [0, 1, -1, 2**31 - 1, -(2**31)]),
    (Serdes.Long(), [0, 1, -1, 2**63 - 1, -(2**63), 1_699_999_200_000]),
    (Serdes.Double(), [0.0, -0.5, 3.141592653589793, 1e308, -1e-308, math.inf]),
    (Serdes.Json(), [0, "s", [1, "two", None], {"a": {"b": [1.5, True, False, None]}}, True]),
])
def test_round_trip(serde: Serde[Any], values: list[Any]) -> None:
    for value in values:
        data = serde.serialize(value)
        assert isinstance(data, bytes)
        assert serde.deserialize(data) == value


@pytest.mark.parametrize("serde", [Serdes.String(), Serdes.Bytes(), Serdes.Integer(), Serdes.Long(),
                                   Serdes.Double(), Serdes.Json(), UPPER])
def test_none_is_a_tombstone_both_ways(serde: Serde[Any]) -> None:
    assert serde.serialize(None) is None
    assert serde.deserialize(None) is None


def test_double_nan_round_trips() -> None:
    assert math.isnan(Serdes.Double().deserialize(Serdes.Double().serialize(math.nan)))


def test_integer_and_long_are_big_endian_like_kafka() -> None:
    # Kafka's IntegerSerializer / LongSerializer write the two's complement, most significant byte first.
    assert Serdes.Integer().serialize(1) == b"\x00\x00\x00\x01"
    assert Serdes.Integer().serialize(258) == b"\x00\x00\x01\x02"
    assert Serdes.Integer().serialize(-1) == b"\xff\xff\xff\xff"
    assert Serdes.Integer().serialize(-(2**31)) == b"\x80\x00\x00\x00"
    assert Serdes.Long().serialize(1) == b"\x00" * 7 + b"\x01"
    assert Serdes.Long().serialize(-2) == b"\xff" * 7 + b"\xfe"
    assert Serdes.Long().serialize(0x0102030405060708) == bytes([1, 2, 3, 4, 5, 6, 7, 8])
    assert Serdes.Long().deserialize(bytes([0, 0, 0, 0, 0, 0, 1, 0])) == 256


def test_double_is_ieee754_big_endian_like_kafka() -> None:
    assert Serdes.Double().serialize(1.0) == b"\x3f\xf0\x00\x00\x00\x00\x00\x00"
    assert Serdes.Double().serialize(-2.5) == struct.pack(">d", -2.5)


def test_string_is_utf8() -> None:
    assert Serdes.String().serialize("é") == b"\xc3\xa9"
    assert Serdes.String().deserialize(b"\xe2\x9c\x93") == "✓"


def test_json_is_compact_utf8() -> None:
    assert Serdes.Json().serialize({"a": 1, "b": [True, None]}) == b'{"a":1,"b":[true,null]}'
    assert Serdes.Json().serialize("é") == '"é"'.encode()


@pytest.mark.parametrize(("serde", "data"), [
    (Serdes.Integer(), b"\x00\x01"),
    (Serdes.Long(), b"\x00\x00\x00\x01"),
    (Serdes.Double(), b"\x00"),
])
def test_fixed_width_serdes_reject_the_wrong_length(serde: Serde[Any], data: bytes) -> None:
    with pytest.raises(ValueError, match="expects"):
        serde.deserialize(data)


def test_json_rejects_invalid_bytes() -> None:
    with pytest.raises(ValueError):
        Serdes.Json().deserialize(b"\xff not json")


def test_integer_rejects_out_of_range() -> None:
    with pytest.raises(struct.error):
        Serdes.Integer().serialize(2**31)


def test_from_functions() -> None:
    serde = Serdes.from_functions(lambda v: str(v * 2).encode(), lambda b: int(b) // 2)
    assert serde.serialize(21) == b"42"
    assert serde.deserialize(b"42") == 21
    assert serde.deserialize(serde.serialize(7)) == 7
    assert "from_functions" in repr(serde)


def test_a_subclassed_serde_works_in_a_topology() -> None:
    from streaming import StreamsBuilder
    from streaming.testing import TopologyTestDriver

    class Csv(Serde[list[str]]):
        def serialize(self, obj: list[str] | None) -> bytes | None:
            return None if obj is None else ",".join(obj).encode()

        def deserialize(self, data: bytes | None) -> list[str] | None:
            return None if data is None else data.decode().split(",")

    builder = StreamsBuilder()
    builder.stream("in", value_serde=Csv()).map_values(lambda v: list(reversed(v))).to("out", value_serde=Csv())
    with TopologyTestDriver(builder.build(), {"application.id": "serde-test"}) as driver:
        driver.create_input_topic("in", Serdes.String(), Csv()).pipe_input("k", ["a", "b", "c"], timestamp=1)
        assert driver.create_output_topic("out", Serdes.String(), Serdes.String()).read_value() == "c,b,a"


@pytest.mark.parametrize(("spec", "kind"), [
    ("String", Serdes.String), ("Bytes", Serdes.Bytes), ("Integer", Serdes.Integer), ("Long", Serdes.Long),
    ("Double", Serdes.Double), ("Json", Serdes.Json), ("Serdes.Long()", Serdes.Long), ("Serdes.Json", Serdes.Json),
    (Serdes.Integer, Serdes.Integer),
])
def test_resolve_serde_by_name_and_class(spec: Any, kind: type) -> None:
    assert type(resolve_serde(spec)) is kind


def test_resolve_serde_keeps_an_instance_and_imports_module_attr() -> None:
    serde = Serdes.Long()
    assert resolve_serde(serde) is serde
    resolved = resolve_serde(f"{__name__}:UPPER")
    assert resolved is UPPER
    assert resolved.serialize("abc") == b"ABC"


@pytest.mark.parametrize("spec", ["Strin", "json", 42, None, object])
def test_resolve_serde_rejects_unknown_specs(spec: Any) -> None:
    with pytest.raises(ValueError, match="not a serde"):
        resolve_serde(spec)


@pytest.mark.parametrize("kind", [Serdes.String, Serdes.Bytes, Serdes.Integer, Serdes.Long, Serdes.Double,
                                  Serdes.Json])
def test_repr_is_the_factory_call_and_resolves_back(kind: type) -> None:
    text = repr(kind())
    assert text == f"Serdes.{text[len('Serdes.'):-2]}()" and "Serde()" not in text
    assert type(resolve_serde(text)) is kind


def test_repr_of_a_user_serde_names_its_class() -> None:
    class Mine(Serde[str]):
        pass

    assert repr(Mine()).endswith("Mine()") and not repr(Mine()).startswith("Serdes.")


@pytest.mark.parametrize(("serde", "values"), [
    (Serdes.String(), ["", "key-1", "ünïcode"]),
    (Serdes.Json(), [{"a": 1, "b": [1.5, None]}, [], 0, "s", False]),
    (Serdes.Long(), [0, -1, 2**62]),
    (Serdes.Integer(), [0, -(2**31)]),
    (Serdes.Double(), [0.0, -1.5]),
    (Serdes.Bytes(), [b"", b"\x00\xff"]),
])
def test_the_functions_for_values_that_are_not_none_do_what_serialize_and_deserialize_do(serde: Any,
                                                                                         values: list[Any]) -> None:
    to_bytes, from_bytes = serde.not_none_serializer(), serde.not_none_deserializer()
    for value in values:
        data = serde.serialize(value)
        assert to_bytes(value) == data
        assert from_bytes(data) == serde.deserialize(data) == value


def test_a_serde_that_overrides_serialize_or_deserialize_is_called_for_values_that_are_not_none() -> None:
    class Upper(StringSerde):
        def serialize(self, obj: str | None) -> bytes | None:
            return None if obj is None else obj.upper().encode()

    class Quoted(JsonSerde):
        def deserialize(self, data: bytes | None) -> Any:
            return None if data is None else f"<{data.decode()}>"

    assert Upper().not_none_serializer()("ab") == b"AB"
    assert Upper().not_none_deserializer()(b"ab") == "ab"  # not overridden: the built-in function
    assert Quoted().not_none_deserializer()(b"1") == "<1>"
    assert Quoted().not_none_serializer()({"a": 1}) == b'{"a":1}'
