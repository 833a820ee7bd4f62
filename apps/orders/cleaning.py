"""The stateless stage of the orders pipeline: validate, reject with a reason, mask, split into lines."""

from __future__ import annotations

from apps.orders.validation import item_lines, mask, rejection_reason
from streaming import Serdes, StreamsBuilder, Topology

ORDERS_TOPIC = "orders"
LINES_TOPIC = "order-lines"
REJECTED_TOPIC = "orders-rejected"


def cleaning_topology() -> Topology:
    """``orders`` -> valid: masked, one record per item line -> ``order-lines``;
    invalid: the order plus ``reason`` -> ``orders-rejected``."""
    builder = StreamsBuilder()
    orders = builder.stream(ORDERS_TOPIC, key_serde=Serdes.String(), value_serde=Serdes.Json())
    branches = (orders.split(name="orders-")
                .branch(lambda user, order: rejection_reason(user, order) is None, name="valid")
                .default_branch(name="invalid"))
    branches["orders-valid"].map_values(mask).flat_map_values(item_lines).to(LINES_TOPIC)
    branches["orders-invalid"].map_values(
        lambda user, order: {"order": order, "reason": rejection_reason(user, order)}).to(REJECTED_TOPIC)
    return builder.build()
