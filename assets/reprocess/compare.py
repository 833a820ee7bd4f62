"""Batch equals live: a reprocessed app's outputs compared, record for record, with what its live workers wrote.

What "equal" means (docs/reprocessing.md): per output topic and key, the records the batch runs wrote, in order
(day by day, each day by partition and offset), are the *first* records the live workers wrote for that key — the
same key and value bytes, the same timestamp, in the same order. The batch's runs may stop before the live run did
(a day's run ends at its frontier), so live records after the batch's are not differences; ``complete_before``
says which of them must not be there (every live record of a key older than it must be among the batch's).

What a live run does not determine is compared without order, so that the comparison finds differences of the
batch and never of live timing:

- records of one key with the same timestamp are compared in value order (two lines of one order reach a topic from
  two tasks, in either order live);
- records with a null key are compared as a set: live, a producer puts each on a random partition, batch on
  partition 0;
- ``ordered=False`` compares each key's records as a multiset (a topic that several tasks write one key to within
  one stream-time instant, such as the word count's repartition topic).

Encrypted fields (``streaming.encryption``) carry a random nonce, so the same clear value is different bytes in
each run: ``clear_value`` maps each value (batch and live alike) to its clear form first, e.g. the orders app's
``ClearJsonSerde(...).clear_bytes``.

Used by ``tests/integration/test_reprocess_equals_live.py`` and by ``make demo`` (``apps.demo_platform``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from itertools import groupby
from pathlib import Path
from typing import Any

from assets.archive.layout import RAW_DIR, day_dir

__all__ = ["OutputRecord", "TopicComparison", "by_key", "compare_outputs", "live_records", "reprocessed_records"]

OutputRecord = tuple[bytes | None, bytes | None, int]
"""``(key bytes, value bytes, timestamp in epoch ms)``."""

#: Differences kept per topic (the first ones found, key by key in key order).
MAX_DIFFERENCES = 5


@dataclass
class TopicComparison:
    """One output topic, batch against live."""

    topic: str
    ordered: bool
    batch_records: int
    live_records: int
    keys: int
    """Keys the batch wrote."""
    leftover: int
    """Live records after the batch's (per key, those past the batch's last one)."""
    differences: list[str] = field(default_factory=list)
    """The first differences (at most :data:`MAX_DIFFERENCES`), one line each."""
    different_keys: int = 0
    """Keys with a difference (all of them, not only those shown)."""

    @property
    def equal(self) -> bool:
        return self.different_keys == 0


def reprocessed_records(root: Path, app: str, topic: str, days: Iterable[date]) -> list[OutputRecord]:
    """What the reprocessed ``days`` of ``app`` wrote to ``topic`` (``root``: the spec's ``reprocess.location``), day
    by day, each by partition and offset.

    Raises:
        FileNotFoundError: a day of the topic was not reprocessed.
    """
    import pyarrow.dataset as ds

    records: list[OutputRecord] = []
    for day in days:
        directory = day_dir(root / app, topic, day)
        if not directory.is_dir():
            raise FileNotFoundError(f"{topic!r} of app {app!r} has no reprocessed day {day}: {directory} does not exist")
        raw = directory / RAW_DIR
        if not raw.is_dir():
            continue  # the day's run wrote nothing to the topic
        table = ds.dataset(raw, format="parquet").to_table(columns=["partition", "offset", "key", "value", "timestamp"])
        table = table.sort_by([("partition", "ascending"), ("offset", "ascending")])
        micros = table.column("timestamp").cast("int64").to_pylist()
        records.extend((key, value, ts // 1000) for key, value, ts in zip(
            table.column("key").to_pylist(), table.column("value").to_pylist(), micros, strict=True))
    return records


def live_records(records: Iterable[Any]) -> list[OutputRecord]:
    """Records read back from Kafka with byte serdes (objects with ``key``, ``value``, ``timestamp``), in the order
    read (per partition, by offset)."""
    return [(record.key, record.value, record.timestamp) for record in records]


def by_key(records: Iterable[OutputRecord]) -> dict[bytes | None, list[tuple[Any, int]]]:
    """Each key's ``(value, timestamp)`` in order; records of one key with the same timestamp in value order (live,
    their order is not determined when different tasks sent them: the lines of one order, say)."""
    keyed: dict[bytes | None, list[tuple[Any, int]]] = defaultdict(list)
    for key, value, timestamp in records:
        keyed[key].append((value, timestamp))
    for key, sequence in keyed.items():
        runs = [sorted(run, key=_value_order) for _, run in groupby(sequence, key=lambda record: record[1])]
        keyed[key] = [record for run in runs for record in run]
    return keyed


def _value_order(record: tuple[Any, int]) -> tuple[bool, Any, int]:
    value, timestamp = record
    return value is not None, value if value is not None else b"", timestamp


def compare_outputs(batch: list[OutputRecord], live: list[OutputRecord], topic: str, ordered: bool = True,
                    complete_before: int | None = None,
                    clear_value: Callable[[bytes | None], bytes | None] | None = None) -> TopicComparison:
    """Per key, the batch's records are the live ones, in order, up to where the batch stopped (see the module
    doc); ``ordered=False``: as many of each, in any order. ``complete_before`` (epoch ms): every live record of a
    key older than it must be among the batch's records of that key (what the batch's input fully covers).
    ``clear_value``: what each value is compared as (its encrypted fields decrypted; the module doc)."""
    if clear_value is not None:
        batch = [(key, clear_value(value), timestamp) for key, value, timestamp in batch]
        live = [(key, clear_value(value), timestamp) for key, value, timestamp in live]
    batch_keyed, live_keyed = by_key(batch), by_key(live)
    result = TopicComparison(topic, ordered, len(batch), len(live), len(batch_keyed), 0)

    def differ(line: str) -> None:
        result.different_keys += 1
        if len(result.differences) < MAX_DIFFERENCES:
            result.differences.append(line)

    if not batch_keyed:
        differ("the batch wrote nothing")
    for key in sorted(set(batch_keyed) | set(live_keyed), key=lambda k: (k is not None, k or b"")):
        records, lived = batch_keyed.get(key, []), live_keyed.get(key, [])
        if key is None:  # a random partition live: compared as a set
            lived_set, batch_set = set(lived), set(records)
            extra = [r for r in records if r not in lived_set]
            missing = [r for r in lived if complete_before is not None and r[1] < complete_before
                       and r not in batch_set]
            if extra:
                differ(f"null key: {len(extra)} batch records not written live, first {_show(extra[0])}")
            elif missing:
                differ(f"null key: {len(missing)} live records before {_time(complete_before)} missing from the "
                       f"batch, first {_show(missing[0])}")
            result.leftover += len(lived) - len(records) if lived else 0
            continue
        if ordered:
            problem = _first_mismatch(records, lived)
        else:
            surplus = Counter(records) - Counter(lived)
            problem = (f"{sum(surplus.values())} batch records not written live, first {_show(next(iter(surplus)))}"
                       if surplus else None)
        if problem is None and complete_before is not None:
            rest = Counter(lived) - Counter(records)
            missing = sorted((r for r in rest.elements() if r[1] < complete_before), key=lambda r: r[1])
            if missing:
                problem = (f"{len(missing)} live records before {_time(complete_before)} missing from the batch, "
                           f"first {_show(missing[0])}")
        if problem is not None:
            differ(f"key {_text(key)}: {problem}")
        result.leftover += len(lived) - len(records) if lived else 0
    return result


def _first_mismatch(records: list[tuple[Any, int]], lived: list[tuple[Any, int]]) -> str | None:
    for index, record in enumerate(records):
        if index >= len(lived):
            return f"batch record {index + 1} {_show(record)}, live only {len(lived)} records"
        if lived[index] != record:
            return f"record {index + 1}: batch {_show(record)}, live {_show(lived[index])}"
    return None


def _text(value: bytes | None, limit: int = 120) -> str:
    if value is None:
        return "null"
    try:
        text = value.decode()
    except UnicodeDecodeError:
        text = value.hex()
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _time(timestamp: int) -> str:
    return datetime.fromtimestamp(timestamp / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _show(record: tuple[Any, int]) -> str:
    value, timestamp = record
    return f"{_text(value)} @ {_time(timestamp)}"
