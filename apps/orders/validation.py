"""Rules of a valid order, and masking of its sensitive fields."""

from __future__ import annotations

from typing import Any


def rejection_reason(user: str | None, order: Any) -> str | None:
    """Why an order is invalid, or None when it is valid."""
    if not isinstance(order, dict):
        return "value is not a JSON object"
    if not user or order.get("user") != user:
        return "missing user or user differs from the key"
    lines = order.get("items")
    if not isinstance(lines, list) or not lines:
        return "no items"
    total = 0.0
    for line in lines:
        qty, price = line.get("qty"), line.get("price")
        if not isinstance(qty, int) or qty <= 0:
            return f"item {line.get('item')!r}: quantity {qty!r} is not positive"
        if not isinstance(price, (int, float)) or price < 0:
            return f"item {line.get('item')!r}: price {price!r} is negative"
        total += qty * price
    if abs(round(total, 2) - order.get("amount", -1)) > 0.005:
        return f"amount {order.get('amount')!r} is not the sum of the lines ({round(total, 2)})"
    return None


def mask(order: dict[str, Any]) -> dict[str, Any]:
    """The order with its card number masked to the last four digits."""
    card = str(order.get("card_number") or "")
    return {**order, "card_number": "*" * max(0, len(card) - 4) + card[-4:]}


def item_lines(order: dict[str, Any]) -> list[dict[str, Any]]:
    """One record per item line, carrying the order's id, user, region and time."""
    return [{"order_id": order["order_id"], "user": order["user"], "region": order["region"],
             "item": line["item"], "qty": line["qty"], "price": line["price"], "ts": order["ts"]}
            for line in order["items"]]
