"""Options of the ``brook-kafka`` Spark data source, parsed and validated before anything is read.

The option names mirror Spark's own Kafka source, so a read written for one works with the other:

- ``kafka.bootstrap.servers`` (required) and any ``kafka.<librdkafka key>``, passed to the client
  without the prefix (security: ``kafka.security.protocol``, ``kafka.sasl.*``, ``kafka.ssl.*``);
- ``subscribe``: comma-separated topics (required);
- ``startingOffsets`` / ``endingOffsets``: ``earliest`` | ``latest`` | Spark's JSON
  ``{"topic": {"0": 23, "1": -2}}`` (``-2`` earliest, ``-1`` latest; partitions left out take the
  option's default: earliest for the start, latest for the end);
- ``startingTimestamp`` / ``endingTimestamp``: epoch milliseconds, found by record timestamps;
- ``kafkaConsumer.pollTimeoutMs``: how long a read may wait for the broker without progress.

Spark passes options case-insensitively (lower-cased); names are matched that way here too.
Errors name the option and never show a value of a secret key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streaming.config import SECRET_KEYS

__all__ = [
    "EARLIEST",
    "LATEST",
    "KafkaReadOptions",
    "KafkaSourceError",
    "OffsetSpec",
    "client_options",
    "parse_options",
]

#: Spark's JSON offset sentinels.
EARLIEST = -2
LATEST = -1

CLIENT_PREFIX = "kafka."
DEFAULT_POLL_TIMEOUT_MS = 120_000

#: librdkafka keys the source sets itself; a user value would break how ranges are read.
_RESERVED_CLIENT_KEYS = {
    "enable.auto.commit": "the source never commits offsets",
    "auto.offset.reset": "a range read fails on a missing offset instead of jumping",
    "enable.partition.eof": "ranges end at the partition end (EOF)",
    "group.id": "reads use assign(), never a consumer group",
}

# Spark's names (lower-cased, as Spark hands them over) -> the name shown in messages.
_SOURCE_OPTIONS = {
    "subscribe": "subscribe",
    "startingoffsets": "startingOffsets",
    "endingoffsets": "endingOffsets",
    "startingtimestamp": "startingTimestamp",
    "endingtimestamp": "endingTimestamp",
    "kafkaconsumer.polltimeoutms": "kafkaConsumer.pollTimeoutMs",
}


class KafkaSourceError(ValueError):
    """A bad option, a missing topic or partition, or a range that cannot be read as asked."""


@dataclass(frozen=True)
class OffsetSpec:
    """Where ranges start or end: one default for every partition plus per-partition overrides."""

    default: int
    """``EARLIEST`` or ``LATEST``."""
    per_partition: dict[str, dict[int, int]] = field(default_factory=dict)
    """topic -> partition -> offset (or ``EARLIEST``/``LATEST``)."""

    def offset_for(self, topic: str, partition: int) -> int:
        """The asked offset (or sentinel) of one partition."""
        return self.per_partition.get(topic, {}).get(partition, self.default)


@dataclass(frozen=True)
class KafkaReadOptions:
    """A validated read request."""

    client_config: dict[str, str]
    """librdkafka settings (may hold secrets: never print; use :meth:`redacted_client_config`)."""
    topics: list[str]
    starting: OffsetSpec
    ending: OffsetSpec
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS

    def redacted_client_config(self) -> dict[str, str]:
        """The client config with secret values replaced by ``***``."""
        return {k: "***" if SECRET_KEYS.search(k) else v for k, v in self.client_config.items()}

    def __repr__(self) -> str:  # the dataclass repr would print secrets
        return (f"KafkaReadOptions(client_config={self.redacted_client_config()}, topics={self.topics}, "
                f"starting={self.starting}, ending={self.ending}, starting_timestamp={self.starting_timestamp}, "
                f"ending_timestamp={self.ending_timestamp})")


def client_options(client_config: Mapping[str, Any]) -> dict[str, str]:
    """Turn librdkafka settings into data source options (``kafka.`` prefix, string values)."""
    return {f"{CLIENT_PREFIX}{key}": _to_str(value) for key, value in client_config.items()}


def _to_str(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_options(options: Mapping[str, str]) -> KafkaReadOptions:
    """Validate the data source's options.

    Raises:
        KafkaSourceError: a missing required option, an unknown option, or a bad value (the message
            names the option; secret values are never shown).
    """
    client: dict[str, str] = {}
    source: dict[str, str] = {}
    for raw_key, value in options.items():
        key = raw_key.lower()
        if key.startswith(CLIENT_PREFIX):
            client_key = raw_key[len(CLIENT_PREFIX):]
            if client_key.lower() in _RESERVED_CLIENT_KEYS:
                reason = _RESERVED_CLIENT_KEYS[client_key.lower()]
                raise KafkaSourceError(f"option {raw_key!r} is not supported: {reason}")
            client[client_key] = str(value)
        elif key in _SOURCE_OPTIONS:
            source[_SOURCE_OPTIONS[key]] = str(value)
        elif key == "path":
            raise KafkaSourceError("the brook-kafka source takes no path: name topics with option 'subscribe'")
        else:
            known = sorted([*_SOURCE_OPTIONS.values(), "kafka.<librdkafka setting>"])
            raise KafkaSourceError(f"unknown option {raw_key!r}; known options: {known}")

    if not client.get("bootstrap.servers"):
        raise KafkaSourceError("option 'kafka.bootstrap.servers' is required")
    topics = [t.strip() for t in source.get("subscribe", "").split(",") if t.strip()]
    if not topics:
        raise KafkaSourceError("option 'subscribe' is required: one or more comma-separated topics")
    if len(set(topics)) != len(topics):
        raise KafkaSourceError(f"option 'subscribe' names a topic twice: {source['subscribe']!r}")

    for by_offset, by_time in (("startingOffsets", "startingTimestamp"), ("endingOffsets", "endingTimestamp")):
        if by_offset in source and by_time in source:
            raise KafkaSourceError(f"options {by_offset!r} and {by_time!r} are mutually exclusive")
    starting = _offset_spec("startingOffsets", source.get("startingOffsets"), EARLIEST, topics)
    ending = _offset_spec("endingOffsets", source.get("endingOffsets"), LATEST, topics)
    starting_ts = _non_negative_int("startingTimestamp", source.get("startingTimestamp"))
    ending_ts = _non_negative_int("endingTimestamp", source.get("endingTimestamp"))
    if starting_ts is not None and ending_ts is not None and ending_ts < starting_ts:
        raise KafkaSourceError(f"option 'endingTimestamp' ({ending_ts}) is before 'startingTimestamp' ({starting_ts})")
    poll_timeout = _non_negative_int("kafkaConsumer.pollTimeoutMs", source.get("kafkaConsumer.pollTimeoutMs"))
    return KafkaReadOptions(
        client_config=client,
        topics=topics,
        starting=starting,
        ending=ending,
        starting_timestamp=starting_ts,
        ending_timestamp=ending_ts,
        poll_timeout_ms=DEFAULT_POLL_TIMEOUT_MS if poll_timeout is None else max(poll_timeout, 1),
    )


def _non_negative_int(option: str, raw: str | None) -> int | None:
    if raw is None:
        return None
    try:
        number = int(raw.strip())
    except ValueError:
        raise KafkaSourceError(f"option {option!r} must be an integer (epoch milliseconds), got {raw!r}") from None
    if number < 0:
        raise KafkaSourceError(f"option {option!r} must not be negative, got {number}")
    return number


def _offset_spec(option: str, raw: str | None, default: int, topics: list[str]) -> OffsetSpec:
    if raw is None:
        return OffsetSpec(default)
    text = raw.strip()
    if text.lower() == "earliest":
        return OffsetSpec(EARLIEST)
    if text.lower() == "latest":
        return OffsetSpec(LATEST)
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        raise KafkaSourceError(
            f"option {option!r} must be 'earliest', 'latest' or JSON like "
            f'{{"topic": {{"0": 23, "1": -2}}}}, got {raw!r}'
        ) from None
    if not isinstance(parsed, dict):
        raise KafkaSourceError(f"option {option!r}: JSON must map topic -> {{partition: offset}}, got {raw!r}")
    per_partition: dict[str, dict[int, int]] = {}
    for topic, partitions in parsed.items():
        if topic not in topics:
            raise KafkaSourceError(f"option {option!r} names topic {topic!r}, which is not in 'subscribe' {topics}")
        if not isinstance(partitions, dict):
            raise KafkaSourceError(f"option {option!r}: topic {topic!r} must map partition -> offset")
        offsets: dict[int, int] = {}
        for partition, offset in partitions.items():
            try:
                number = int(partition)
            except ValueError:
                raise KafkaSourceError(
                    f"option {option!r}: topic {topic!r} has partition {partition!r}, not a number") from None
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST or number < 0:
                raise KafkaSourceError(
                    f"option {option!r}: topic {topic!r} partition {partition}: offset must be an integer >= 0, "
                    f"or -2 (earliest) or -1 (latest), got {offset!r}"
                )
            offsets[number] = offset
        per_partition[topic] = offsets
    return OffsetSpec(default, per_partition)
