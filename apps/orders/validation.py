"""Rules of a valid order, what a line carries, and the card number's human-readable mask."""

from __future__ import annotations

from typing import Any

from msgspec.structs import asdict

from apps.orders.records import Order


def rejection_reason(user: str | None, order: Order | None) -> str | None:
    """Why an order is invalid, or None when it is valid."""
    if order is None:
        return "no order (a null value)"
    if not user or order.user != user:
        return "missing user or user differs from the key"
    if not order.items:
        return "no items"
    total = 0.0
    for line in order.items:
        if line.qty <= 0:
            return f"item {line.item!r}: quantity {line.qty!r} is not positive"
        if line.price < 0:
            return f"item {line.item!r}: price {line.price!r} is negative"
        total += line.qty * line.price
    if abs(round(total, 2) - order.amount) > 0.005:
        return f"amount {order.amount!r} is not the sum of the lines ({round(total, 2)})"
    return None


def masked_card(card_number: str | None) -> str:
    """The card number with all but its last four digits masked (``************1486``)."""
    card = card_number or ""
    return "*" * max(0, len(card) - 4) + card[-4:]


def rejected(user: str | None, order: Order | None) -> dict[str, Any]:
    """The ``orders-rejected`` value: the order (its card number also masked, for people) and why."""
    if order is None:
        return {"order": None, "reason": rejection_reason(user, order)}
    return {"order": {**asdict(order), "items": [asdict(line) for line in order.items],
                      "card_masked": masked_card(order.card_number)},
            "reason": rejection_reason(user, order)}


def delivery(order: Order) -> dict[str, Any]:
    """What the lines of a valid order carry from it: its id, user, region, time, delivery address and phone, and
    its items (the card number stays behind)."""
    return {"order_id": order.order_id, "user": order.user, "region": order.region, "ts": order.ts,
            "address": order.address, "phone": order.phone,
            "items": [(line.item, line.qty, line.price, line.category) for line in order.items]}


def item_lines(order: dict[str, Any]) -> list[dict[str, Any]]:
    """One record per item line of :func:`delivery`'s value, carrying the order's id, user, region, contact and
    time."""
    return [{"order_id": order["order_id"], "user": order["user"], "region": order["region"], "item": item,
             "qty": qty, "price": price, "category": category, "address": order["address"], "phone": order["phone"],
             "ts": order["ts"]}
            for item, qty, price, category in order["items"]]
