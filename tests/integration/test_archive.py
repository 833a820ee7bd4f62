"""The topic archive on the embedded broker and real Spark: a day holds exactly its records.

Records are produced with timestamps out of order across midnight (up to 5 minutes behind the
largest before them), two days are materialized through Dagster, and each day's Parquet must hold
exactly the records whose timestamp falls in it; re-materializing a day gives the same records.
"""

import random
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
import yaml

from assets.archive.assets import archive_assets
from assets.archive.layout import UNDECODABLE_DIR, day_dir, raw_dir, read_manifest
from assets.archive.materialize import ArchiveError
from assets.platform_spec import ArchiveSpec, ClusterSpec, PlatformSpec, TopicSpec
from assets.resources import KafkaResource, PlatformResource, spark_resource
from streaming.admin import create_topics
from streaming.serdes import Serdes
from streaming.testing.generators import GeneratedRecord, disordered_timestamps
from streaming.testing.kafka import produce, read_topic

pytestmark = [pytest.mark.slow, pytest.mark.integration]

MIDNIGHT_MS = int(datetime(2023, 11, 15, tzinfo=UTC).timestamp() * 1000)
DAY_14, DAY_15 = date(2023, 11, 14), date(2023, 11, 15)
# "event.type": a field name with a dot (Spark reads an unquoted one as a struct path; issue 16, item 15).
EVENTS = TopicSpec(partitions=2, key="string", value="json",
                   fields={"id": "long", "kind": "string", "event.type": "string"})


class RawBytes:
    """A serde that writes bytes as they are (for records the archive cannot decode)."""

    def serialize(self, obj: Any) -> bytes | None:
        return obj if obj is None or isinstance(obj, bytes) else Serdes.Json().serialize(obj)


def _spec(tmp_path: Path, topic: str, max_disorder_minutes: int) -> PlatformSpec:
    return PlatformSpec(
        version=1, default_cluster="embedded",
        clusters={"embedded": ClusterSpec(bootstrap_servers="127.0.0.1:9092", embedded=True)},
        topics={topic: EVENTS}, apps={},
        archive=ArchiveSpec(location=str(tmp_path / "archive"), start_date=DAY_14,
                            max_disorder_minutes=max_disorder_minutes),
    )


def _records() -> list[GeneratedRecord]:
    """1,200 events from 23:40 to 00:20, 20% of them up to 5 minutes out of order, two undecodable; every fifth
    has headers."""
    times = disordered_timestamps(1_200, random.Random(7), start_ms=MIDNIGHT_MS - 20 * 60_000, step_ms=2_000,
                                  out_of_order=0.2, max_disorder_ms=5 * 60_000)
    records = [GeneratedRecord(f"user-{i % 13}", {"id": i, "kind": "click", "event.type": f"t{i % 3}",
                                                "extra": i % 2 == 0}, ts,
                               headers=[("trace", f"t-{i}".encode()), ("empty", None)] if i % 5 == 0 else [])
               for i, (ts, _, _) in enumerate(times)]
    records[100] = GeneratedRecord("user-1", b"{not json", records[100].timestamp, headers=[("trace", b"bad")])
    records[900] = GeneratedRecord("user-2", b'{"id": "nine hundred"}', records[900].timestamp)
    return records


@pytest.fixture(scope="module")
def topic(broker: Any) -> tuple[str, list[Any]]:
    """A 2-partition topic holding :func:`_records`; returns its name and the records as read back."""
    name = f"events-{random.Random().getrandbits(32):08x}"
    create_topics(broker.bootstrap_servers, {name: 2})
    produce(broker.bootstrap_servers, name, _records(), Serdes.String(), RawBytes())
    return name, read_topic(broker.bootstrap_servers, name, Serdes.String(), Serdes.Bytes(), 2)


def _materialize(spec: PlatformSpec, bootstrap: str, day: date) -> dg.ExecuteInProcessResult:
    """The archive asset for ``day`` with the code location's resources (the session's SparkSession)."""
    path = spec.archive.root().parent / f"platform-{spec.archive.max_disorder_minutes}.yaml"
    path.write_text(yaml.safe_dump(spec.model_dump(mode="json")))
    return dg.materialize(
        archive_assets(spec), partition_key=day.isoformat(),
        resources={"kafka": KafkaResource(bootstrap_servers=bootstrap), "platform": PlatformResource(path=str(path)),
                   "pyspark": spark_resource()},
    )


def _metadata(result: dg.ExecuteInProcessResult) -> dict[str, Any]:
    [event] = result.get_asset_materialization_events()
    return event.materialization.metadata


def _archived(spec: PlatformSpec, topic: str, day: date) -> list[tuple[int, int]]:
    table = ds.dataset(day_dir(spec.archive.root(), topic, day), format="parquet").to_table()
    return sorted(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True))


def _expected(records: list[Any], day: date, decodable: bool = True) -> list[tuple[int, int]]:
    start = int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000)
    bad = {b"{not json", b'{"id": "nine hundred"}'}
    return sorted((r.partition, r.offset) for r in records
                  if start <= r.timestamp < start + 86_400_000 and (r.value not in bad) == decodable)


def test_each_day_holds_exactly_its_records(tmp_path: Path, topic: tuple[str, list[Any]], broker: Any,
                                            spark: Any) -> None:
    name, records = topic
    spec = _spec(tmp_path, name, max_disorder_minutes=10)
    first_of_15th = {p: min(r.offset for r in records if r.partition == p and r.timestamp >= MIDNIGHT_MS)
                     for p in (0, 1)}
    assert any(r.timestamp < MIDNIGHT_MS and r.offset > first_of_15th[r.partition] for r in records), \
        "the data must have records of the 14th after records of the 15th"

    first = _materialize(spec, broker.bootstrap_servers, DAY_14)
    second = _materialize(spec, broker.bootstrap_servers, DAY_15)
    assert _archived(spec, name, DAY_14) == _expected(records, DAY_14)
    assert _archived(spec, name, DAY_15) == _expected(records, DAY_15)

    metadata = _metadata(first)
    assert metadata["rows"].value == len(_expected(records, DAY_14))
    assert metadata["undecodable"].value == len(_expected(records, DAY_14, decodable=False))
    assert metadata["complete"].value is True  # records past 00:10 (midnight + max disorder) exist
    assert metadata["bytes"].value > 0
    assert sum(metadata["rows_per_partition"].value.values()) == metadata["rows"].value
    assert set(metadata["offset_ranges"].value) == {"0", "1"}
    assert _metadata(second)["complete"].value is False  # the 15th could still get records

    undecodable = [row for day in (DAY_14, DAY_15) if (day_dir(spec.archive.root(), name, day) / UNDECODABLE_DIR).exists()
                   for row in ds.dataset(day_dir(spec.archive.root(), name, day) / UNDECODABLE_DIR).to_table().to_pylist()]
    assert {row["value"] for row in undecodable} == {b"{not json", b'{"id": "nine hundred"}'}
    assert all(row["error"].startswith("value: ") for row in undecodable)

    table = ds.dataset(day_dir(spec.archive.root(), name, DAY_14), format="parquet").to_table()
    assert table.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    decoded = table.to_pylist()
    assert {row["kind"] for row in decoded} == {"click"}
    assert {row["event.type"] for row in decoded} == {"t0", "t1", "t2"}
    assert all(dict(row["extra_fields"])["extra"] in ("true", "false") for row in decoded)

    # Re-materializing a day replaces it with the same records, and leaves nothing beside it.
    written_at = read_manifest(spec.archive.root(), name, DAY_14)["written_at"]
    _materialize(spec, broker.bootstrap_servers, DAY_14)
    assert _archived(spec, name, DAY_14) == _expected(records, DAY_14)
    assert read_manifest(spec.archive.root(), name, DAY_14)["written_at"] != written_at
    assert sorted(p.name for p in (spec.archive.root() / name).iterdir()) == ["date=2023-11-14", "date=2023-11-15"]


def test_a_day_keeps_each_of_its_records_as_kafka_held_it(tmp_path: Path, topic: tuple[str, list[Any]],
                                                          broker: Any, spark: Any) -> None:
    """``_raw/``: every record of the day, decodable or not, with its key and value bytes, headers, partition,
    offset and timestamp (what a replay needs); the decoded Parquet beside it is what it was."""
    name, records = topic
    spec = _spec(tmp_path, name, max_disorder_minutes=10)
    _materialize(spec, broker.bootstrap_servers, DAY_14)
    table = ds.dataset(raw_dir(spec.archive.root(), name, DAY_14), format="parquet").to_table()
    raw = sorted((row["partition"], row["offset"], int(row["timestamp"].timestamp() * 1000), row["key"], row["value"],
                  [(h["key"], h["value"]) for h in row["headers"] or []]) for row in table.to_pylist())
    start = int(datetime(2023, 11, 14, tzinfo=UTC).timestamp() * 1000)
    expected = sorted((r.partition, r.offset, r.timestamp, Serdes.String().serialize(r.key), r.value, list(r.headers))
                      for r in records if start <= r.timestamp < start + 86_400_000)
    assert raw == expected
    assert any(headers for *_, headers in raw) and b"{not json" in {value for *_, value, _ in raw}
    assert read_manifest(spec.archive.root(), name, DAY_14)["raw_records"] == len(expected)
    assert _archived(spec, name, DAY_14) == _expected(records, DAY_14)  # the decoded records, as before


def test_disorder_beyond_the_bound_fails_naming_the_record(tmp_path: Path, topic: tuple[str, list[Any]],
                                                           broker: Any, spark: Any) -> None:
    name, _ = topic
    spec = _spec(tmp_path, name, max_disorder_minutes=1)
    with pytest.raises(ArchiveError) as failure:
        _materialize(spec, broker.bootstrap_servers, DAY_14)
    message = str(failure.value)
    assert f"topic {name!r} partition" in message and "offset" in message
    assert "more than the bound of 1 min (archive.max_disorder_minutes" in message
    assert not day_dir(spec.archive.root(), name, DAY_14).exists()
