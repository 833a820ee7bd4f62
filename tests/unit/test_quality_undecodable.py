"""What an ``absent`` rule finds in the raw bytes of an undecodable record (no Great Expectations)."""

from __future__ import annotations

import pytest

from assets.quality.validation import UNDECODABLE_MARK, in_clear, prepare_frame, undecodable_field


@pytest.mark.parametrize(
    ("raw", "found"),
    [
        (b'{"qty": "three", "card_number": "4111"}', '"4111"'),    # a JSON object with a mistyped field
        (b'{"qty": "three", "card_number": null}', None),          # JSON null: absent, as for decoded rows
        (b'{"qty": "three"}', None),
        (b'{"card_number" : "4111", ', UNDECODABLE_MARK),          # not JSON: found in the bytes
        (b'[{"card_number": "4111"}]', UNDECODABLE_MARK),          # not an object: found in the bytes
        (b'{"card_number_hash": "x"', None),                       # another field's name is not a match
        (b"\xff\xfe", None),
        (None, None),
    ],
)
def test_a_field_is_found_in_an_undecodable_value(raw: bytes | None, found: str | None) -> None:
    assert undecodable_field(raw, "card_number") == found


ENCRYPTED = "enc:v1:k1:" + "A" * 40 + "=="


def test_absent_requires_no_value_in_clear_so_an_encrypted_value_counts_as_absent() -> None:
    import pandas as pd

    from assets.platform_spec import EXTRA_FIELDS_COLUMN, QualityRule

    rule = QualityRule(name="r", topic="t", check="absent", columns=["address", "card_number"])
    frame = pd.DataFrame({
        "address": [ENCRYPTED, None, "12 Mill Lane"],                       # declared: a string column
        EXTRA_FIELDS_COLUMN: [[("card_number", f'"{ENCRYPTED}"')], [("card_number", '"4111"')], None],
        "partition": [0, 0, 0], "offset": [0, 1, 2]})
    undecodable = pd.DataFrame({"partition": [1], "offset": [7],
                                "value": [b'{"qty": "x", "address": "' + ENCRYPTED.encode() + b'"}']})
    prepared = prepare_frame(rule, frame, undecodable)
    def clear(column: str) -> list[str | None]:
        return [None if pd.isna(value) else value for value in prepared[column]]

    assert clear("address") == [None, None, "12 Mill Lane", None]
    assert clear("card_number") == [None, '"4111"', None, None]
    assert in_clear("enc:v1:k1:not base64!") == "enc:v1:k1:not base64!"  # not the wire form: a clear value
