"""Window and session stores on RocksDB: the Kafka Streams APIs, segments dropped by retention, the
changelog they write and restoring from it, the window specifications and windowed serdes."""

from __future__ import annotations

import os
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import rocksdict

from streaming import JoinWindows, Serdes, SessionWindows, SlidingWindows, TimeWindows, Window, Windowed
from streaming.state.bytes_store import StoreContext
from streaming.state.caching import CacheBudget
from streaming.state.changelogging import ChangeLogger
from streaming.state.segments import segment_id_of
from streaming.state.stores import Stores
from streaming.state.window import window_start_of
from streaming.windows.serdes import WindowedSerdes

String, Long = Serdes.String(), Serdes.Long()


class Collector:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, bytes | None, int]] = []

    def send(self, topic: str, key: bytes, value: bytes | None, timestamp: int, headers: Any, partition: int) -> None:
        self.sent.append((key, value, timestamp))


def open_store(builder: Any, directory: Path, collector: Collector | None = None,
               cache: CacheBudget | None = None) -> Any:
    store = builder.build()
    logger = None if collector is None else (lambda name: ChangeLogger(collector, f"app-{name}-changelog", 0))
    store.init(StoreContext("app", "0_0", str(directory / store.name), String, Long, changelogger=logger,
                            timestamp=lambda: 7, cache_budget=cache))
    return store


def test_window_store_api(tmp_path: Path) -> None:
    store = open_store(Stores.window_store_builder(Stores.persistent_window_store("w", 600_000, 10_000), String, Long),
                       tmp_path)
    for start in (0, 10_000, 20_000):
        store.put("a", start // 1000, start)
        store.put("ab", 100 + start // 1000, start)
    store.put("b", 1, 0)
    assert store.fetch("a", 10_000) == 10
    assert store.fetch("a", 5_000) is None
    assert list(store.fetch("a", 5_000, 20_000)) == [(10_000, 10), (20_000, 20)]  # "ab" is another key
    assert [(w.key, w.window.start, v) for w, v in store.fetch_range("a", "ab", 10_000, 10_000)] == [
        ("a", 10_000, 10), ("ab", 10_000, 110)]
    assert len(list(store.fetch_all(0, 0))) == 3 and len(list(store.all())) == 7
    assert next(store.all()) == (Windowed("a", Window(0, 10_000)), 0)
    assert store.fetch_with_timestamp("a", 0) == (0, 7)
    store.put("a", None, 0)
    assert store.fetch("a", 0) is None
    store.close()


def test_segments_are_dropped_as_stream_time_passes_retention(tmp_path: Path) -> None:
    supplier = Stores.persistent_window_store("w", retention=timedelta(minutes=2), window_size=timedelta(minutes=1))
    store = open_store(Stores.window_store_builder(supplier, String, Long), tmp_path)
    for minute in range(10):
        store.put_with_timestamp("k", minute, minute * 60_000, minute * 60_000)
    store.flush()
    assert store.inner.segment_ids == [7, 8, 9]  # 60 s segments; retention 120 s behind 540 s
    store.close()
    assert stored_segments(tmp_path / "w") == {7: 1, 8: 1, 9: 1}  # the dropped segments' keys are deleted, not hidden
    store = open_store(Stores.window_store_builder(supplier, String, Long), tmp_path)
    # the segment of 420 s still exists, but its window is expired: 420 s < 540 s - 120 s + 1 (getActualFrom)
    assert [start for start, _ in store.fetch("k", 0, 10**9)] == [480_000, 540_000]
    store.put_with_timestamp("k", 99, 0, 0)  # a write into a dropped segment is skipped
    assert store.fetch("k", 0) is None and store.inner.expired_writes == 1
    store.close()


def stored_segments(directory: Path) -> dict[int, int]:
    """Segment id -> keys, as the store's RocksDB database holds them (each key behind its segment's prefix)."""
    db = rocksdict.Rdict(str(directory), options=rocksdict.Options(raw_mode=True))
    try:
        return dict(Counter(segment_id_of(key) for key, _ in db.items()))
    finally:
        db.close()


def test_a_store_kept_a_database_per_segment_is_moved_into_one_when_it_opens(tmp_path: Path) -> None:
    """State written by Brook before logical segments (a RocksDB database per segment, ``<store>.<segment start>``)
    is read back whole: a checkpoint vouches for it, so nothing would restore what a new layout failed to find."""
    supplier = Stores.persistent_window_store("w", retention=timedelta(minutes=2), window_size=timedelta(minutes=1))
    builder = Stores.window_store_builder(supplier, String, Long)
    written = open_store(builder, tmp_path / "written")
    for minute in (7, 8, 9):
        written.put_with_timestamp("k", minute, minute * 60_000 + 5, minute * 60_000)
        written.put_with_timestamp("other", 100 + minute, minute * 60_000 + 6, minute * 60_000)
    written.flush()
    entries = [(key, value, window_start_of(key) // 60_000) for key, value in written.inner.range(None, None)]
    assert len(entries) == 6
    written.close()
    for segment_id in (7, 8, 9):  # the old layout, written as Brook wrote it: one plain database per segment
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        old = rocksdict.Rdict(str(tmp_path / "w" / f"w.{segment_id * 60_000}"), options=options)
        for key, value, in_segment in entries:
            if in_segment == segment_id:
                old[key] = value
        old.close()
    store = open_store(builder, tmp_path)
    assert store.inner.segment_ids == [7, 8, 9] and store.inner.observed_time == 540_000
    assert list(store.fetch("k", 0, 10**9)) == [(480_000, 8), (540_000, 9)]  # 420 s: expired, as before
    assert [(w.key, w.window.start, v) for w, v in store.fetch_all(480_000, 540_000)] == [
        ("k", 480_000, 8), ("k", 540_000, 9), ("other", 480_000, 108), ("other", 540_000, 109)]
    store.close()
    assert sorted(name for name in os.listdir(tmp_path / "w") if name.startswith("w.")) == []
    assert stored_segments(tmp_path / "w") == {7: 2, 8: 2, 9: 2}


def test_a_reopened_store_hides_the_windows_it_hid_before(tmp_path: Path) -> None:
    """Stream time after a restart starts at the newest segment's highest window start, so reads hide what they hid
    before the restart (a window written through behind the floor may hold an earlier value there)."""
    supplier = Stores.persistent_window_store("w", retention=timedelta(minutes=2), window_size=timedelta(minutes=1))
    builder = Stores.window_store_builder(supplier, String, Long)
    store = open_store(builder, tmp_path)
    for minute in range(10):
        store.put_with_timestamp("k", minute, minute * 60_000 + 5, minute * 60_000)
    store.flush()
    before = list(store.fetch("k", 0, 10**9))
    store.close()
    reopened = open_store(builder, tmp_path)
    assert reopened.inner.observed_time == 540_000 and reopened.expiry_floor() == 420_001
    assert list(reopened.fetch("k", 0, 10**9)) == before == [(480_000, 8), (540_000, 9)]
    assert reopened.fetch("k", 420_000) is None  # its segment is still on disk
    reopened.close()
    empty = open_store(builder, tmp_path / "empty")
    assert empty.inner.observed_time == -1 and empty.expiry_floor() == 0
    empty.close()


def test_window_changelog_restores_the_same_state(tmp_path: Path) -> None:
    collector = Collector()
    builder = Stores.window_store_builder(Stores.persistent_window_store("w", 100_000, 1_000), String, Long)
    assert builder.log_config == {"cleanup.policy": "compact,delete", "retention.ms": str(100_000 + 86_400_000)}
    store = open_store(builder, tmp_path, collector)
    store.put_with_timestamp("a", 5, 1_500, 1_000)
    store.put_with_timestamp("a", 6, 2_500, 2_000)
    store.put("a", None, 2_000)
    store.flush()
    store.close()
    assert [key[-12:-4] for key, _, _ in collector.sent] == [(1_000).to_bytes(8, "big"), (2_000).to_bytes(8, "big")]
    restored = open_store(builder, tmp_path / "restored")
    restored.restore_batch(collector.sent)
    assert list(restored.fetch("a", 0, 10_000)) == [(1_000, 5)]
    assert restored.fetch_with_timestamp("a", 1_000) == (5, 1_500)
    restored.close()


@pytest.mark.parametrize("tracked", [True, False], ids=["tracked", "untracked"])
def test_owner_scans_read_back_unflushed_writes(tmp_path: Path, tracked: bool) -> None:
    """An operator's keyed scans see its cached writes, whether it asked for its writes to be tracked before the
    first one (the DSL's scanning operators) or not (the first scans then read every pending write)."""
    builder = Stores.window_store_builder(Stores.persistent_window_store("w", 600_000, 10_000), String, Long)
    store = open_store(builder.with_caching_enabled(), tmp_path, cache=CacheBudget(1 << 20))
    if tracked:
        store.track_owned_writes()

    def owned() -> list[tuple[int, int]]:
        return [(start, found.value) for start, found in store.fetch_timestamped("a", 0, 100_000, owner=True)]
    store.put_with_timestamp("a", 1, 5, 0)
    store.put_with_timestamp("a", 2, 15_000, 10_000)
    store.put_with_timestamp("b", 9, 15_000, 10_000)
    assert owned() == [(0, 1), (10_000, 2)]
    store.flush()
    store.put_with_timestamp("a", 3, 25_000, 20_000)
    store.put_with_timestamp("a", None, 25_000, 0)
    assert owned() == [(10_000, 2), (20_000, 3)]
    store.flush()
    assert owned() == [(10_000, 2), (20_000, 3)]


def test_retained_duplicates_keep_every_put(tmp_path: Path) -> None:
    supplier = Stores.in_memory_window_store("j", 1_000, 100, retain_duplicates=True)
    store = open_store(Stores.window_store_builder(supplier, String, Long), tmp_path)
    store.put("a", 1, 50)
    store.put("a", 2, 50)
    store.put("a", None, 50)  # ignored: duplicates are never deleted one by one
    assert [value for _, value in store.fetch("a", 0, 100)] == [1, 2]
    store.close()


def test_session_store_api_and_restore(tmp_path: Path) -> None:
    collector = Collector()
    builder = Stores.session_store_builder(Stores.persistent_session_store("s", 10_000), String, Long)
    store = open_store(builder, tmp_path, collector)
    store.put(Windowed.of("a", 0, 10), 2)
    store.put(Windowed.of("a", 30, 40), 3)
    store.put(Windowed.of("aa", 5, 5), 1)
    assert [w.window for w, _ in store.find_sessions("a", 5, 35)] == [Window(0, 10), Window(30, 40)]
    assert [w.window for w, _ in store.find_sessions("a", 11, 35)] == [Window(30, 40)]
    assert [w.window for w, _ in store.find_sessions("a", 0, 20)] == [Window(0, 10)]
    assert store.fetch_session("a", 30, 40) == 3
    store.remove(Windowed.of("a", 0, 10))
    assert [(w.key, v) for w, v in store.fetch("a")] == [("a", 3)]
    assert [w.key for w, _ in store.find_sessions_range("a", "aa", 0, 100)] == ["a", "aa"]
    store.flush()
    store.close()
    assert collector.sent[0][2] == 10  # the changelog record's timestamp is the session end
    restored = open_store(builder, tmp_path / "restored")
    restored.restore_batch([(key, value) for key, value, _ in collector.sent])
    assert [(w.key, w.window, v) for w, v in restored.all()] == [("a", Window(30, 40), 3), ("aa", Window(5, 5), 1)]
    restored.close()


def test_window_specifications() -> None:
    assert TimeWindows.of(10).windows_for(25) == [Window(20, 30)]
    assert TimeWindows.of(10).advance_by(5).windows_for(12) == [Window(5, 15), Window(10, 20)]
    assert TimeWindows.of(10).advance_by(3).windows_for(1) == [Window(0, 10)]
    assert TimeWindows.of(timedelta(minutes=1)).grace_ms == 0  # ofSizeWithNoGrace
    assert TimeWindows.of(timedelta(minutes=1), grace=timedelta(seconds=5)).retention_ms() == 65_000
    assert JoinWindows.of(10).before(3).size() == 13
    assert SlidingWindows.of(10, grace=2).retention_ms() == 22
    assert SessionWindows.with_inactivity_gap(5).gap_ms == 5
    for bad, match in ((lambda: TimeWindows.of(0), "TimeWindows.of: size must be positive"),
                       (lambda: TimeWindows.of(10, grace=-1), "TimeWindows.of: grace must be zero or more"),
                       (lambda: TimeWindows.of(10).advance_by(11), "must not exceed the window size"),
                       (lambda: SessionWindows.with_inactivity_gap("5"), "gap must be milliseconds"),
                       (lambda: JoinWindows.of(-1), "JoinWindows.of: time_difference"),
                       (lambda: SlidingWindows.of(1.5), "max_difference must be milliseconds")):
        with pytest.raises(ValueError, match=match):
            bad()


def test_windowed_serdes_use_kafkas_byte_formats() -> None:
    time_serde = WindowedSerdes.time_windowed(String, 100)
    data = time_serde.serialize(Windowed.of("k", 200, 300))
    assert data == b"k" + (200).to_bytes(8, "big")
    assert time_serde.deserialize(data) == Windowed.of("k", 200, 300)
    session_serde = WindowedSerdes.session_windowed(String)
    data = session_serde.serialize(Windowed.of("k", 5, 9))
    assert data == b"k" + (9).to_bytes(8, "big") + (5).to_bytes(8, "big")
    assert session_serde.deserialize(data) == Windowed.of("k", 5, 9)
    with pytest.raises(ValueError, match="at least 8 bytes"):
        time_serde.deserialize(b"abc")
