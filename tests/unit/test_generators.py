"""Generators of test data: determinism, disorder shares, field contracts, and use with the driver."""

from __future__ import annotations

import random
from typing import Any

import pytest

from streaming import StreamsBuilder
from streaming.testing import GeneratedRecord, TopologyTestDriver, disordered_timestamps, items, orders, users, words
from streaming.testing.generators import CATEGORIES, DEFAULT_VOCABULARY, DEFECTS, ORDERS_START_MS, REGIONS


def behind_max(records: list[Any], lateness_ms: int | None = None) -> tuple[int, int]:
    """(records behind the max so far, of those more than lateness_ms behind), measured from timestamps."""
    high, behind, late = -1, 0, 0
    for record in records:
        timestamp = record.timestamp if hasattr(record, "timestamp") else record[0]
        if timestamp < high:
            behind += 1
            if lateness_ms is not None and high - timestamp > lateness_ms:
                late += 1
        high = max(high, timestamp)
    return behind, late


def luhn_valid(number: str) -> bool:
    total = 0
    for position, char in enumerate(reversed(number)):
        digit = int(char)
        if position % 2 == 1:
            digit = digit * 2 - 9 if digit * 2 > 9 else digit * 2
        total += digit
    return total % 10 == 0


# -- determinism ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("generate", [
    lambda seed: words(200, seed=seed, out_of_order=0.2),
    lambda seed: orders(200, seed=seed, out_of_order=0.1, late=0.05, duplicates=0.05, invalid=0.05),
])
def test_same_seed_same_records_other_seed_other_records(generate: Any) -> None:
    assert generate(1) == generate(1)
    assert generate(1) != generate(2)


def test_catalog_is_deterministic_and_seeded() -> None:
    assert users(20) == users(20)
    assert items(20) == items(20)
    assert users(20, seed=1) != users(20, seed=2)
    assert items(5) == items(10)[:5]  # an entity depends on its index, not on how many are generated


def test_known_values_are_stable_across_runs() -> None:
    # String seeds make random.Random independent of PYTHONHASHSEED: these values hold in every process.
    first = words(1, seed=0)[0]
    assert first == GeneratedRecord("line-0", first.value, 0)
    assert first.value.split() and all(w in DEFAULT_VOCABULARY for w in first.value.split())
    assert words(3, seed=7) == words(3, seed=7)


# -- disorder ------------------------------------------------------------------------------------------------

def test_in_order_by_default() -> None:
    records = words(100, step_ms=10, start_ms=500)
    assert [r.timestamp for r in records] == [500 + 10 * i for i in range(100)]
    assert not any(r.out_of_order or r.late for r in records)


@pytest.mark.parametrize("share", [0.0, 0.05, 0.2, 0.5])
def test_out_of_order_share_is_as_asked(share: float) -> None:
    records = words(1_000, seed=3, start_ms=1_000_000, out_of_order=share, max_disorder_ms=3_000)
    behind, _ = behind_max(records)
    assert behind == round(share * 1_000)
    assert sum(r.out_of_order for r in records) == behind
    assert not any(r.late for r in records)


def test_out_of_order_records_are_behind_by_at_most_max_disorder() -> None:
    records = words(2_000, seed=5, start_ms=100_000, out_of_order=0.3, max_disorder_ms=1_500)
    high = -1
    for record in records:
        if record.out_of_order:
            assert 1 <= high - record.timestamp <= 1_500
        else:
            assert record.timestamp >= high
        high = max(high, record.timestamp)


def test_late_share_and_lateness() -> None:
    records = orders(2_000, seed=11, out_of_order=0.1, late=0.05, lateness_ms=300_000, max_disorder_ms=60_000)
    behind, late = behind_max(records, lateness_ms=300_000)
    assert late == 100 == sum(r.late for r in records)
    assert behind == 300  # out-of-order + late
    assert sum(r.out_of_order for r in records) == 200
    high = -1
    for record in records:
        if record.late:
            assert 300_000 < high - record.timestamp <= 360_000
        elif record.out_of_order:
            assert 0 < high - record.timestamp <= 60_000
        high = max(high, record.timestamp)


def test_out_of_order_stays_within_lateness() -> None:
    records = orders(1_000, seed=2, out_of_order=0.3, max_disorder_ms=10_000, lateness_ms=2_000)
    _, late = behind_max(records, lateness_ms=2_000)
    assert late == 0


def test_disorder_never_goes_below_zero_and_is_deferred_instead() -> None:
    rng = random.Random("t")
    times = disordered_timestamps(100, rng, start_ms=0, step_ms=1, out_of_order=0.5, max_disorder_ms=1_000)
    assert all(t >= 0 for t, _, _ in times)
    assert not times[0][1] and not times[1][1]  # nothing is behind 0
    assert sum(ooo for _, ooo, _ in times) == 50
    assert behind_max(times)[0] == 50


def test_the_helper_is_shared_and_deterministic() -> None:
    a = disordered_timestamps(50, random.Random(1), out_of_order=0.2, late=0.1, lateness_ms=100, start_ms=10_000)
    b = disordered_timestamps(50, random.Random(1), out_of_order=0.2, late=0.1, lateness_ms=100, start_ms=10_000)
    assert a == b and len(a) == 50


@pytest.mark.parametrize("kwargs", [
    {"out_of_order": 1.5},
    {"out_of_order": -0.1},
    {"out_of_order": 0.7, "late": 0.5, "lateness_ms": 10},
    {"late": 0.1},  # late needs lateness_ms
    {"out_of_order": 0.1, "lateness_ms": 0},
    {"out_of_order": 0.1, "max_disorder_ms": 0},
])
def test_bad_disorder_arguments(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        disordered_timestamps(10, random.Random(0), **kwargs)


# -- words ---------------------------------------------------------------------------------------------------

def test_words_fields() -> None:
    records = words(300, seed=1, vocabulary=["alpha", "beta"], words_per_line=(2, 3))
    assert [r.key for r in records[:3]] == ["line-0", "line-1", "line-2"]
    assert len({r.key for r in records}) == 300
    for record in records:
        tokens = record.value.split(" ")
        assert 2 <= len(tokens) <= 3 and set(tokens) <= {"alpha", "beta"}
    with pytest.raises(ValueError):
        words(1, vocabulary=[])
    with pytest.raises(ValueError):
        words(1, words_per_line=(0, 2))


# -- orders, users, items ------------------------------------------------------------------------------------

def test_users_and_items_tables() -> None:
    user_records = users(12)
    assert [r.key for r in user_records[:2]] == ["user-000", "user-001"]
    for record in user_records:
        assert set(record.value) == {"name", "region", "address", "phone"} and record.value["region"] in REGIONS
        assert record.value["phone"].startswith("+1-555-") and "," in record.value["address"]
        assert record.timestamp == ORDERS_START_MS
    item_records = items(8, regions=("north", "south"))
    for record in item_records:
        assert set(record.value) == {"name", "region", "price", "category"}
        assert record.value["region"] in ("north", "south") and record.value["category"] in CATEGORIES
        assert record.value["price"] > 0


def test_orders_fields() -> None:
    records = orders(500, seed=4, users=20, items=10, max_lines=3, max_qty=4)
    user_table = {r.key: r.value for r in users(20)}
    item_table = {r.key: r.value for r in items(10)}
    assert len({r.value["order_id"] for r in records}) == 500
    for record in records:
        order = record.value
        assert set(order) == {"order_id", "user", "items", "amount", "region", "card_number", "address", "phone",
                              "ts"}
        assert (order["address"], order["phone"]) == (user_table[order["user"]]["address"],
                                                      user_table[order["user"]]["phone"])
        assert record.key == order["user"] and order["user"] in user_table
        assert order["region"] == user_table[order["user"]]["region"]
        assert order["ts"] == record.timestamp
        assert 1 <= len(order["items"]) <= 3
        assert len({line["item"] for line in order["items"]}) == len(order["items"])
        for line in order["items"]:
            assert set(line) == {"item", "qty", "price", "category"}
            assert line["item"] in item_table and line["price"] == item_table[line["item"]]["price"]
            assert line["category"] == item_table[line["item"]]["category"]
            assert 1 <= line["qty"] <= 4
        assert order["amount"] == round(sum(line["qty"] * line["price"] for line in order["items"]), 2)
        assert len(order["card_number"]) == 16 and order["card_number"].isdigit()
        assert luhn_valid(order["card_number"])
        assert record.defect is None and not record.duplicate
    assert records[0].timestamp == ORDERS_START_MS


def test_orders_catalog_seed_matches_the_tables() -> None:
    user_table = {r.key: r.value for r in users(10, seed=9)}
    for record in orders(100, seed=1, users=10, catalog_seed=9):
        assert record.value["region"] == user_table[record.key]["region"]


def test_orders_duplicates() -> None:
    records = orders(1_000, seed=8, duplicates=0.1, out_of_order=0.1, late=0.02)
    duplicates = [i for i, r in enumerate(records) if r.duplicate]
    assert 90 <= len(duplicates) <= 100
    for index in duplicates:
        previous, record = records[index - 1], records[index]
        assert (record.key, record.value, record.timestamp) == (previous.key, previous.value, previous.timestamp)
        assert record.value is not previous.value
        assert not record.out_of_order and not record.late
    assert len({r.value["order_id"] for r in records}) == 1_000 - len(duplicates)
    behind, _ = behind_max(records)
    assert behind == 120  # duplicates are never out of order themselves


def test_orders_defects() -> None:
    records = orders(1_000, seed=6, invalid=0.2)
    bad = [r for r in records if r.defect]
    assert len(bad) == 200
    assert {r.defect for r in bad} == set(DEFECTS)
    for record in bad:
        order = record.value
        if record.defect == "no_items":
            assert order["items"] == []
        elif record.defect == "bad_qty":
            assert any(line["qty"] <= 0 for line in order["items"])
        elif record.defect == "bad_price":
            assert any(line["price"] < 0 for line in order["items"])
        elif record.defect == "no_user":
            assert record.key is None and order["user"] is None
        elif record.defect == "bad_amount":
            assert order["amount"] != round(sum(line["qty"] * line["price"] for line in order["items"]), 2)


def test_bad_order_arguments() -> None:
    for kwargs in ({"users": 0}, {"items": 0}, {"max_lines": 0}, {"duplicates": 2.0}, {"invalid": -1}):
        with pytest.raises(ValueError):
            orders(5, **kwargs)


# -- with the driver -----------------------------------------------------------------------------------------

def test_generated_records_pipe_into_the_driver() -> None:
    builder = StreamsBuilder()
    builder.stream("lines").flat_map_values(lambda line: line.split()).to("words")
    builder.stream("orders").filter(lambda user, order: order["amount"] > 100).to("big-orders")
    lines = words(50, seed=2, out_of_order=0.2)
    order_records = orders(50, seed=2, late=0.1)
    with TopologyTestDriver(builder.build(), {"application.id": "gen-test"}) as driver:
        driver.create_input_topic("lines").pipe_record_list(lines)
        driver.create_input_topic("orders").pipe_record_list(order_records)
        produced = driver.create_output_topic("words").read_records_to_list()
        big = driver.create_output_topic("big-orders").read_key_values()
    assert [r.value for r in produced] == [w for r in lines for w in r.value.split()]
    assert [r.timestamp for r in produced] == [r.timestamp for r in lines for _ in r.value.split()]
    assert big == [(r.key, r.value) for r in order_records if r.value["amount"] > 100]
