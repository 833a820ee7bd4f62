"""The orders pipeline's typed input records, read through ``Serdes.Json(<type>)`` (msgspec).

As the orders example Brook was designed from reads ``Order``, ``OrderUser`` and ``Item`` objects through typed
serdes (Kafka Streams' ``Serdes.serdeFrom(Order.class)``, Faust's ``faust.Record``): a value that is not JSON or
does not fit its type (a field missing or of the wrong type) is a deserialization error naming the field, handled
by ``default.deserialization.exception.handler`` (``fail`` by default: the worker stops naming the record;
``dead_letter`` sends it to ``orders-dlq`` with its offset). A value that fits
but breaks a business rule (no items, a negative quantity, an amount that is not the sum) is an *invalid* order,
rejected with its reason by the pipeline (:mod:`apps.orders.validation`).

The sensitive fields (``card_number``, ``address``, ``phone``) arrive in clear from the order service; the
pipeline encrypts them in everything it writes (:mod:`apps.orders.protection`).
"""

from __future__ import annotations

import msgspec


class Line(msgspec.Struct, kw_only=True):
    """One item line of an order: ``qty`` of ``item`` at unit ``price``."""

    item: str
    qty: int
    price: float
    category: str | None = None


class Order(msgspec.Struct, kw_only=True):
    """An order, keyed by its user id (``user``, None for an order without one)."""

    order_id: str
    user: str | None
    items: list[Line]
    amount: float
    region: str
    ts: int
    card_number: str | None = None
    address: str | None = None
    phone: str | None = None


class OrderUser(msgspec.Struct, kw_only=True):
    """A row of the ``users`` table, keyed by user id."""

    name: str
    region: str
    address: str | None = None
    phone: str | None = None


class Item(msgspec.Struct, kw_only=True):
    """A row of the ``items`` table, keyed by item id; ``region`` is where it is made."""

    name: str
    region: str
    price: float
    category: str | None = None
