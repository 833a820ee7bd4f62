"""Topic generations (partition scaling's physical names)."""

import pytest

from streaming.naming import generation_name, logical_of


def test_generation_one_is_the_logical_name_and_later_generations_carry_a_suffix() -> None:
    assert generation_name("orders", 1) == "orders"
    assert generation_name("orders", 2) == "orders.v2"
    assert generation_name("app-counts-changelog", 3) == "app-counts-changelog.v3"
    for physical, expected in [("orders.v2", ("orders", 2)), ("orders", ("orders", 1)), ("orders.v1", ("orders.v1", 1)),
                               ("orders.v02", ("orders.v02", 1)), (".v2", (".v2", 1))]:
        assert logical_of(physical) == expected
    for bad in (0, -1, True, "2"):
        with pytest.raises(ValueError, match="generation"):
            generation_name("orders", bad)  # type: ignore[arg-type]
