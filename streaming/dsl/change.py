"""``Change``: the value table nodes pass each other, and its framing on a table's repartition topic."""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple


class Change(NamedTuple):
    """A table update: the key's ``new`` value and its ``old`` one (None: absent, or not asked for).

    ``Change(None, old)`` is a delete. Table operations forward the old value only when a node
    downstream asked for it (``KTable.group_by`` must subtract it; a table ``filter`` compares it), as
    Kafka Streams' ``sendOldValues``. ``KTable.to_stream()`` forwards ``new`` alone.
    """

    new: Any
    old: Any


#: ``changed((new, old))`` is ``Change(new, old)`` without the NamedTuple constructor's Python call (per-record paths).
changed = partial(tuple.__new__, Change)


# Framing of a KGroupedTable's repartition records and a suppression buffer's entries: a flag byte, then the
# serialized values. NEITHER is a delete whose old value was not asked for (``Change(None, None)``).
_NEITHER, _NEW, _OLD, _BOTH = 0, 1, 2, 3


def encode_change(new: bytes | None, old: bytes | None) -> bytes:
    """``new``/``old`` serialized values as one value (internal format, not Kafka Streams'
    ``ChangedSerializer``: these records are read only by this application). A None stays None, an empty
    value stays empty."""
    if old is None:
        return b"\x00" if new is None else b"\x01" + new
    if new is None:
        return b"\x02" + old
    return b"\x03" + len(new).to_bytes(4, "big") + new + old


def decode_change(data: bytes) -> tuple[bytes | None, bytes | None]:
    """``(new, old)`` serialized values of a record written by :func:`encode_change`."""
    flag = data[0]
    if flag == _NEITHER and len(data) == 1:
        return None, None
    if flag == _NEW:
        return data[1:], None
    if flag == _OLD:
        return None, data[1:]
    if flag == _BOTH:
        size = int.from_bytes(data[1:5], "big")
        return data[5:5 + size], data[5 + size:]
    raise ValueError(f"not a table repartition record (flag byte {flag})")
