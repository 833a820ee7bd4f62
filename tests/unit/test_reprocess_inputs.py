"""A day's input for a batch run, from the archive (``assets/reprocess/inputs.py``), and the state days hand on
(``assets/reprocess/state.py``): archive days written here with pyarrow, in the archive's layout."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from assets.archive.decode import HEADERS_TYPE
from assets.archive.layout import RAW_DIR, day_dir
from assets.reprocess.inputs import ReprocessInputError, day_input, day_start_ms, frontier_of, replayed_records
from assets.reprocess.state import DayRecord, ReprocessStateError, previous_state, write_day_state
from streaming.batch import TaskState

D1, D2, D3 = date(2023, 11, 14), date(2023, 11, 15), date(2023, 11, 16)
MIN = 60_000
BOUND = 60  # minutes
TOPIC = "events"


def archive(root: Path, day: date, records: list[tuple[int, int, int]], ranges: dict[int, tuple[int, int, int]],
            written: datetime | None = None, raw: bool = True) -> None:
    """Archive ``day`` of ``TOPIC``: ``records`` (partition, offset, timestamp ms) are the day's; ``ranges`` per
    partition (start, end, records read) as the archive's manifest reports them."""
    path = day_dir(root, TOPIC, day)
    (path / RAW_DIR).mkdir(parents=True)
    pq.write_table(pa.table({
        "partition": pa.array([p for p, _, _ in records], pa.int32()),
        "offset": pa.array([o for _, o, _ in records], pa.int64()),
        "timestamp": pa.array([t * 1000 for _, _, t in records], pa.timestamp("us", tz="UTC")),
        "key": pa.array([f"k{o}".encode() for _, o, _ in records], pa.binary()),
        "value": pa.array([f"v{o}".encode() for _, o, _ in records], pa.binary()),
        "headers": pa.array([[{"key": "h", "value": b"1"}] if o % 2 else None for _, o, _ in records], HEADERS_TYPE),
    }), path / RAW_DIR / "part-0.parquet")
    manifest = {"topic": TOPIC, "day": day.isoformat(), "written_at": (written or datetime.now(UTC)).isoformat(),
                "partitions": {str(p): {"start": s, "end": e, "read": n} for p, (s, e, n) in ranges.items()}}
    if raw:
        manifest["raw_records"] = len(records)
    (path / "_archive.json").write_text(json.dumps(manifest))


def at(day: date, minutes: float) -> int:
    return day_start_ms(day) + int(minutes * MIN)


def three_days(root: Path) -> None:
    """One partition: offsets 0-5 on the 14th, then the 15th with a record 50 min behind after midnight, a record
    at the frontier (01:00 on the 16th), one behind it, and the 16th."""
    timeline = [at(D1, 10), at(D1, 600), at(D1, 1430), at(D2, 5), at(D1, 1435), at(D2, 30),  # 0-5
                at(D2, 700), at(D2, 1439), at(D3, 10), at(D2, 1430), at(D3, 60), at(D3, 20), at(D3, 200)]  # 6-12
    per_day: dict[date, list[tuple[int, int, int]]] = {D1: [], D2: [], D3: []}
    for offset, ts in enumerate(timeline):
        per_day[next(d for d in (D3, D2, D1) if ts >= day_start_ms(d))].append((0, offset, ts))
    archive(root, D1, per_day[D1], {0: (0, 6, 6)})
    archive(root, D2, per_day[D2], {0: (3, 11, 8)})  # 3..10: the manifest's read range and count
    archive(root, D3, per_day[D3], {0: (8, 13, 5)})


def test_a_day_runs_from_the_last_stop_to_each_partitions_first_record_at_or_past_the_frontier(tmp_path: Path) -> None:
    three_days(tmp_path)
    first = day_input(tmp_path, {TOPIC: 1}, D1, BOUND, None)
    assert frontier_of(D1, BOUND) == at(D2, 60)
    assert first.ranges == {(TOPIC, 0): (0, 6)} and first.stops == {(TOPIC, 0): 6} and first.count == 6
    second = day_input(tmp_path, {TOPIC: 1}, D2, BOUND, first.stops)
    # 10 is at the frontier (01:00 on the 16th): it and 11 (behind it) wait for the 16th's run
    assert second.ranges == {(TOPIC, 0): (6, 10)} and second.stops == {(TOPIC, 0): 10} and second.count == 4
    assert second.days_read == {TOPIC: ["2023-11-14", "2023-11-15", "2023-11-16"]}
    records = replayed_records(tmp_path, [first, second], [(TOPIC, 0)])
    assert [[r.offset for r in day[(TOPIC, 0)]] for day in records] == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9]]
    record = records[1][(TOPIC, 0)][1]
    assert (record.timestamp, record.key, record.value, record.headers) == (at(D2, 1439), b"k7", b"v7", [("h", b"1")])


def test_reprocessing_a_day_with_no_archive_of_it_or_the_next_is_refused(tmp_path: Path) -> None:
    three_days(tmp_path)
    with pytest.raises(ReprocessInputError) as refused:
        day_input(tmp_path, {TOPIC: 1}, D3, BOUND, {(TOPIC, 0): 10})
    assert str(refused.value) == (
        "day 2023-11-16 cannot be reprocessed: topic 'events' has no archive for 2023-11-17 (a day's run replays the "
        "records up to 2023-11-17T01:00+00:00, so it needs the archive of the day and of the next): materialize "
        "archive/events partition 2023-11-17")
    with pytest.raises(ReprocessInputError, match="topic 'events' has no archive for 2023-11-20"):
        day_input(tmp_path, {TOPIC: 1}, date(2023, 11, 20), BOUND, None)


def test_an_archive_written_before_the_frontier_or_without_raw_records_is_refused(tmp_path: Path) -> None:
    archive(tmp_path, D1, [(0, 0, at(D1, 5))], {0: (0, 1, 1)}, written=datetime(2023, 11, 15, 0, 30, tzinfo=UTC))
    archive(tmp_path, D2, [], {0: (1, 1, 0)})
    with pytest.raises(ReprocessInputError, match=r"the archive of topic 'events' for 2023-11-14 was written at "
                                                  r"2023-11-15T00:30:00\+00:00, before 2023-11-15T01:00\+00:00"):
        day_input(tmp_path, {TOPIC: 1}, D1, BOUND, None)
    archive(tmp_path / "old", D1, [], {0: (0, 0, 0)}, raw=False)
    archive(tmp_path / "old", D2, [], {0: (0, 0, 0)})
    with pytest.raises(ReprocessInputError, match="written before the archive kept each record's bytes and headers"):
        day_input(tmp_path / "old", {TOPIC: 1}, D1, BOUND, None)


def test_records_of_the_day_before_in_the_days_range_need_its_archive(tmp_path: Path) -> None:
    """The first day starts where the archive started reading it, which may hold late records of the day before."""
    three_days(tmp_path)
    (day_dir(tmp_path, TOPIC, D1) / "_archive.json").unlink()
    for path in (day_dir(tmp_path, TOPIC, D1) / RAW_DIR).iterdir():
        path.unlink()
    day_dir(tmp_path, TOPIC, D1).joinpath(RAW_DIR).rmdir()
    day_dir(tmp_path, TOPIC, D1).rmdir()
    with pytest.raises(ReprocessInputError) as refused:
        day_input(tmp_path, {TOPIC: 1}, D2, BOUND, None)
    assert "partition 0: the archive of 2023-11-15 read 8 records at offsets 3-10, the archives hold 7 of them: " \
           "the archive of 2023-11-14 is missing (materialize archive/events partition 2023-11-14)" in str(refused.value)
    with pytest.raises(ReprocessInputError) as refused:  # the archive's first day: the day before cannot be made
        day_input(tmp_path, {TOPIC: 1}, D2, BOUND, None, start_date=D2)
    assert str(refused.value).endswith(
        "the archive of 2023-11-14 is missing and cannot be made (the archive starts on 2023-11-15): reprocess from "
        "2023-11-16 on, or move archive.start_date back")


def test_days_go_on_from_the_day_before_and_refuse_a_gap(tmp_path: Path) -> None:
    assert previous_state(tmp_path, "orders", D1) is None  # nothing reprocessed yet: the first day
    record = DayRecord(D1, frontier_of(D1, BOUND), {(TOPIC, 0): 6}, {("out", 2): 40},
                       {"0_0": TaskState(partition_times={(TOPIC, 0): 5}, punctuations={"p": [1000]})}, "20231114",
                       ["counts"])
    write_day_state(tmp_path, "orders", record)
    loaded = previous_state(tmp_path, "orders", D2)
    assert loaded == record
    with pytest.raises(ReprocessStateError) as refused:
        previous_state(tmp_path, "orders", D3)
    assert str(refused.value) == (
        "day 2023-11-16 of app 'orders' cannot be reprocessed: it goes on from the state of 2023-11-15, which was not "
        "reprocessed (the last day before it that was: 2023-11-14): reprocess the days in order, from 2023-11-15 (a "
        "backfill does)")
