"""The snapshot seam: a store with no local state starts from the newest snapshot, then the tail."""

from __future__ import annotations

from streaming.runtime.snapshots import NoSnapshots, Snapshot, seed_from_snapshots
from streaming.serdes import Serdes
from streaming.state.bytes_store import StoreContext
from streaming.state.keyvalue import TimestampedTypedKeyValueStore, TypedKeyValueStore
from streaming.state.memory import InMemoryBytesStore


class OneSnapshot:
    def latest(self, topic: str, partition: int) -> Snapshot | None:
        if (topic, partition) != ("app-s-changelog", 0):
            return None
        return Snapshot(topic, partition, 42, iter([[(b"a", b"1", 10), (b"b", b"2", 20)], [(b"c", b"3", 30)]]))


def store(kind: type[TypedKeyValueStore] = TypedKeyValueStore) -> TypedKeyValueStore:
    kv = kind("s", InMemoryBytesStore("s"), Serdes.String(), Serdes.String())
    kv.init(StoreContext("app", "0_0", None, Serdes.String(), Serdes.String()))
    return kv


def test_snapshot_seeds_a_store_restoring_from_zero_and_moves_its_start() -> None:
    first, second = store(), store()
    offsets = {("app-s-changelog", 0): 0, ("app-s-changelog", 1): 0}
    stores = {("app-s-changelog", 0): first, ("app-s-changelog", 1): second}
    seeded = seed_from_snapshots(OneSnapshot(), offsets, stores)
    assert seeded == {("app-s-changelog", 0): 42, ("app-s-changelog", 1): 0}
    assert list(first.all()) == [("a", "1"), ("b", "2"), ("c", "3")]
    assert list(second.all()) == []


def test_a_checkpointed_store_ignores_snapshots() -> None:
    local = store()
    offsets = {("app-s-changelog", 0): 7}
    assert seed_from_snapshots(OneSnapshot(), offsets, {("app-s-changelog", 0): local}) == offsets
    assert list(local.all()) == []
    assert seed_from_snapshots(NoSnapshots(), {("app-s-changelog", 0): 0}, {("app-s-changelog", 0): local}) \
        == {("app-s-changelog", 0): 0}


def test_a_timestamped_store_takes_the_timestamps_of_the_snapshot() -> None:
    kv = store(TimestampedTypedKeyValueStore)
    seed_from_snapshots(OneSnapshot(), {("app-s-changelog", 0): 0}, {("app-s-changelog", 0): kv})
    assert [kv.get_with_timestamp(k) for k in "abc"] == [("1", 10), ("2", 20), ("3", 30)]
