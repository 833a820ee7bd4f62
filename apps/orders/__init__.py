"""The orders pipeline (the reference application): :func:`topology` in :mod:`apps.orders.pipeline`,
its rules in :mod:`apps.orders.validation`, and what it must output in :mod:`apps.orders.oracle`."""

from apps.orders.pipeline import (
    APPLICATION_ID,
    CATEGORY_TOPICS,
    HOURLY_TOPIC,
    ITEMS_TOPIC,
    LATE_LINES_TOPIC,
    LINES_TOPIC,
    ORDERS_TOPIC,
    OUTPUT_TOPICS,
    REJECTED_TOPIC,
    USERS_TOPIC,
    topology,
)

__all__ = ["APPLICATION_ID", "CATEGORY_TOPICS", "HOURLY_TOPIC", "ITEMS_TOPIC", "LATE_LINES_TOPIC", "LINES_TOPIC",
           "ORDERS_TOPIC", "OUTPUT_TOPICS", "REJECTED_TOPIC", "USERS_TOPIC", "topology"]
