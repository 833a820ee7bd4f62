"""Decoding Kafka records into archive columns: formats, fields, extras, tombstones, undecodable records."""

from __future__ import annotations

import struct
from typing import Any

import orjson
import pyarrow as pa

from assets.archive.decode import decode_batches
from assets.platform_spec import TopicSpec

ORDER_LINES = TopicSpec(partitions=2, key="string", value="json",
                        fields={"order_id": "string", "qty": "long", "price": "double", "gift": "boolean",
                                "tags": "json"})


def _batch(records: list[tuple[bytes | None, bytes | None]]) -> pa.RecordBatch:
    n = len(records)
    return pa.RecordBatch.from_pydict({
        "key": pa.array([k for k, _ in records], pa.binary()),
        "value": pa.array([v for _, v in records], pa.binary()),
        "topic": pa.array(["t"] * n, pa.string()),
        "partition": pa.array([1] * n, pa.int32()),
        "offset": pa.array(range(10, 10 + n), pa.int64()),
        "timestamp": pa.array([(1_700_000_000_000 + i) * 1000 for i in range(n)], pa.timestamp("us", tz="UTC")),
    })


def _decode(topic: TopicSpec, records: list[tuple[bytes | None, bytes | None]]) -> list[dict[str, Any]]:
    return pa.Table.from_batches(list(decode_batches([_batch(records)], topic))).to_pylist()


def test_json_fields_are_typed_columns_and_undeclared_fields_are_kept() -> None:
    value = {"order_id": "o-1", "qty": 2, "price": 3, "gift": False, "tags": ["a", {"b": 1}],
             "card_number": "4111", "note": None}
    [row] = _decode(ORDER_LINES, [(b"user-1", orjson.dumps(value))])
    assert row["key"] == "user-1"
    assert (row["order_id"], row["qty"], row["price"], row["gift"]) == ("o-1", 2, 3.0, False)
    assert row["tags"] == '["a",{"b":1}]'
    assert row["extra_fields"] == [("card_number", '"4111"'), ("note", "null")]
    assert (row["topic"], row["partition"], row["offset"]) == ("t", 1, 10)
    assert row["timestamp"].timestamp() == 1_700_000_000
    assert row["_error"] is None and row["_raw_value"] is None


def test_missing_fields_and_tombstones_are_nulls() -> None:
    rows = _decode(ORDER_LINES, [(b"u", b'{"order_id": "o-2"}'), (b"u", None), (None, b"{}")])
    assert [r["order_id"] for r in rows] == ["o-2", None, None]
    assert [r["qty"] for r in rows] == [None, None, None]
    assert [r["extra_fields"] for r in rows] == [None, None, None]
    assert [r["key"] for r in rows] == ["u", "u", None]
    assert all(r["_error"] is None for r in rows)


def test_undecodable_records_keep_their_bytes_and_reason() -> None:
    records = [
        (b"u", b"{not json"),
        (b"u", b"[1, 2]"),
        (b"u", b'{"qty": "two"}'),
        (b"u", b'{"qty": 1.5}'),
        (b"\xff\xfe", b"{}"),
    ]
    rows = _decode(ORDER_LINES, records)
    errors = [r["_error"] for r in rows]
    assert errors[0].startswith("value: not JSON")
    assert errors[1] == "value: not a JSON object but list"
    assert errors[2] == "value: field 'qty' should be long, got str 'two'"
    assert errors[3] == "value: field 'qty' should be long, got float 1.5"
    assert errors[4].startswith("key: not UTF-8")
    assert [(r["_raw_key"], r["_raw_value"]) for r in rows] == records
    assert all(r["order_id"] is None and r["key"] is None for r in rows)


def test_scalar_formats_decode_like_the_serdes() -> None:
    counts = TopicSpec(partitions=1, key="string", value="long")
    rows = _decode(counts, [(b"brook", struct.pack(">q", 42)), (b"neg", struct.pack(">q", -7)), (b"bad", b"\x01")])
    assert [(r["key"], r["value"]) for r in rows[:2]] == [("brook", 42), ("neg", -7)]
    assert rows[2]["_error"] == "value: long needs 8 bytes, got 1"

    mixed = TopicSpec(partitions=1, key="integer", value="double")
    [row] = _decode(mixed, [(struct.pack(">i", 5), struct.pack(">d", 2.5))])
    assert (row["key"], row["value"]) == (5, 2.5)

    raw = TopicSpec(partitions=1, key="bytes", value="json")
    [row] = _decode(raw, [(b"\x00\x01", b'{"any": [1]}')])
    assert (row["key"], row["value"]) == (b"\x00\x01", '{"any": [1]}')


def test_every_record_keeps_its_bytes_and_headers_decodable_or_not() -> None:
    """What a replay needs (assets/reprocess): the record as Kafka held it, beside the decoded columns."""
    records = [(b"u", b'{"order_id": "o-1"}'), (b"u", b"{not json"), (None, None)]
    headers = [[("trace", b"t-1"), ("empty", None)], None, []]
    batch = _batch(records)
    batch = batch.append_column("headers", pa.array(headers, pa.list_(pa.struct([("key", pa.string()),
                                                                                  ("value", pa.binary())]))))
    rows = pa.Table.from_batches(list(decode_batches([batch], ORDER_LINES))).to_pylist()
    assert [(r["_record_key"], r["_record_value"]) for r in rows] == records
    assert [r["_record_headers"] for r in rows] == [[{"key": "trace", "value": b"t-1"}, {"key": "empty", "value": None}],
                                                    None, []]
    assert [r["_error"] is None for r in rows] == [True, False, True]
    without_headers = _decode(ORDER_LINES, records[:1])  # a read without the headers column: none
    assert without_headers[0]["_record_headers"] is None and without_headers[0]["_record_key"] == b"u"
