"""``assets.reprocess.compare``: what counts as a reprocessed output equal to the live one, and what is reported."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from assets.archive.layout import RAW_DIR, day_dir
from assets.reprocess.compare import compare_outputs, reprocessed_records

DAY = date(2023, 11, 14)


def test_the_batch_is_each_keys_first_live_records() -> None:
    live = [(b"a", b"1", 10), (b"b", b"x", 11), (b"a", b"2", 12), (b"a", b"3", 13)]
    result = compare_outputs([(b"a", b"1", 10), (b"a", b"2", 12), (b"b", b"x", 11)], live, "t")
    assert result.equal and result.differences == [] and result.leftover == 1 and result.keys == 2


def test_a_different_order_value_or_timestamp_is_a_difference_naming_the_key_and_record() -> None:
    live = [(b"a", b"1", 10), (b"a", b"2", 12)]
    swapped = compare_outputs([(b"a", b"2", 12), (b"a", b"1", 10)], live, "t")
    assert not swapped.equal and swapped.different_keys == 1
    assert swapped.differences[0].startswith("key 'a': record 1: batch '2' @ ")
    assert not compare_outputs([(b"a", b"1", 11)], live, "t").equal
    assert not compare_outputs([(b"a", b"9", 10)], live, "t").equal
    longer = compare_outputs([(b"a", b"1", 10), (b"a", b"2", 12), (b"a", b"3", 13)], live, "t")
    assert "live only 2 records" in longer.differences[0]


def test_records_of_a_key_with_one_timestamp_and_null_keys_are_compared_without_order() -> None:
    live = [(b"a", b"2", 10), (b"a", b"1", 10), (None, b"n1", 5), (None, b"n2", 6)]
    assert compare_outputs([(b"a", b"1", 10), (b"a", b"2", 10), (None, b"n2", 6)], live, "t").equal
    result = compare_outputs([(b"a", b"1", 10), (None, b"n3", 6)], live, "t")
    assert not result.equal and result.differences[0].startswith("null key: 1 batch records not written live")


def test_unordered_compares_each_keys_records_as_a_multiset() -> None:
    live = [(b"w", b"1", 10), (b"w", b"2", 20)]
    assert compare_outputs([(b"w", b"2", 20), (b"w", b"1", 10)], live, "t", ordered=False).equal
    assert not compare_outputs([(b"w", b"1", 10), (b"w", b"1", 10)], live, "t", ordered=False).equal


def test_complete_before_finds_live_records_the_batch_should_have_written() -> None:
    live = [(b"a", b"1", 10), (b"a", b"2", 20), (b"b", b"x", 30), (None, b"n", 15)]
    batch = [(b"a", b"1", 10)]
    assert compare_outputs(batch, live, "t").equal  # a prefix, wherever the batch stopped
    result = compare_outputs(batch, live, "t", complete_before=25)
    assert result.different_keys == 2 and not result.equal
    assert any(line.startswith("key 'a': 1 live records before 1970-01-01T00:00:00.025Z missing from the batch")
               for line in result.differences)
    assert compare_outputs([*batch, (b"a", b"2", 20), (None, b"n", 15)], live, "t", complete_before=25).equal


def test_an_empty_batch_is_never_equal() -> None:
    assert compare_outputs([], [(b"a", b"1", 10)], "t").differences == ["the batch wrote nothing"]


def test_reprocessed_records_reads_a_days_raw_records_by_partition_and_offset(tmp_path: Path) -> None:
    raw = day_dir(tmp_path / "orders", "order-lines", DAY) / RAW_DIR
    raw.mkdir(parents=True)
    table = pa.table({"partition": pa.array([1, 0, 0], pa.int32()), "offset": pa.array([0, 1, 0], pa.int64()),
                      "key": pa.array([b"k1", b"k0", None], pa.binary()), "value": pa.array([b"c", b"b", b"a"]),
                      "timestamp": pa.array([1_700_000_000_123_000, 2_000, 1_000], pa.timestamp("us", tz="UTC"))})
    pq.write_table(table, raw / "part-0.parquet")
    assert reprocessed_records(tmp_path, "orders", "order-lines", [DAY]) == [
        (None, b"a", 1), (b"k0", b"b", 2), (b"k1", b"c", 1_700_000_000_123)]
    with pytest.raises(FileNotFoundError, match="no reprocessed day 2023-11-15"):
        reprocessed_records(tmp_path, "orders", "order-lines", [date(2023, 11, 15)])


def test_encrypted_values_compare_by_their_clear_form(monkeypatch: pytest.MonkeyPatch) -> None:
    from apps.orders.protection import ClearJsonSerde
    from streaming.encryption import FieldEncryption

    monkeypatch.setenv("BROOK_TEST_COMPARE_KEY", FieldEncryption.generate_key())
    encryption = FieldEncryption({"k1": "${env:BROOK_TEST_COMPARE_KEY}"}, active_key_id="k1")
    clear = ClearJsonSerde(encryption)

    def written(phone: str) -> bytes:
        return orjson.dumps(encryption.encrypt_fields({"order_id": "o-1", "phone": phone}, ["phone"]))

    batch, live = [(b"u", written("+1-555"), 10)], [(b"u", written("+1-555"), 10)]
    assert batch != live and not compare_outputs(batch, live, "t").equal  # random nonces
    assert compare_outputs(batch, live, "t", clear_value=clear.clear_bytes).equal
    assert not compare_outputs([(b"u", written("+1-556"), 10)], live, "t", clear_value=clear.clear_bytes).equal
