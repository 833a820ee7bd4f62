"""What an ``absent`` rule finds in the raw bytes of an undecodable record (no Great Expectations)."""

from __future__ import annotations

import pytest

from assets.quality.validation import UNDECODABLE_MARK, undecodable_field


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
