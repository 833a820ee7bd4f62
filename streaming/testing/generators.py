"""Deterministic generators of test data: words, orders, users and items.

Every generator is seeded (same arguments, same records, on any machine and Python run) and returns a
list of :class:`GeneratedRecord`, which a :class:`~streaming.testing.TestInputTopic` pipes directly
(``topic.pipe_record_list(records)``; it reads ``key``, ``value``, ``timestamp`` and ``headers``).

Event time and disorder (shared by ``words`` and ``orders``, see :func:`disordered_timestamps`):

- In-order records get ``start_ms + i * step_ms`` for their position ``i``, so the maximum timestamp
  seen so far ("stream time") grows by ``step_ms`` per in-order record.
- An **out-of-order** record is behind the maximum so far by 1 to ``max_disorder_ms`` ms, but never
  by more than ``lateness_ms`` (when given): it still falls within the grace period.
- A **late** record is behind the maximum so far by more than ``lateness_ms`` (``lateness_ms + 1`` to
  ``lateness_ms + max_disorder_ms``): windowed operations with ``grace=lateness_ms`` drop it (as long
  as the window size does not push its end past the current stream time).
- ``out_of_order`` and ``late`` are the shares (0.0-1.0) of all records in each class; the classes are
  exclusive (so ``out_of_order + late <= 1``) and the counts are exact, ``round(share * count)``,
  unless timestamps would have to go below 0 (then fewer). The first record is always in order.
  Each record's ``out_of_order`` / ``late`` flags say which class it is in, for assertions.

Catalog: ``users(n)`` and ``items(n)`` describe users ``user-000 .. user-{n-1}`` and items
``item-000 .. item-{n-1}``; a user's name and region and an item's name, region and price depend only
on its index and ``catalog_seed`` (``seed`` of ``users``/``items``), so ``orders(..., catalog_seed=s)``
agrees with ``users(..., seed=s)`` and ``items(..., seed=s)`` whatever the orders' own ``seed``.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CATEGORIES",
    "DEFAULT_VOCABULARY",
    "ORDERS_START_MS",
    "REGIONS",
    "GeneratedRecord",
    "disordered_timestamps",
    "items",
    "orders",
    "users",
    "words",
]

# 2023-11-14T22:00:00Z: an hour boundary, so hourly windows of generated orders start on it.
ORDERS_START_MS = 1_699_999_200_000

REGIONS: tuple[str, ...] = ("eu", "us", "apac", "latam")

DEFAULT_VOCABULARY: tuple[str, ...] = (
    "the", "a", "stream", "table", "kafka", "brook", "record", "key", "value", "window", "time", "event",
    "late", "order", "user", "item", "join", "count", "state", "store", "topic", "partition", "offset",
    "task", "commit", "river", "flows", "fast", "slow", "quiet", "water", "stone", "bridge", "over",
    "under", "and", "of", "to", "in", "on",
)

_FIRST_NAMES = ("Ada", "Alan", "Barbara", "Claude", "Dennis", "Edsger", "Frances", "Grace", "Hedy", "Ivan",
                "Jean", "Ken", "Leslie", "Margaret", "Niklaus", "Radia", "Shafi", "Tim", "Vint", "Whitfield")
_LAST_NAMES = ("Lovelace", "Turing", "Liskov", "Shannon", "Ritchie", "Dijkstra", "Allen", "Hopper",
               "Lamarr", "Sutherland", "Bartik", "Thompson", "Lamport", "Hamilton", "Wirth", "Perlman")
_ADJECTIVES = ("red", "blue", "small", "large", "steel", "wooden", "smart", "quiet", "fast", "solar")
_NOUNS = ("lamp", "chair", "kettle", "bike", "phone", "desk", "clock", "drone", "boot", "radio")
#: Each noun's item category: what the orders pipeline routes a line by (``order-lines-<category>``).
_CATEGORY_OF_NOUN = {"lamp": "home", "chair": "home", "kettle": "home", "desk": "home", "clock": "home",
                     "phone": "electronics", "drone": "electronics", "radio": "electronics", "bike": "outdoor",
                     "boot": "fashion"}
CATEGORIES: tuple[str, ...] = ("electronics", "fashion", "home", "outdoor")
_STREETS = ("Main St", "Harbour Rd", "Station Ave", "Mill Lane", "Park Blvd", "Kings Way", "River St", "Oak Ave")
_CITIES = ("Lisbon", "Austin", "Osaka", "Lima", "Ghent", "Denver", "Pune", "Quito")

DEFECTS: tuple[str, ...] = ("no_items", "bad_qty", "bad_price", "no_user", "bad_amount")


@dataclass(frozen=True)
class GeneratedRecord:
    """One generated record.

    ``key``, ``value``, ``timestamp`` (event time, epoch ms) and ``headers`` are what gets piped. The
    other fields describe the record for assertions and are not sent:

    - ``out_of_order``: behind the maximum timestamp so far, within ``lateness_ms``;
    - ``late``: behind the maximum timestamp so far by more than ``lateness_ms``;
    - ``duplicate``: (orders) re-sends the previous order unchanged (same key, value and timestamp);
    - ``defect``: (orders) why the order is invalid (one of ``DEFECTS``), or None when it is valid.
    """

    key: Any
    value: Any
    timestamp: int
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    out_of_order: bool = False
    late: bool = False
    duplicate: bool = False
    defect: str | None = None


# -- time -------------------------------------------------------------------------------------------------

def _share(name: str, share: float) -> float:
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 <= share <= 1.0:
        raise ValueError(f"{name} must be a share between 0.0 and 1.0, got {share!r}")
    return float(share)


def disordered_timestamps(count: int, rng: random.Random, *, start_ms: int = 0, step_ms: int = 1000,
                          out_of_order: float = 0.0, max_disorder_ms: int = 5000, late: float = 0.0,
                          lateness_ms: int | None = None) -> list[tuple[int, bool, bool]]:
    """``count`` event times as ``(timestamp, out_of_order, late)``, with the asked shares of disorder.

    See the module docstring for the classes. ``lateness_ms=None`` means no lateness bound: out-of-order
    records are behind by up to ``max_disorder_ms`` and ``late`` must be 0.
    """
    if not isinstance(count, int) or count < 0:
        raise ValueError(f"count must be a non-negative int, got {count!r}")
    if start_ms < 0 or step_ms < 0:
        raise ValueError(f"start_ms and step_ms must be >= 0, got {start_ms} and {step_ms}")
    out_of_order = _share("out_of_order", out_of_order)
    late = _share("late", late)
    if out_of_order + late > 1.0:
        raise ValueError(f"out_of_order + late must be <= 1 (the classes are exclusive), "
                         f"got {out_of_order} + {late}")
    if (out_of_order or late) and max_disorder_ms < 1:
        raise ValueError(f"max_disorder_ms must be >= 1 when records are disordered, got {max_disorder_ms}")
    if late and lateness_ms is None:
        raise ValueError("late records need lateness_ms (how far behind the maximum makes a record late)")
    if lateness_ms is not None and lateness_ms < 0:
        raise ValueError(f"lateness_ms must be >= 0, got {lateness_ms}")
    if out_of_order and lateness_ms == 0:
        raise ValueError("out-of-order records within lateness_ms=0 cannot exist; use late= instead")

    # Which positions are disordered (never the first: nothing is behind before it).
    n_late = round(late * count)
    n_ooo = round(out_of_order * count)
    positions = list(range(1, count))
    chosen = rng.sample(positions, min(len(positions), n_late + n_ooo))
    late_at = set(chosen[:n_late])
    ooo_at = set(chosen[n_late:])

    ooo_max = max_disorder_ms if lateness_ms is None else min(max_disorder_ms, lateness_ms)
    result: list[tuple[int, bool, bool]] = []
    high = -1  # maximum timestamp so far
    pending_late = pending_ooo = 0  # chosen where no room below 0: placed at the next position with room
    for i in range(count):
        pending_late += i in late_at
        pending_ooo += i in ooo_at
        if pending_late and lateness_ms is not None and high - lateness_ms - 1 >= 0:
            behind = rng.randint(lateness_ms + 1, min(lateness_ms + max_disorder_ms, high))
            result.append((high - behind, False, True))
            pending_late -= 1
        elif pending_ooo and high >= 1:
            behind = rng.randint(1, min(ooo_max, high))
            result.append((high - behind, True, False))
            pending_ooo -= 1
        else:
            timestamp = max(start_ms + i * step_ms, high)
            result.append((timestamp, False, False))
            high = timestamp
    return result


# -- words -------------------------------------------------------------------------------------------------

def words(count: int, *, seed: int = 0, vocabulary: list[str] | tuple[str, ...] | None = None,
          words_per_line: tuple[int, int] = (1, 8), start_ms: int = 0, step_ms: int = 1000,
          out_of_order: float = 0.0, max_disorder_ms: int = 5000, late: float = 0.0,
          lateness_ms: int | None = None) -> list[GeneratedRecord]:
    """``count`` lines of text for a word count.

    key: the line id, ``"line-<i>"`` (``i`` from 0, the position in the list);
    value: a line of ``words_per_line`` (inclusive range) lower-case words from ``vocabulary`` (default
    :data:`DEFAULT_VOCABULARY`), separated by single spaces;
    timestamp: event time, see the module docstring.
    """
    rng = random.Random(f"words/{seed}")
    vocab = tuple(vocabulary) if vocabulary is not None else DEFAULT_VOCABULARY
    if not vocab:
        raise ValueError("vocabulary must not be empty")
    low, high = words_per_line
    if not 1 <= low <= high:
        raise ValueError(f"words_per_line must be (min, max) with 1 <= min <= max, got {words_per_line!r}")
    times = disordered_timestamps(count, rng, start_ms=start_ms, step_ms=step_ms, out_of_order=out_of_order,
                                  max_disorder_ms=max_disorder_ms, late=late, lateness_ms=lateness_ms)
    records = []
    for i, (timestamp, is_ooo, is_late) in enumerate(times):
        line = " ".join(rng.choice(vocab) for _ in range(rng.randint(low, high)))
        records.append(GeneratedRecord(f"line-{i}", line, timestamp, out_of_order=is_ooo, late=is_late))
    return records


# -- catalog: users and items -------------------------------------------------------------------------------

def _user_id(index: int) -> str:
    return f"user-{index:03d}"


def _item_id(index: int) -> str:
    return f"item-{index:03d}"


def _user(index: int, catalog_seed: int, regions: tuple[str, ...]) -> dict[str, Any]:
    rng = random.Random(f"user/{catalog_seed}/{index}")
    user = {"name": f"{rng.choice(_FIRST_NAMES)} {rng.choice(_LAST_NAMES)}", "region": rng.choice(regions)}
    # The contact details draw from a generator of their own, so that adding them left names and regions as they were.
    contact = random.Random(f"user-contact/{catalog_seed}/{index}")
    return {**user, "address": f"{contact.randint(1, 999)} {contact.choice(_STREETS)}, {contact.choice(_CITIES)}",
            "phone": f"+1-555-{contact.randint(0, 9999):04d}-{contact.randint(0, 999):03d}"}


def _item(index: int, catalog_seed: int, regions: tuple[str, ...]) -> dict[str, Any]:
    rng = random.Random(f"item/{catalog_seed}/{index}")
    noun = (rng.choice(_ADJECTIVES), rng.choice(_NOUNS))
    return {"name": " ".join(noun), "region": rng.choice(regions), "price": rng.randint(100, 20_000) / 100,
            "category": _CATEGORY_OF_NOUN[noun[1]]}


def users(count: int = 100, *, seed: int = 0, start_ms: int = ORDERS_START_MS,
          regions: tuple[str, ...] = REGIONS) -> list[GeneratedRecord]:
    """The users table: one record per user, all at ``start_ms``.

    key: the user id, ``"user-000"`` .. (zero-padded to 3 digits, wider past 999);
    value: ``{"name": "Grace Hopper", "region": "eu", "address": "12 Mill Lane, Ghent", "phone": "+1-555-0042-007"}``
    — ``region`` is one of ``regions``; ``address`` and ``phone`` are sensitive (the orders pipeline encrypts them).
    """
    return [GeneratedRecord(_user_id(i), _user(i, seed, tuple(regions)), start_ms) for i in range(count)]


def items(count: int = 50, *, seed: int = 0, start_ms: int = ORDERS_START_MS,
          regions: tuple[str, ...] = REGIONS) -> list[GeneratedRecord]:
    """The items table: one record per item, all at ``start_ms``.

    key: the item id, ``"item-000"`` .. (what order lines name in ``item``);
    value: ``{"name": "red lamp", "region": "us", "price": 12.5, "category": "home"}`` — ``region`` is where the
    item is made (one of ``regions``), ``price`` its unit price (what order lines charge), ``category`` one of
    :data:`CATEGORIES`.
    """
    return [GeneratedRecord(_item_id(i), _item(i, seed, tuple(regions)), start_ms) for i in range(count)]


# -- orders ------------------------------------------------------------------------------------------------

def _card_number(rng: random.Random) -> str:
    """A 16-digit Visa-style number that passes the Luhn check (sensitive: mask it before output)."""
    digits = [4] + [rng.randint(0, 9) for _ in range(14)]
    total = 0
    for position, digit in enumerate(reversed(digits)):  # the check digit will sit right of these
        if position % 2 == 0:
            digit *= 2
            if digit > 9:
                digit -= 9
        total += digit
    digits.append((10 - total % 10) % 10)
    return "".join(map(str, digits))


def orders(count: int, *, seed: int = 0, users: int = 100, items: int = 50, catalog_seed: int = 0,
           regions: tuple[str, ...] = REGIONS, max_lines: int = 4, max_qty: int = 5,
           start_ms: int = ORDERS_START_MS, step_ms: int = 1000, out_of_order: float = 0.0,
           max_disorder_ms: int = 60_000, late: float = 0.0, lateness_ms: int = 300_000,
           duplicates: float = 0.0, invalid: float = 0.0) -> list[GeneratedRecord]:
    """``count`` orders keyed by user.

    key: the user id (as :func:`users` gives them; ``None`` for a ``no_user`` defect);
    value::

        {"order_id": "o-00000042",          # unique, except duplicates re-send the previous order's
         "user": "user-007",                 # = the key
         "items": [{"item": "item-012", "qty": 2, "price": 19.99, "category": "home"}, ...],
                                            # 1..max_lines lines, distinct items, qty 1..max_qty,
                                            # price and category = the item's
         "amount": 39.98,                    # sum of qty * price, rounded to cents
         "region": "eu",                     # the user's region (where the order was placed)
         "card_number": "4539578763621486",  # sensitive: 16 digits, Luhn-valid
         "address": "12 Mill Lane, Ghent",   # sensitive: the user's (delivery) address
         "phone": "+1-555-0042-007",         # sensitive: the user's phone
         "ts": 1699999200000}                # event time (epoch ms) = the record's timestamp

    ``duplicates``: share of records that re-send the previous order unchanged (same key, value and
    timestamp, flagged ``duplicate``); only placed after an in-order record, so they are never
    themselves out of order. ``invalid``: share of orders with one defect (flagged ``defect``):
    ``no_items`` (empty list), ``bad_qty`` (a qty <= 0), ``bad_price`` (a negative price), ``no_user``
    (user and key None), ``bad_amount`` (amount not the sum of the lines). Disorder: module docstring.
    """
    if users < 1 or items < 1:
        raise ValueError(f"orders need at least one user and one item, got users={users}, items={items}")
    if max_lines < 1 or max_qty < 1:
        raise ValueError(f"max_lines and max_qty must be >= 1, got {max_lines} and {max_qty}")
    duplicates = _share("duplicates", duplicates)
    invalid = _share("invalid", invalid)
    regions = tuple(regions)
    rng = random.Random(f"orders/{seed}")
    times = disordered_timestamps(count, rng, start_ms=start_ms, step_ms=step_ms, out_of_order=out_of_order,
                                  max_disorder_ms=max_disorder_ms, late=late, lateness_ms=lateness_ms)
    catalog_users = [_user(i, catalog_seed, regions) for i in range(users)]
    catalog_items = [_item(i, catalog_seed, regions) for i in range(items)]

    # A duplicate at i copies record i-1: both must be in order so the copy's timestamp is the maximum.
    candidates = [i for i in range(1, count) if not any(times[i][1:]) and not any(times[i - 1][1:])]
    duplicate_at = set(rng.sample(candidates, min(len(candidates), round(duplicates * count))))
    defect_positions = [i for i in range(count) if i not in duplicate_at]
    defect_at = set(rng.sample(defect_positions, min(len(defect_positions), round(invalid * count))))

    records: list[GeneratedRecord] = []
    number = 0
    for i, (timestamp, is_ooo, is_late) in enumerate(times):
        if i in duplicate_at:
            previous = records[-1]
            records.append(GeneratedRecord(previous.key, copy.deepcopy(previous.value), previous.timestamp,
                                           duplicate=True, defect=previous.defect))
            continue
        user_index = rng.randrange(users)
        user = _user_id(user_index)
        chosen_items = rng.sample(range(items), rng.randint(1, min(max_lines, items)))
        lines = [{"item": _item_id(j), "qty": rng.randint(1, max_qty), "price": catalog_items[j]["price"],
                  "category": catalog_items[j]["category"]} for j in chosen_items]
        defect = rng.choice(DEFECTS) if i in defect_at else None
        if defect == "no_items":
            lines = []
        elif defect == "bad_qty":
            lines[0]["qty"] = -rng.randint(0, max_qty)
        elif defect == "bad_price":
            lines[0]["price"] = -lines[0]["price"]
        amount = round(sum(line["qty"] * line["price"] for line in lines), 2)
        if defect == "bad_amount":
            amount = round(amount + rng.randint(1, 10_000) / 100, 2)
        if defect == "no_user":
            user = None
        value = {"order_id": f"o-{number:08d}", "user": user, "items": lines, "amount": amount,
                 "region": catalog_users[user_index]["region"], "card_number": _card_number(rng),
                 "address": catalog_users[user_index]["address"], "phone": catalog_users[user_index]["phone"],
                 "ts": timestamp}
        number += 1
        records.append(GeneratedRecord(user, value, timestamp, out_of_order=is_ooo, late=is_late,
                                       defect=defect))
    return records
