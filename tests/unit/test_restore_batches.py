"""The changelog reader applies a consumed batch as each key's last record (the value, its timestamp, a tombstone
deleting): the store ends as if every record had been applied in order, while the listener and the counts see every
record of the batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from streaming.runtime.changelog_reader import StoreChangelogReader
from streaming.state.keyvalue import TimestampedTypedKeyValueStore, TypedKeyValueStore
from streaming.state.layered import TIMESTAMP
from streaming.state.rocksdb import RocksDBBytesStore

CHANGELOG = ("app-counts-changelog", 0)


class Task:
    id = "0_0"


class Message:
    def __init__(self, offset: int, key: bytes, value: bytes | None, timestamp: int) -> None:
        self._offset, self._key, self._value, self._timestamp = offset, key, value, timestamp

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return CHANGELOG[0]

    def partition(self) -> int:
        return CHANGELOG[1]

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return 1, self._timestamp


class Consumer:
    """The restore consumer, without a broker: one batch of changelog records, then nothing."""

    def __init__(self, messages: list[Message]) -> None:
        self.messages = messages

    def consume(self, max_records: int, timeout: float) -> list[Any]:
        batch, self.messages = self.messages, []
        return batch

    def get_watermark_offsets(self, partition: Any, cached: bool = False, timeout: float = 0) -> tuple[int, int]:
        return 0, 100

    def incremental_assign(self, partitions: list[Any]) -> None:
        pass

    def incremental_unassign(self, partitions: list[Any]) -> None:
        pass

    def close(self) -> None:
        pass


class Listener:
    def __init__(self) -> None:
        self.batches: list[tuple[int, int]] = []  # (batch end offset, records)

    def on_restore_start(self, topic_partition: Any, store_name: str, start_offset: int, end_offset: int) -> None:
        pass

    def on_batch_restored(self, topic_partition: Any, store_name: str, batch_end_offset: int,
                          num_restored: int) -> None:
        self.batches.append((batch_end_offset, num_restored))

    def on_restore_end(self, topic_partition: Any, store_name: str, total_restored: int) -> None:
        pass


UPDATES = [(b"a", b"1", 10), (b"b", b"1", 11), (b"a", b"2", 12), (b"c", b"1", 13), (b"b", None, 14),
           (b"a", b"3", 15), (b"c", None, 16), (b"c", b"2", 17)]  # offsets 0.., with gaps (transaction markers)


@pytest.mark.parametrize("kind", [TypedKeyValueStore, TimestampedTypedKeyValueStore])
def test_a_batch_restores_the_last_record_of_each_key(tmp_path: Path, kind: type) -> None:
    store = kind("counts", RocksDBBytesStore("counts"), None, None)
    store.inner.open(str(tmp_path / "counts"))
    store.inner.write_batch([(b"b", b"0"), (b"d", b"0")])  # what an earlier batch left
    listener = Listener()
    reader = StoreChangelogReader({"bootstrap.servers": "127.0.0.1:1", "group.id": "app"}, listener)
    reader._consumer.close()
    reader._consumer = Consumer([Message(2 * i, *update) for i, update in enumerate(UPDATES)])  # type: ignore[assignment]
    reader.register(Task(), {CHANGELOG: 0}, {CHANGELOG: store})
    reader.restore(100, 0)

    stamp = TIMESTAMP.pack if kind is TimestampedTypedKeyValueStore else (lambda timestamp: b"")
    contents = dict(store.inner.range(None, None))
    assert contents == {b"a": stamp(15) + b"3", b"c": stamp(17) + b"2", b"d": b"0"}  # b deleted
    assert listener.batches == [(2 * len(UPDATES) - 1, len(UPDATES))]
    assert reader.restored == {("counts", *CHANGELOG): len(UPDATES)}
    assert {(r.topic, r.partition): r.remaining for r in reader.progress()} == {CHANGELOG: 100 - 2 * len(UPDATES) + 1}
    store.inner.close()
