"""The changelog-growth sensor (``compact_grown_changelogs``), ticked with Dagster's sensor utilities against a
changelog on the embedded broker and snapshot manifests written where compaction writes them: it requests the
store's compaction when the changelog grew past the records or the ratio threshold since the newest snapshot,
at most once per interval per store, and stays quiet otherwise."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from assets.compaction import compaction_asset_key
from assets.compaction_growth import GROWTH_SENSOR, changelog_growth, growth_sensor
from assets.platform_spec import PlatformSpec
from assets.resources import KafkaResource
from streaming import Serdes
from streaming.admin import create_topics, watermarks
from streaming.naming import changelog_topic
from streaming.state.snapshots import PartitionSnapshot, SnapshotManifest, utc_now_iso, write_manifest
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import produce

pytestmark = pytest.mark.integration
STRING = Serdes.String()


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def spec_for(application_id: str, snapshots: Path, records: int, ratio: float) -> PlatformSpec:
    return PlatformSpec.model_validate({
        "version": 1, "default_cluster": "embedded",
        "clusters": {"embedded": {"bootstrap_servers": "127.0.0.1:9", "embedded": True}},
        "topics": {f"{application_id}-in": {"partitions": 2, "key": "string", "value": "string"}},
        "apps": {"counter": {"application_id": application_id, "topology": "tests.integration.workloads.counting:topology",
                             "config": "apps/wordcount/config.yaml", "inputs": [f"{application_id}-in"],
                             "stores": [{"name": "counts", "partitions_from": f"{application_id}-in"}]}},
        "snapshots": {"location": str(snapshots), "growth": {"records": records, "ratio": ratio,
                                                             "at_most_every_minutes": 60}},
    })


def write_snapshot(location: Path, application_id: str, snapshot_id: str, covered: dict[int, int], keys: int) -> None:
    """A published manifest covering ``covered`` (next offset per partition) with ``keys`` keys."""
    per_partition = keys // len(covered)
    write_manifest(str(location), SnapshotManifest(
        snapshot_id=snapshot_id, application_id=application_id, store="counts",
        changelog_topic=changelog_topic(application_id, "counts"), created_at=utc_now_iso(),
        partitions={p: PartitionSnapshot(next_offset=o, keys=per_partition, records_read=o) for p, o in covered.items()},
        records_read=sum(covered.values()), keys=per_partition * len(covered), duration_s=0.1))


def tick(sensor: dg.SensorDefinition, bootstrap: str, cursor: str | None) -> tuple[list[dg.RunRequest], str | None, str]:
    # The compaction asset stands in as a spec: the sensor only targets it.
    definitions = dg.Definitions(assets=[dg.AssetSpec(compaction_asset_key("counter", "counts"))], sensors=[sensor])
    context = dg.build_sensor_context(cursor=cursor, definitions=definitions,
                                      resources={"kafka": KafkaResource(bootstrap_servers=bootstrap)})
    data = sensor.evaluate_tick(context)
    assert data.cursor is not None
    return list(data.run_requests or []), data.skip_message, data.cursor


def test_a_grown_changelog_is_compacted_once_per_interval_and_a_quiet_one_is_not(
        bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    changelog = changelog_topic(unique_name, "counts")
    create_topics(bootstrap, {f"{unique_name}-in": 2, changelog: 2})
    produce(bootstrap, changelog, [GeneratedRecord(f"k{i % 20}", str(i), 1_000 + i) for i in range(100)], STRING,
            STRING)
    spec = spec_for(unique_name, tmp_path / "snapshots", records=60, ratio=5.0)
    clock = Clock()
    key = compaction_asset_key("counter", "counts")
    sensor = growth_sensor(spec, {("counter", "counts"): key}, clock=clock)
    assert sensor.name == GROWTH_SENSOR

    # No snapshot: all 100 records would be replayed, past the 60-record threshold.
    requests, skipped, cursor = tick(sensor, bootstrap, None)
    assert skipped is None and [r.asset_selection for r in requests] == [[key]]
    assert requests[0].tags["brook/growth_records"] == "100" and requests[0].tags["brook/growth_snapshot"] == "none"

    # Still grown, 30 minutes later: not again within the hour, and the skip reason says why.
    clock.now += 30 * 60
    requests, skipped, cursor = tick(sensor, bootstrap, cursor)
    assert requests == [] and skipped is not None and "requested 30 min ago (at most every 60 min)" in skipped

    # A snapshot covering all but 10 records of 20 keys: 10 < 60 records, ratio 0.5 < 5: quiet, an hour later too.
    assert changelog_growth(spec, "counter", "counts", {"bootstrap.servers": bootstrap}).since_snapshot == 100
    covered = {p: end - 5 for (_, p), (_, end) in watermarks(bootstrap, [(changelog, 0), (changelog, 1)]).items()}
    write_snapshot(tmp_path / "snapshots", unique_name, "00000001", covered, keys=20)
    clock.now += 60 * 60
    requests, skipped, cursor = tick(sensor, bootstrap, cursor)
    assert requests == [] and skipped is not None
    assert skipped.startswith("no changelog grew past its threshold: counter/counts: 10 records") \
        and "snapshot 00000001 (20 keys, ratio 0.50)" in skipped

    # The ratio alone: a snapshot of 2 keys with the same 10-record tail is 5x its keys.
    write_snapshot(tmp_path / "snapshots", unique_name, "00000002", covered, keys=2)
    requests, skipped, cursor = tick(sensor, bootstrap, cursor)
    assert skipped is None and len(requests) == 1
    assert requests[0].tags["brook/growth_records"] == "10" and requests[0].tags["brook/growth_snapshot"] == "00000002"
    assert requests[0].run_key is not None and requests[0].run_key.startswith("growth/counter/counts/")


def test_the_code_location_has_the_growth_sensor_over_every_compaction_asset() -> None:
    from assets.definitions import defs

    sensor = defs.resolve_sensor_def(GROWTH_SENSOR)
    compaction = {key for key in defs.resolve_asset_graph().get_all_asset_keys() if key.path[0] == "snapshots"}
    assert compaction and sensor.asset_selection is not None
    assert sensor.asset_selection.resolve(defs.resolve_asset_graph()) == compaction
