"""Where a reset moves an input partition: Kafka Streams' ``--to-earliest``, ``--to-offset``, ``--to-datetime`` and
``--by-duration``, with their rules (``StreamsResetter``: tools/src/main/java/org/apache/kafka/tools/StreamsResetter.java).

- ``--to-earliest`` (the default): the partition's first offset.
- ``--to-offset N``: ``N`` clamped to what exists (``checkOffsetRange``): below the first offset -> the first,
  at or past the end -> the end.
- ``--to-datetime T`` (ISO 8601, ``2023-11-14T23:00:00.000``; without a zone it is UTC, as Kafka's
  ``Utils.getDateTime``) and ``--by-duration D`` (ISO 8601 ``PnDTnHnMn.nS``, back from now): the earliest offset
  whose record timestamp is at or after T (Kafka's ``offsetsForTimes`` contract); a partition with no such record
  goes to its end. A time in the future is refused.

The offset for a time is found from the records' own timestamps, by reading the partition from its first offset to
the first record at or after T: exact whatever the disorder of the timestamps, so the reset never goes further
back than asked (no record before that offset is read again) nor skips a record at or after T that comes first.
The embedded broker's ``offsets_for_times`` cannot be used for it: it answers from append times per batch, not
record timestamps, and 0 for a time after the last batch (measured; ``platform/runbooks/reset.md``).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from confluent_kafka import Consumer, KafkaError, TopicPartition

from streaming.reset.errors import ResetError

__all__ = ["ResetPosition", "clamp", "first_offset_at_or_after", "parse_datetime", "parse_duration"]

Kind = Literal["earliest", "offset", "datetime", "duration"]
_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d{1,3})?)S)?)?$", re.IGNORECASE)


def parse_datetime(text: str) -> int:
    """Epoch ms of an ISO 8601 date and time (``2023-11-14T23:00:00``, ``...00.000Z``, ``...00+01:00``); one
    without a zone is UTC. Raises :class:`ResetError` naming the text."""
    if "T" not in text:
        raise ResetError(f"--to-datetime {text!r} is not an ISO 8601 date and time: expected e.g. "
                         f"2023-11-14T23:00:00.000 (UTC unless a zone is given: Z, +01:00)")
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ResetError(f"--to-datetime {text!r} is not an ISO 8601 date and time: {exc}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def parse_duration(text: str) -> int:
    """Milliseconds of an ISO 8601 duration ``PnDTnHnMn.nS`` (Java's ``Duration.parse``, as Kafka reads
    ``--by-duration``): ``P1D``, ``PT2H30M``, ``PT0.5S``. Raises :class:`ResetError` naming the text."""
    match = _DURATION.match(text)
    if match is None or not any(match.groups()) or text.upper().endswith("T"):
        raise ResetError(f"--by-duration {text!r} is not an ISO 8601 duration: expected PnDTnHnMn.nS, e.g. P1D, "
                         f"PT2H30M (how far back from now)")
    days, hours, minutes, seconds = match.groups()
    span = timedelta(days=int(days or 0), hours=int(hours or 0), minutes=int(minutes or 0),
                     seconds=float(seconds or 0))
    return int(span.total_seconds() * 1000)


@dataclass(frozen=True)
class ResetPosition:
    """Where the inputs go: ``kind`` and its ``value`` (the offset, the ISO date and time, or the duration)."""

    kind: Kind = "earliest"
    value: str | int | None = None

    @classmethod
    def from_options(cls, *, to_earliest: bool = False, to_offset: int | None = None, to_datetime: str | None = None,
                     by_duration: str | None = None) -> ResetPosition:
        """The position the options choose (none: earliest, Kafka's default); checks the values' syntax.
        Raises :class:`ResetError` when more than one is given or a value does not parse."""
        chosen: list[ResetPosition] = []
        if to_earliest:
            chosen.append(cls("earliest"))
        if to_offset is not None:
            if to_offset < 0:
                raise ResetError(f"--to-offset {to_offset}: an offset is 0 or more")
            chosen.append(cls("offset", to_offset))
        if to_datetime is not None:
            parse_datetime(to_datetime)
            chosen.append(cls("datetime", to_datetime))
        if by_duration is not None:
            parse_duration(by_duration)
            chosen.append(cls("duration", by_duration))
        if len(chosen) > 1:
            raise ResetError(f"choose one of --to-earliest, --to-offset, --to-datetime, --by-duration "
                             f"(got {', '.join(p.describe() for p in chosen)})")
        return chosen[0] if chosen else cls("earliest")

    def describe(self) -> str:
        """The option as a user writes it, e.g. ``--to-datetime 2023-11-14T23:00:00``."""
        return "--to-earliest" if self.kind == "earliest" else f"--{'by' if self.kind == 'duration' else 'to'}-" \
            f"{self.kind} {self.value}"

    def time_ms(self, now_ms: int) -> int | None:
        """The time the inputs go back to (None for ``earliest`` and ``offset``). Raises :class:`ResetError` for
        a time in the future: no record can be at or after it yet."""
        if self.kind == "datetime":
            moment = parse_datetime(str(self.value))
        elif self.kind == "duration":
            moment = now_ms - parse_duration(str(self.value))
        else:
            return None
        if moment > now_ms:
            now = datetime.fromtimestamp(now_ms / 1000, UTC).isoformat(timespec="milliseconds")
            raise ResetError(f"{self.describe()} is in the future (now is {now}): a reset goes back in time; "
                             f"to skip everything up to now, use --to-datetime with the current time")
        return moment

    def to_json(self) -> dict[str, Any]:
        """The position as the plan file keeps it."""
        return {"kind": self.kind, "value": self.value}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ResetPosition:
        """The position a plan file kept (:meth:`to_json`); ``ValueError`` for an unknown kind."""
        kind = raw["kind"]
        if kind not in ("earliest", "offset", "datetime", "duration"):
            raise ValueError(f"unknown position kind {kind!r}")
        return cls(kind, raw.get("value"))


def clamp(offset: int, earliest: int, end: int) -> int:
    """``offset`` within ``[earliest, end]``, as StreamsResetter's ``checkOffsetRange``."""
    return end if offset >= end else max(offset, earliest)


def first_offset_at_or_after(client_config: Mapping[str, Any], topic: str, partition: int, earliest: int, end: int,
                             time_ms: int, timeout: float = 120.0) -> tuple[int, int]:
    """The earliest offset in ``[earliest, end)`` of ``topic[partition]`` whose record timestamp is at or after
    ``time_ms``, else ``end``; and how many records were read to find it. Reads from ``earliest`` in offset order
    (module doc). Raises :class:`ResetError` naming the partition when it cannot be read to that point in time."""
    if earliest >= end:
        return end, 0
    consumer = Consumer({**client_config, "group.id": f"brook-reset-scan-{uuid.uuid4().hex[:12]}",
                         "enable.auto.commit": False, "enable.partition.eof": True, "fetch.wait.max.ms": 20,
                         "fetch.queue.backoff.ms": 10, "isolation.level": "read_uncommitted"})
    read = 0
    deadline = time.monotonic() + timeout
    try:
        consumer.assign([TopicPartition(topic, partition, earliest)])
        while time.monotonic() < deadline:
            for message in consumer.consume(10_000, 0.2):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        return end, read
                    raise ResetError(f"cannot read {topic}[{partition}] to find the offset of time {time_ms}: "
                                     f"{error.str()}")
                read += 1
                if message.offset() >= end:
                    return end, read  # written since the plan looked: the partition had nothing at or after T
                if message.timestamp()[1] >= time_ms:
                    return message.offset(), read
        raise ResetError(f"cannot read {topic}[{partition}] to find the offset of time {time_ms}: not done within "
                         f"{timeout:g} s ({read} records read from offset {earliest})")
    finally:
        consumer.close()
