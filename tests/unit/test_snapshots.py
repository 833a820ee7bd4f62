"""The snapshot seam: a store with no local state starts from the newest snapshot, then the tail."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from streaming.runtime.snapshots import NoSnapshots, Snapshot, seed_from_snapshots
from streaming.serdes import Serdes
from streaming.state.bytes_store import StoreContext
from streaming.state.keyvalue import TimestampedTypedKeyValueStore, TypedKeyValueStore
from streaming.state.memory import InMemoryBytesStore


class OneSnapshot:
    def candidates(self, topic: str, partition: int) -> Iterator[Snapshot]:
        if (topic, partition) == ("app-s-changelog", 0):
            yield Snapshot(topic, partition, 42, iter([[(b"a", b"1", 10), (b"b", b"2", 20)], [(b"c", b"3", 30)]]),
                           "00000001", keys=3)


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


ROWS = [(b"a", b"1", 10), (b"b", b"2", 20), (b"c", b"3", 30)]


def checksum(rows: list[tuple[bytes, bytes, int]]) -> int:
    from streaming.state.snapshots import row_checksum

    return sum(row_checksum(key, value) for key, value, _ in rows)


class Snapshots:
    """Candidates newest first, as the Parquet source gives them after its identity and file-count checks."""

    def __init__(self, *snapshots: Snapshot) -> None:
        self.snapshots = snapshots

    def candidates(self, topic: str, partition: int) -> Iterator[Snapshot]:
        yield from self.snapshots


def snapshot(snapshot_id: str, next_offset: int, rows: list[tuple[bytes, bytes, int]], keys: int,
             sums: int | None) -> Snapshot:
    return Snapshot("app-s-changelog", 0, next_offset, iter([rows]), snapshot_id, keys, sums)


@pytest.mark.parametrize("newest", [
    snapshot("00000003", 90, ROWS[:2], keys=3, sums=checksum(ROWS)),                      # a row short
    snapshot("00000003", 90, [*ROWS[:2], (b"c", b"X", 30)], keys=3, sums=checksum(ROWS)),  # a row changed
])
def test_a_snapshot_that_does_not_load_whole_is_removed_and_an_older_one_used(
        newest: Snapshot, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 16, item 12: never run on a short snapshot; fall back, loudly, naming snapshot and partition."""
    kv = store()
    older = snapshot("00000002", 60, [(b"a", b"0", 5), (b"z", b"9", 9)], keys=2, sums=None)
    seeded = seed_from_snapshots(Snapshots(newest, older), {("app-s-changelog", 0): 0}, {("app-s-changelog", 0): kv})
    assert seeded == {("app-s-changelog", 0): 60}
    assert list(kv.all()) == [("a", "0"), ("z", "9")], "nothing of the rejected snapshot is left"
    [error] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert "snapshot 00000003 of app-s-changelog[0] is not used" in error.getMessage()


def test_without_a_snapshot_that_loads_whole_the_whole_changelog_is_restored(caplog: pytest.LogCaptureFixture) -> None:
    kv = store()
    short = snapshot("00000003", 90, ROWS[:1], keys=3, sums=None)
    seeded = seed_from_snapshots(Snapshots(short), {("app-s-changelog", 0): 0}, {("app-s-changelog", 0): kv})
    assert seeded == {("app-s-changelog", 0): 0}
    assert list(kv.all()) == []
    assert "restoring the whole changelog from offset 0" in caplog.records[-1].getMessage()
    whole = snapshot("00000004", 90, ROWS, keys=3, sums=checksum(ROWS))
    loaded = store()
    assert seed_from_snapshots(Snapshots(whole), {("app-s-changelog", 0): 0}, {("app-s-changelog", 0): loaded}) \
        == {("app-s-changelog", 0): 90}
    assert list(loaded.all()) == [("a", "1"), ("b", "2"), ("c", "3")]
