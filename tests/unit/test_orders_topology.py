"""The whole orders pipeline through the test driver, against the independent oracle in
``apps.orders.oracle`` (which knows the generator's flags, not the pipeline's code)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from apps.orders import oracle
from apps.orders.pipeline import (
    CATEGORIES,
    CATEGORY_TOPIC_PREFIX,
    HOURLY_TOPIC,
    ITEMS_TOPIC,
    LATE_LINES_TOPIC,
    LINES_TOPIC,
    ORDERS_TOPIC,
    OUTPUT_TOPICS,
    PROFILES_TOPIC,
    REJECTED_TOPIC,
    USERS_TOPIC,
    WINDOW,
    topology,
)
from apps.orders.profiles import DATABASE_URL_VARIABLE, stored_profiles
from apps.orders.protection import load_encryption
from streaming import Serdes
from streaming.encryption import is_encrypted
from streaming.testing import GeneratedRecord, TopologyTestDriver, generators

String, Json = Serdes.String(), Serdes.Json()
CONFIG = {"application.id": "orders"}
GRACE = timedelta(minutes=10)
WINDOW_MS, GRACE_MS = int(WINDOW.total_seconds() * 1000), int(GRACE.total_seconds() * 1000)


def run(orders: list[GeneratedRecord], users: list[GeneratedRecord], items: list[GeneratedRecord],
        **pipeline: Any) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """Pipe the catalog, then the orders; every output topic's records and the driver's metrics."""
    with TopologyTestDriver(topology(**pipeline), CONFIG) as driver:
        for topic, records in ((USERS_TOPIC, users), (ITEMS_TOPIC, items), (ORDERS_TOPIC, orders)):
            source = driver.create_input_topic(topic, String, Json)
            for record in records:
                source.pipe_input(record.key, record.value, timestamp=record.timestamp)
        outputs = {topic: driver.create_output_topic(topic, String, Json).read_records_to_list()
                   for topic in OUTPUT_TOPICS}
        return outputs, driver.metrics()


@pytest.mark.parametrize("seed", [1, 2])
def test_hourly_local_buyers_equal_the_oracle_over_generated_orders(seed: int, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    database = f"sqlite:///{tmp_path / 'profiles.db'}"
    monkeypatch.setenv(DATABASE_URL_VARIABLE, database)
    users, items = generators.users(40, seed=seed), generators.items(30, seed=seed)
    orders = generators.orders(3000, seed=seed, users=40, items=30, catalog_seed=seed, step_ms=20_000,
                               out_of_order=0.1, max_disorder_ms=GRACE_MS, late=0.03, lateness_ms=GRACE_MS,
                               duplicates=0.05, invalid=0.05)
    outputs, metrics = run(orders, users, items, grace=GRACE)

    expected = oracle.finals_of_one_task(oracle.local_lines(orders, users, items), WINDOW_MS, GRACE_MS)
    assert len(expected.buyers) > 40 and expected.late, "the data must close many windows and have late lines"
    finals = [record.value for record in outputs[HOURLY_TOPIC]]
    windows = [(final["region"], final["window_start"]) for final in finals]
    assert len(windows) == len(set(windows)), "exactly one final per region and hour"
    assert {w: f["users"] for w, f in zip(windows, finals, strict=True)} == \
        {w: len(buyers) for w, buyers in expected.buyers.items()}
    assert {w: f["lines"] for w, f in zip(windows, finals, strict=True)} == expected.lines
    assert all(f["window_end"] - f["window_start"] == WINDOW_MS for f in finals)
    assert all(record.key == record.value["region"] for record in outputs[HOURLY_TOPIC])

    late = sorted((r.value["order_id"], r.value["item"]) for r in outputs[LATE_LINES_TOPIC])
    assert late == sorted((line.order_id, line.item) for line in expected.late)

    first_copies = [o for o in orders if not o.duplicate]
    invalid = [o for o in first_copies if o.defect is not None]
    rejected = outputs[REJECTED_TOPIC]
    assert sorted(r.value["order"]["order_id"] for r in rejected) == sorted(o.value["order_id"] for o in invalid)
    assert all(r.value["reason"] for r in rejected)

    valid = [o for o in first_copies if o.defect is None]
    # Each valid order updates its user's profile: the last update per user is the oracle's profile.
    profiles = {r.key: r.value for r in outputs[PROFILES_TOPIC]}
    assert len(outputs[PROFILES_TOPIC]) == len(valid) and profiles == oracle.profiles(orders, items)
    assert stored_profiles(database) == oracle.profiles(orders, items)  # the profile service's table
    assert all(r.value["version"] == index + 1 for user in profiles
               for index, r in enumerate(r for r in outputs[PROFILES_TOPIC] if r.key == user))
    assert CATEGORIES == generators.CATEGORIES
    assert all(outputs[CATEGORY_TOPIC_PREFIX + c] for c in CATEGORIES), "every category has lines"
    lines = outputs[LINES_TOPIC]
    assert sorted((r.value["order_id"], r.value["item"]) for r in lines) == \
        sorted((o.value["order_id"], line["item"]) for o in valid for line in o.value["items"])
    assert all(r.key == r.value["user"] for r in lines)
    assert not any("card_number" in r.value for r in lines), "lines carry no card number"
    # Sensitive fields: encrypted in every output, readable with the key; the card also masked for people.
    encryption = load_encryption()
    sent = {o.value["order_id"]: o.value for o in invalid}
    for record in rejected:
        order, clear = record.value["order"], sent[record.value["order"]["order_id"]]
        assert all(is_encrypted(order[field]) for field in ("card_number", "address", "phone"))
        decrypted = encryption.decrypt_fields(record.value, ["order.card_number", "order.address", "order.phone"])
        assert [decrypted["order"][f] for f in ("card_number", "address", "phone")] == \
            [clear["card_number"], clear["address"], clear["phone"]]
        assert order["card_masked"] == "*" * 12 + clear["card_number"][-4:]
    contact = {o.value["order_id"]: (o.value["address"], o.value["phone"]) for o in valid}
    for record in lines:
        assert is_encrypted(record.value["address"]) and is_encrypted(record.value["phone"])
        decrypted = encryption.decrypt_fields(record.value, ["address", "phone"])
        assert (decrypted["address"], decrypted["phone"]) == contact[record.value["order_id"]]
    # Each line also in its category's topic, and only there.
    category_of = {item.key: item.value["category"] for item in items}
    for category in generators.CATEGORIES:
        routed = outputs[CATEGORY_TOPIC_PREFIX + category]
        assert sorted((r.value["order_id"], r.value["item"]) for r in routed) == \
            sorted((r.value["order_id"], r.value["item"]) for r in lines if category_of[r.value["item"]] == category)

    duplicates = sum(o.duplicate for o in orders)
    assert duplicates > 100
    assert metrics["dropped_records"] == duplicates + len(expected.late)


def test_a_copy_of_an_order_after_the_dedupe_ttl_is_processed_again() -> None:
    users, items = generators.users(3), generators.items(3)
    order = generators.orders(1, users=3, items=3)[0]
    ttl = timedelta(minutes=5)
    again_in = GeneratedRecord(order.key, order.value, order.timestamp + int(ttl.total_seconds() * 1000) - 1)
    again_out = GeneratedRecord(order.key, order.value, order.timestamp + int(ttl.total_seconds() * 1000) + 1)
    outputs, metrics = run([order, again_in, again_out], users, items, dedupe_ttl=ttl)
    assert len(outputs[LINES_TOPIC]) == 2 * len(order.value["items"])  # the first and the copy after the TTL
    assert len(outputs[PROFILES_TOPIC]) == 1  # a profile counts an order id once
    assert metrics["dropped_records"] == 2  # the copy within the TTL (dedupe), the one after it (profile)
