"""What the orders pipeline must output, computed in plain Python from the generated data.

Independent of the pipeline's code: which orders are valid and which are duplicates comes from the
generator's flags (``defect``, ``duplicate``), regions from the users and items records, windows and
lateness from the definitions (a line is late when its window's end plus grace is at or before the
stream time, the highest timestamp its task has seen including its own; a window's final is emitted
once stream time reaches its end plus grace).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from streaming.testing import GeneratedRecord


@dataclass(frozen=True)
class LocalLine:
    """An order line whose item is made in the buyer's region."""

    order_id: str
    item: str
    user: str
    region: str
    timestamp: int


@dataclass
class HourlyFinals:
    """Per ``(region, window_start)``: the distinct buyers and the number of lines of each emitted final;
    and the lines dropped as late."""

    buyers: dict[tuple[str, int], set[str]] = field(default_factory=dict)
    lines: dict[tuple[str, int], int] = field(default_factory=dict)
    late: list[LocalLine] = field(default_factory=list)


def local_lines(orders: Iterable[GeneratedRecord], users: Iterable[GeneratedRecord],
                items: Iterable[GeneratedRecord]) -> list[LocalLine]:
    """The lines of valid, first-sent orders whose item is made in the buyer's region, in input order."""
    user_region = {record.key: record.value["region"] for record in users}
    item_region = {record.key: record.value["region"] for record in items}
    result = []
    for order in orders:
        if order.defect is not None or order.duplicate:
            continue
        region = user_region[order.key]
        result.extend(LocalLine(order.value["order_id"], line["item"], order.key, region, order.timestamp)
                      for line in order.value["items"] if item_region[line["item"]] == region)
    return result


def window_of(timestamp: int, window_ms: int) -> int:
    """The start of the tumbling window holding ``timestamp``."""
    return timestamp - timestamp % window_ms


def hourly_buyers(lines: Iterable[LocalLine], window_ms: int) -> dict[tuple[str, int], set[str]]:
    """Distinct buyers per ``(region, window_start)`` over all ``lines``, lateness ignored."""
    buyers: dict[tuple[str, int], set[str]] = {}
    for line in lines:
        buyers.setdefault((line.region, window_of(line.timestamp, window_ms)), set()).add(line.user)
    return buyers


def split_by_lateness(orders: list[GeneratedRecord], users: Iterable[GeneratedRecord],
                      items: Iterable[GeneratedRecord]) -> tuple[list[LocalLine], list[LocalLine]]:
    """The local lines as ``(on_time, late)`` by the generator's ``late`` flag of their order.

    Exact when the orders' ``lateness_ms`` exceeds window plus grace (a late order lands behind every
    open window) and grace exceeds the out-of-order delay plus how far apart in event time the tasks
    read their partitions (orders fed as they would arrive, not a backlog read at once)."""
    late_ids = {order.value["order_id"] for order in orders if order.late and not order.duplicate}
    on_time, late = [], []
    for line in local_lines(orders, users, items):
        (late if line.order_id in late_ids else on_time).append(line)
    return on_time, late


def hourly_lines(lines: Iterable[LocalLine], window_ms: int) -> dict[tuple[str, int], int]:
    """Lines per ``(region, window_start)``."""
    counts: dict[tuple[str, int], int] = {}
    for line in lines:
        window = (line.region, window_of(line.timestamp, window_ms))
        counts[window] = counts.get(window, 0) + 1
    return counts


def finals_of_one_task(lines: Iterable[LocalLine], window_ms: int, grace_ms: int) -> HourlyFinals:
    """The finals when every line reaches one aggregating task in this order (the test driver: one
    partition per topic), after the last line."""
    finals = HourlyFinals()
    stream_time = -1
    for line in lines:
        stream_time = max(stream_time, line.timestamp)
        start = window_of(line.timestamp, window_ms)
        if start + window_ms + grace_ms <= stream_time:
            finals.late.append(line)
            continue
        finals.buyers.setdefault((line.region, start), set()).add(line.user)
        finals.lines[(line.region, start)] = finals.lines.get((line.region, start), 0) + 1
    for window in [w for w in finals.buyers if w[1] + window_ms + grace_ms > stream_time]:  # still open
        del finals.buyers[window], finals.lines[window]
    return finals


def profiles(orders: Iterable[GeneratedRecord], items: Iterable[GeneratedRecord]) -> dict[str, dict[str, Any]]:
    """Each user's profile after all their valid, first-sent orders (``user-profiles``' last value per user, and the
    database's row): orders, total spent (rounded to cents at each step), latest order time, item quantities per
    category (from the items table), and ``version``, the number of updates."""
    category = {record.key: record.value["category"] for record in items}
    result: dict[str, dict[str, Any]] = {}
    for order in orders:
        if order.defect is not None or order.duplicate:
            continue
        profile = result.setdefault(order.key, {"orders": 0, "total_spent": 0.0, "last_order_ts": None,
                                                "items_per_category": {}, "version": 0})
        per_category = profile["items_per_category"]
        for line in order.value["items"]:
            per_category[category[line["item"]]] = per_category.get(category[line["item"]], 0) + line["qty"]
        last = profile["last_order_ts"]
        profile.update(orders=profile["orders"] + 1, total_spent=round(profile["total_spent"] + order.value["amount"], 2),
                       last_order_ts=order.timestamp if last is None else max(last, order.timestamp),
                       version=profile["version"] + 1)
    return result
