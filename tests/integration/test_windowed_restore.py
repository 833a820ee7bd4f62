"""Window, session and suppression stores on the broker: restored from their changelogs into a fresh
state directory, queried through KafkaStreams.store, and suppressed finals neither lost nor repeated
across a restart."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from streaming import (
    KafkaStreams,
    Materialized,
    Serdes,
    SessionWindows,
    StreamsBuilder,
    Suppressed,
    TimeWindows,
    Window,
    WindowedSerdes,
)
from streaming.admin import create_topics
from streaming.runtime.kafka_streams import State
from streaming.runtime.partitioning import partition_for_key
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import committed_offsets, produce, read_topic, wait_for

pytestmark = pytest.mark.integration
PARTITIONS = 2
SIZE, GRACE, GAP = 100, 50, 30
String, Long = Serdes.String(), Serdes.Long()


def topology(source: str, finals: str) -> StreamsBuilder:
    builder = StreamsBuilder()
    grouped = builder.stream(source, key_serde=String, value_serde=String).group_by_key()
    (grouped.windowed_by(TimeWindows.of(SIZE, grace=GRACE))
     .count(Materialized.as_("wcounts").with_retention(10**9))
     .suppress(Suppressed.until_window_closes().with_name("finals"))
     .to_stream().to(finals, value_serde=Long))
    grouped.windowed_by(SessionWindows.with_inactivity_gap(GAP, grace=10**6)).count(
        Materialized.as_("scounts").with_retention(10**9))
    return builder


def run_until_committed(bootstrap: str, app_id: str, state_dir: Path, source: str, finals: str,
                        ends: dict[int, int], check: object = None) -> None:
    app = KafkaStreams(topology(source, finals).build(), {
        "application.id": app_id, "bootstrap.servers": bootstrap, "state.dir": str(state_dir),
        "commit.interval.ms": "200"})
    app.start()
    try:
        wait_for(lambda: app.state is State.RUNNING, 60, "the app to run")
        if callable(check):
            check(app)
        wait_for(lambda: committed_offsets(bootstrap, app_id, source, PARTITIONS) == ends, 90,
                 "the app to commit all input")
    finally:
        app.close(timeout=30)


def records(count: int, start: int, seed: int) -> list[GeneratedRecord]:
    """Timestamps rising ~3 ms per record, some out of order by up to 20 ms (within grace)."""
    rng = random.Random(seed)
    return [GeneratedRecord(f"k{rng.randrange(12)}", "v", start + 3 * n - (rng.randint(0, 20) if rng.random() < 0.2
                                                                            else 0)) for n in range(count)]


def windows_of(batch: list[GeneratedRecord]) -> Counter[tuple[str, int]]:
    return Counter((r.key, r.timestamp - r.timestamp % SIZE) for r in batch)


def sessions_of(batch: list[GeneratedRecord]) -> dict[str, list[tuple[int, int, int]]]:
    """Sessions per key (no record is late: the grace is huge), merged as records bridge them."""
    found: dict[str, list[list[int]]] = defaultdict(list)
    for r in batch:
        touching = [s for s in found[r.key] if s[1] >= r.timestamp - GAP and s[0] <= r.timestamp + GAP]
        for s in touching:
            found[r.key].remove(s)
        found[r.key].append([min([r.timestamp] + [s[0] for s in touching]),
                             max([r.timestamp] + [s[1] for s in touching]), 1 + sum(s[2] for s in touching)])
    return {key: sorted(tuple(s) for s in sessions) for key, sessions in found.items()}


@pytest.mark.slow
def test_window_stores_restore_and_finals_survive_a_restart(bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    source, finals = f"{unique_name}-in", f"{unique_name}-finals"
    create_topics(bootstrap, {source: PARTITIONS, finals: PARTITIONS})
    first, second = records(600, 1_000_000, seed=1), records(600, 1_000_000 + 1_800, seed=2)
    ends = produce(bootstrap, source, first, String, String)
    run_until_committed(bootstrap, unique_name, tmp_path / "a", source, finals, ends)

    expected_windows, expected_sessions = windows_of(first), sessions_of(first)

    def restored(app: KafkaStreams) -> None:
        windows, sessions = app.store("wcounts"), app.store("scounts")
        for key in {r.key for r in first}:
            got = {start: count for start, count in windows.fetch(key, 0, 10**12)}
            assert got == {start: count for (k, start), count in expected_windows.items() if k == key}
            assert [(w.window.start, w.window.end, c) for w, c in sessions.fetch(key)] == expected_sessions[key]
        some_key, some_start = next(iter(expected_windows))
        assert windows.fetch(some_key, some_start) == expected_windows[(some_key, some_start)]
        assert sum(count for _, count in windows.all()) == len(first)

    # a fresh state directory: every store comes back from its changelog alone
    run_until_committed(bootstrap, unique_name, tmp_path / "b", source, finals, ends, check=restored)
    ends = produce(bootstrap, source, second, String, String)
    run_until_committed(bootstrap, unique_name, tmp_path / "c", source, finals, ends)

    everything = first + second
    counts = windows_of(everything)
    last_time = defaultdict(lambda: -1)
    for r in everything:
        partition = partition_for_key(r.key.encode(), PARTITIONS)
        last_time[partition] = max(last_time[partition], r.timestamp)
    closed = {(key, start): count for (key, start), count in counts.items()
              if start + SIZE + GRACE <= last_time[partition_for_key(key.encode(), PARTITIONS)]}
    output = read_topic(bootstrap, finals, WindowedSerdes.time_windowed(String, SIZE), Long, PARTITIONS)
    emitted = Counter((r.key.key, r.key.window.start) for r in output)
    assert emitted and max(emitted.values()) == 1, "a final result was emitted twice"
    assert {(r.key.key, r.key.window.start): r.value for r in output} == closed, "a final result is missing or wrong"
    assert all(r.key.window == Window(r.key.window.start, r.key.window.start + SIZE) for r in output)


@pytest.mark.slow
def test_windows_closed_behind_the_floor_read_the_same_after_a_restart(bootstrap: str, unique_name: str,
                                                                       tmp_path: Path) -> None:
    """Grace 0 and the default retention: every window closes behind its store's expiry floor, so it is logged and
    not written to RocksDB (``TimestampedTypedWindowStore.flush_closed``). The input comes in two batches, the second
    going on in the windows the first ended in, which a commit between them stored with part of their counts. After
    a restart on the same state directory (no restore: stream time from the newest segment) and on a fresh one
    (restored from the changelog), reads return what the model says: per partition, the windows starting at or
    after its highest window start - SIZE + 1 (Kafka Streams' ``getActualFrom``), with their counts; the changelog
    holds every window's count."""
    source, out = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: PARTITIONS, out: PARTITIONS})
    rng = random.Random(3)
    batch = [GeneratedRecord(f"k{rng.randrange(12)}", "v", 2_000_000 + 7 * n) for n in range(600)]  # in order
    first, second = batch[:290], batch[290:]  # record 290 is at 2_002_030: the windows of 2_002_000 go on
    builder = StreamsBuilder()
    (builder.stream(source, key_serde=String, value_serde=String).group_by_key()
     .windowed_by(TimeWindows.of(SIZE, grace=0)).count(Materialized.as_("tcounts")).to_stream()
     .to(out, key_serde=WindowedSerdes.time_windowed(String, SIZE), value_serde=Long))
    topology = builder.build()
    counts = windows_of(batch)
    highest: dict[int, int] = defaultdict(lambda: -1)
    for key, start in counts:
        partition = partition_for_key(key.encode(), PARTITIONS)
        highest[partition] = max(highest[partition], start)
    readable = {(key, start): count for (key, start), count in counts.items()
                if start >= highest[partition_for_key(key.encode(), PARTITIONS)] - SIZE + 1}

    def run(state_dir: Path, *batches: list[GeneratedRecord]) -> None:
        app = KafkaStreams(topology, {"application.id": unique_name, "bootstrap.servers": bootstrap,
                                      "state.dir": str(state_dir), "commit.interval.ms": "200"})
        app.start()
        try:
            wait_for(lambda: app.state is State.RUNNING, 60, "the app to run")
            for records in batches:
                ends = produce(bootstrap, source, records, String, String)
                wait_for(lambda ends=ends: committed_offsets(bootstrap, unique_name, source, PARTITIONS) == ends,
                         90, "the app to commit the batch")
            windows = app.store("tcounts")
            got = {(key, start): count for key in {r.key for r in batch}
                   for start, count in windows.fetch(key, 0, 10**12)}
            assert got == readable
        finally:
            app.close(timeout=30)

    run(tmp_path / "a", first, second)
    run(tmp_path / "a")  # the same state directory: nothing to restore
    run(tmp_path / "b")  # a fresh one: restored from the changelog
    logged = {}
    for record in read_topic(bootstrap, f"{unique_name}-tcounts-changelog", Serdes.Bytes(), Long, PARTITIONS):
        raw = bytes(record.key)  # record key, window start (8 bytes), sequence number (4)
        logged[(raw[:-12].decode(), int.from_bytes(raw[-12:-4], "big"))] = record.value
    assert logged == counts
    assert {(r.key.key, r.key.window.start): r.value
            for r in read_topic(bootstrap, out, WindowedSerdes.time_windowed(String, SIZE), Long, PARTITIONS)} == counts
