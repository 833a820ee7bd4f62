"""The orders pipeline (the reference application).

Built so far: the stateless cleaning stage (validate, mask, split into item lines). Deduplication,
the user and item joins and the hourly windowed count come with the state, windows and joins work.
"""

from apps.orders.cleaning import LINES_TOPIC, ORDERS_TOPIC, REJECTED_TOPIC, cleaning_topology

__all__ = ["LINES_TOPIC", "ORDERS_TOPIC", "REJECTED_TOPIC", "cleaning_topology"]
