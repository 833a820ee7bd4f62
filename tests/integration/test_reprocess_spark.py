"""The ``reprocessed/<app>`` job on Spark gives, day by day, exactly what ``streaming.batch.run_day`` gives in one
process over the same records (same records, partitions, batch offsets), carrying its state from day to day
through its own snapshots; it writes its outputs in the archive's layout, and with ``publish: true`` produces them
to side topics (on the session's embedded broker).

The archive of the orders pipeline's inputs is written here with pyarrow, as the archive asset writes it (each
day's offset range found by the archive's own :func:`~assets.archive.day_offsets.transition`), so no broker is
needed: ``tests/integration/test_reprocess_equals_live.py`` does the same against live workers.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from apps.orders import pipeline
from apps.orders.protection import ClearJsonSerde
from assets.archive.day_offsets import transition
from assets.archive.decode import HEADERS_TYPE
from assets.archive.layout import MANIFEST, RAW_DIR, day_dir, read_day
from assets.platform_spec import ArchiveSpec, PlatformSpec, ReprocessSpec, load_platform_spec
from assets.reprocess.inputs import ReprocessInputError, day_start_ms, frontier_of
from assets.reprocess.job import ReprocessRunError, reprocess_day, reprocess_days
from assets.reprocess.publish import PublishError, target_topic
from assets.reprocess.state import ReprocessStateError, day_states, snapshot_id, snapshots_location
from streaming.admin import create_topics
from streaming.batch import BatchPlan, BatchRecord, DayState, run_day, select_day
from streaming.serdes import Serdes
from streaming.state import snapshots
from streaming.testing import generators
from streaming.testing.kafka import read_topic
from tests.unit.batch_inputs import as_partitions

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
DAYS = [date(2023, 11, 14), date(2023, 11, 15), date(2023, 11, 16)]
HOUR, MINUTE = 3_600_000, 60_000
String, Json, Bytes = Serdes.String(), Serdes.Json(), Serdes.Bytes()
OUTPUTS = list(pipeline.OUTPUT_TOPICS)
CLEAR = ClearJsonSerde()


class ListProbe:
    """The archive's record probe (``assets.archive.day_offsets.Probe``) over one partition's timestamps."""

    def __init__(self, timestamps: list[int]) -> None:
        self.timestamps, self.end, self.count = timestamps, len(timestamps), 0

    def first_at(self, offset: int) -> tuple[int, int] | None:
        return None if offset >= self.end else (offset, self.timestamps[offset])


def write_archive(root: Path, topic: str, partitions: dict[int, list[BatchRecord]], day: date, bound_min: int) -> None:
    """``day`` of ``topic`` in the archive's layout (``_raw/`` and the manifest), as the archive asset writes it."""
    start_ms = day_start_ms(day)
    ranges, rows = {}, []
    for partition, records in partitions.items():
        probe = ListProbe([r.timestamp for r in records])
        start, _ = transition(probe, start_ms - bound_min * MINUTE, 0)  # type: ignore[arg-type]
        stop, _ = transition(probe, start_ms + 86_400_000 + bound_min * MINUTE, 0)  # type: ignore[arg-type]
        ranges[str(partition)] = {"start": start, "end": max(start, stop), "read": max(start, stop) - start}
        rows.extend(r for r in records if start_ms <= r.timestamp < start_ms + 86_400_000)
    path = day_dir(root, topic, day)
    (path / RAW_DIR).mkdir(parents=True)
    pq.write_table(pa.table({
        "partition": pa.array([r.partition for r in rows], pa.int32()),
        "offset": pa.array([r.offset for r in rows], pa.int64()),
        "timestamp": pa.array([r.timestamp * 1000 for r in rows], pa.timestamp("us", tz="UTC")),
        "key": pa.array([r.key for r in rows], pa.binary()), "value": pa.array([r.value for r in rows], pa.binary()),
        "headers": pa.array([None] * len(rows), HEADERS_TYPE)}), path / RAW_DIR / "part-0.parquet")
    (path / MANIFEST).write_text(json.dumps({"topic": topic, "day": day.isoformat(), "raw_records": len(rows),
                                             "written_at": datetime.now(UTC).isoformat(), "partitions": ranges}))


def inputs() -> dict[tuple[str, int], list[BatchRecord]]:
    """Users and items at the first midnight; orders every 4 minutes to 03:30 on the fourth day."""
    start = day_start_ms(DAYS[0])
    orders = generators.orders((3 * 24 + 3) * 15 + 8, seed=9, users=50, items=30, catalog_seed=9,
                               start_ms=start + 5 * MINUTE, step_ms=4 * MINUTE, out_of_order=0.1,
                               max_disorder_ms=5 * MINUTE, late=0.03, lateness_ms=2 * HOUR, duplicates=0.05,
                               invalid=0.05)
    return {**as_partitions(pipeline.USERS_TOPIC, generators.users(50, seed=9, start_ms=start), 4, String, Json),
            **as_partitions(pipeline.ITEMS_TOPIC, generators.items(30, seed=9, start_ms=start), 4, String, Json),
            **as_partitions(pipeline.ORDERS_TOPIC, orders, 4, String, Json)}


def spec_for(tmp_path: Path, **reprocess: Any) -> PlatformSpec:
    return load_platform_spec(ROOT / "platform" / "platform.yaml").model_copy(update={
        "archive": ArchiveSpec(location=str(tmp_path / "archive"), start_date=DAYS[0], max_disorder_minutes=15),
        "reprocess": ReprocessSpec(location=str(tmp_path / "reprocessed"), chunk=500, **reprocess), "quality": []})


def spark_outputs(spec: PlatformSpec, topic: str, day: date, clear: bool = False) -> list[tuple[Any, ...]]:
    """A day's reprocessed records of ``topic``: ``clear`` with their encrypted fields decrypted (two runs encrypt
    the same value differently: random nonces)."""
    assert spec.reprocess is not None
    directory = day_dir(spec.reprocess.root() / "orders", topic, day) / RAW_DIR
    if not directory.is_dir():
        return []  # the day wrote nothing to the topic
    value = CLEAR.clear_bytes if clear else (lambda v: v)
    return sorted((r["partition"], r["offset"], int(r["timestamp"].timestamp() * 1000), r["key"], value(r["value"]))
                  for r in ds.dataset(directory, format="parquet").to_table().to_pylist())


def day_state(spec: PlatformSpec, day: date) -> dict[str, Any]:
    assert spec.reprocess is not None
    return json.loads((spec.reprocess.root() / "orders" / "_state" / "days" / f"{day.isoformat()}.json").read_text())


def test_the_spark_job_gives_what_run_day_gives_day_by_day(spark: Any, tmp_path: Path, broker: Any) -> None:
    """Three days in one call of ``reprocess_days`` (a backfill from Python, as platform/runbooks/reprocess-and-backfill.md shows it), with ``publish: true``:
    refused whole, before anything is written, while the side topics do not exist, while the fourth day (which
    the third day's run reads into) has no archive, and when it would start from empty state after the first day.
    The range runs in one set of Spark stages; the second and third days run again alone, each from the state the
    day before left on disk, give the same outputs and state."""
    suffix = f".reprocessed-{uuid.uuid4().hex[:8]}"
    spec = spec_for(tmp_path, publish=True, publish_suffix=suffix)
    assert spec.archive is not None and spec.reprocess is not None
    client = {"bootstrap.servers": broker.bootstrap_servers}
    records = inputs()
    by_topic: dict[str, dict[int, list[BatchRecord]]] = defaultdict(dict)
    for (topic, partition), partition_records in records.items():
        by_topic[topic][partition] = partition_records
    for day in [*DAYS, DAYS[-1] + timedelta(days=1)]:
        if day == DAYS[-1] + timedelta(days=1):  # the third day's run reads into the fourth day's archive
            with pytest.raises(PublishError, match=f"^cannot publish the reprocessed outputs: '[a-z-]+{suffix}' does "
                                                   f"not exist; .*set reprocess.publish: false\\)$"):
                reprocess_days(spec, "orders", DAYS[0], DAYS[-1], spark, client)
            create_topics(broker.bootstrap_servers, {target_topic(topic, suffix): 4 for topic in OUTPUTS})
            with pytest.raises(ReprocessInputError, match="^day 2023-11-16 cannot be reprocessed: topic 'items' has no "
                                                          "archive for 2023-11-17 .*"):
                reprocess_days(spec, "orders", DAYS[0], DAYS[-1], spark, client)
            assert not spec.reprocess.root().exists()
        for topic, partitions in by_topic.items():
            write_archive(spec.archive.root(), topic, partitions, day,
                          spec.topics[topic].disorder_bound_minutes(spec.archive))

    with pytest.raises(ReprocessStateError, match="^day 2023-11-15 of app 'orders' cannot be reprocessed: no day "
                                                  "before it was, and it cannot start from empty state .* reprocess "
                                                  "the days from the archive's first day 2023-11-14 to 2023-11-15"):
        reprocess_days(spec, "orders", DAYS[1], DAYS[-1], spark, client)
    assert not spec.reprocess.root().exists()

    runs = dict(zip(DAYS, reprocess_days(spec, "orders", DAYS[0], DAYS[-1], spark, client), strict=True))
    plan = BatchPlan(pipeline.topology(), "orders", {t: 4 for t in [*by_topic, *OUTPUTS]})
    state: DayState | None = None
    starts: dict[tuple[str, int], int] = {}
    for day in DAYS:
        done = runs[day]
        selected, starts = select_day(records, frontier_of(day, 180), starts)
        expected = run_day(plan, {"application.id": "orders", "commit.interval.ms": 1000}, selected, state, chunk=500)
        state = expected.state
        assert done.stops == starts and done.records_in == sum(len(r) for r in selected.values())
        for topic in OUTPUTS:
            want = sorted((r.partition, r.offset, r.timestamp, r.key, CLEAR.clear_bytes(r.value))
                          for r in expected.outputs.get(topic, []))
            assert spark_outputs(spec, topic, day, clear=True) == want, (day, topic)
            assert done.records_out[topic] == len(want)
        manifest = snapshots.read_manifest(snapshots_location(spec.reprocess.root(), "orders"), "orders",
                                           pipeline.HOURLY_STORE, snapshot_id(day))
        assert manifest.store_identity.generation == "batch" and manifest.keys > 0
    assert [runs[day].started_from for day in DAYS] == ["empty state (first day)", f"the state of {DAYS[0]}",
                                                        f"the state of {DAYS[1]}"]
    assert sum(run.late_records for run in runs.values()) > 0

    decoded = read_day(spec.reprocess.root() / "orders", pipeline.HOURLY_TOPIC, DAYS[1])  # the archive's reader
    assert {"region", "window_start", "users", "lines", "partition", "offset"} <= set(decoded.columns)
    assert len(decoded) == runs[DAYS[1]].records_out[pipeline.HOURLY_TOPIC] > 20

    for topic in OUTPUTS:  # published: every day's records, per partition in the batch's order
        published = read_topic(broker.bootstrap_servers, target_topic(topic, suffix), Bytes, Bytes, 4)
        assert sorted((r.partition, r.offset, r.timestamp, r.key, r.value) for r in published) == [
            (p, index, ts, key, value) for p in range(4) for index, (_, _, ts, key, value) in enumerate(
                r for day in DAYS for r in spark_outputs(spec, topic, day) if r[0] == p)]
        assert sum(runs[day].published[target_topic(topic, suffix)] for day in DAYS) == len(published) > 0

    ranged = {day: (day_state(spec, day), {topic: spark_outputs(spec, topic, day, clear=True) for topic in OUTPUTS})
              for day in DAYS[1:]}
    for day in DAYS[1:]:
        alone = reprocess_day(spark, spec, "orders", day, client)
        assert alone.started_from == f"the state of {day - timedelta(days=1)}"
        assert alone.records_out == runs[day].records_out and alone.stops == runs[day].stops
        assert (day_state(spec, day), {topic: spark_outputs(spec, topic, day, clear=True) for topic in OUTPUTS}) == \
            ranged[day]


def test_a_failed_record_stops_the_range_at_its_day_and_the_days_before_it_are_reprocessed(spark: Any,
                                                                                           tmp_path: Path) -> None:
    """An order that cannot be deserialized on the second day, with the default handler (``fail``): the range's
    one set of stages runs, the first day is finished (outputs, snapshots, state) and the error names the second day,
    its task and the record, and says to go on from that day; nothing of the second and third days is published."""
    spec = spec_for(tmp_path)
    assert spec.archive is not None and spec.reprocess is not None
    records = inputs()
    bad_at = day_start_ms(DAYS[1]) + 12 * HOUR
    by_topic: dict[str, dict[int, list[BatchRecord]]] = defaultdict(dict)
    for (topic, partition), partition_records in records.items():
        if topic == pipeline.ORDERS_TOPIC:
            partition_records = [BatchRecord(r.topic, r.partition, r.offset, r.timestamp, r.key, b"{not json")
                                 if bad_at <= r.timestamp < bad_at + 10 * MINUTE else r
                                 for r in partition_records]
        by_topic[topic][partition] = partition_records
    for day in [*DAYS, DAYS[-1] + timedelta(days=1)]:
        for topic, partitions in by_topic.items():
            write_archive(spec.archive.root(), topic, partitions, day,
                          spec.topics[topic].disorder_bound_minutes(spec.archive))

    with pytest.raises(ReprocessRunError) as failed:
        reprocess_days(spec, "orders", DAYS[0], DAYS[-1], spark)
    message = str(failed.value)
    assert message.startswith(f"day {DAYS[1]} of app 'orders' failed in task 0_"), message
    assert "orders" in message and message.endswith(f"(1 day(s) before it are reprocessed: go on from {DAYS[1]})")
    assert day_states(spec.reprocess.root(), "orders") == [DAYS[0]]
    for topic in OUTPUTS:
        assert day_dir(spec.reprocess.root() / "orders", topic, DAYS[0]).is_dir()
        assert not day_dir(spec.reprocess.root() / "orders", topic, DAYS[1]).exists()
        assert not list((spec.reprocess.root() / "orders" / topic).glob(".*"))  # no staging or run directory left
