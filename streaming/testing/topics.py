"""The test driver's input and output topics."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from streaming.runtime.memory_collector import SentRecord
from streaming.serdes import Serde

if TYPE_CHECKING:
    from streaming.testing.driver import TopologyTestDriver


@dataclass
class TestRecord:
    """A record as a test sees it: key, value, timestamp (ms) and headers."""

    __test__ = False  # not a pytest test class

    key: Any
    value: Any
    timestamp: int | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


class TestInputTopic:
    """Pipes records into the driver. A record without a timestamp gets the topic's current time,
    which then advances by ``auto_advance`` ms."""

    __test__ = False

    def __init__(self, driver: TopologyTestDriver, topic: str, key_serde: Serde[Any], value_serde: Serde[Any],
                 start_timestamp: int, auto_advance: int) -> None:
        self._driver = driver
        self.topic = topic
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._time = start_timestamp
        self._advance = auto_advance

    def pipe_input(self, key: Any = None, value: Any = None, timestamp: int | None = None,
                   headers: list[tuple[str, bytes | None]] | None = None) -> None:
        """Process one record (``pipe_input(value)`` alone is not supported: pass the key, maybe None)."""
        if timestamp is None:
            timestamp = self._time
            self._time += self._advance
        self._driver.pipe_raw(self.topic, self._key_serde.serialize(key), self._value_serde.serialize(value),
                              timestamp, headers)

    def pipe_record(self, record: TestRecord) -> None:
        self.pipe_input(record.key, record.value, record.timestamp, record.headers)

    def pipe_key_value_list(self, pairs: list[tuple[Any, Any]]) -> None:
        for key, value in pairs:
            self.pipe_input(key, value)

    def pipe_value_list(self, values: list[Any]) -> None:
        for value in values:
            self.pipe_input(None, value)

    def pipe_record_list(self, records: list[TestRecord]) -> None:
        for record in records:
            self.pipe_record(record)

    def advance_time(self, advance: int) -> None:
        self._time += advance


class TestOutputTopic:
    """Reads what the topology wrote to a topic, oldest first; each read consumes the record."""

    __test__ = False

    def __init__(self, records: deque[SentRecord], topic: str, key_serde: Serde[Any],
                 value_serde: Serde[Any]) -> None:
        self._records = records
        self.topic = topic
        self._key_de = key_serde.deserialize
        self._value_de = value_serde.deserialize

    def read_record(self) -> TestRecord:
        if not self._records:
            raise IndexError(f"output topic {self.topic!r} has no more records")
        raw = self._records.popleft()
        return TestRecord(self._key_de(raw.key), self._value_de(raw.value), raw.timestamp, list(raw.headers))

    def read_value(self) -> Any:
        return self.read_record().value

    def read_key_value(self) -> tuple[Any, Any]:
        record = self.read_record()
        return record.key, record.value

    def read_records_to_list(self) -> list[TestRecord]:
        return [self.read_record() for _ in range(len(self._records))]

    def read_values_to_list(self) -> list[Any]:
        return [record.value for record in self.read_records_to_list()]

    def read_key_values(self) -> list[tuple[Any, Any]]:
        """Every remaining ``(key, value)``, in order (Kafka Streams' ``readKeyValuesToList``)."""
        return [(record.key, record.value) for record in self.read_records_to_list()]

    read_key_values_to_list = read_key_values

    def read_key_values_to_map(self) -> dict[Any, Any]:
        """The last value per key, as Kafka Streams' ``readKeyValuesToMap``: a key whose latest value is a
        tombstone stays in the map with ``None``."""
        return dict(self.read_key_values())

    def get_queue_size(self) -> int:
        return len(self._records)

    def is_empty(self) -> bool:
        return not self._records
